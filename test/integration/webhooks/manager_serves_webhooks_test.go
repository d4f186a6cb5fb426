package webhooks_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The operator's manager serves the webhooks when ManagerOptions.Webhooks is set: it builds the
// webhook server, publishes its self-signed CA, and the API server calls it.
func TestNewManagerServesWebhooks(t *testing.T) {
	g := NewWithT(t)
	port := freePort(t)
	op, err := operator.NewManager(env.Config, operator.ManagerOptions{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		Webhooks: &webhooks.Options{Host: "127.0.0.1", Port: port, CertDir: filepath.Join(t.TempDir(), "certs"), SelfSigned: true,
			Certs: webhooks.CertOptions{URL: fmt.Sprintf("https://127.0.0.1:%d", port)}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = op.Start(ctx)
	}()
	defer func() { cancel(); <-done }()
	g.Eventually(func(g Gomega) {
		probe := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}}
		g.Expect(env.Client.Create(context.Background(), probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Provenance).To(HaveKeyWithValue("spec.tiled.image", "default"))
	}).WithTimeout(time.Minute).Should(Succeed())
}
