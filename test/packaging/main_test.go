package packaging

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bluesky/tiled-operator/test/support/testenv"
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
	// Informers list, then watch, as they do against API servers that cannot stream the initial
	// list in a watch (before 1.32; the operator supports 1.30): TestManagerUsesEveryPermission then
	// sees the list verb used, which newer API servers would not ask for.
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The managers some tests run log to the test output with TILED_TEST_LOG set, nowhere otherwise.
	if os.Getenv("TILED_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	os.Exit(code)
}
