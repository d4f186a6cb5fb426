package packaging

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/bluesky/tiled-operator/hack/testenv"
)

var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

// controlPlane starts one kube-apiserver and etcd for the tests of this package that need them,
// without the operator's CRDs: the tests install what config/default renders. Its Service range is
// loopback (serviceCIDR), so that the API server can call a webhook Service on this machine.
func controlPlane(t *testing.T) *testenv.Env {
	t.Helper()
	envOnce.Do(func() {
		env, envErr = testenv.Start(testenv.Options{SkipCRDs: true, APIServerFlags: map[string]string{"service-cluster-ip-range": serviceCIDR}})
	})
	if envErr != nil {
		t.Fatalf("starting the control plane: %v", envErr)
	}
	return env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	os.Exit(code)
}
