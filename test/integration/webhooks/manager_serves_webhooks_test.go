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
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The operator's manager serves the webhooks when ManagerOptions.Webhooks is set: it builds the
// webhook server, publishes its self-signed CA, and the API server calls it. The mutating webhook
// expands with the manager's built-in defaults, a replaced built-in image included (as the
// controllers do).
func TestNewManagerServesWebhooks(t *testing.T) {
	g := NewWithT(t)
	port := freePort(t)
	const mirrored = "registry.example.org/valkey/valkey:8.1"
	builtins, err := expansion.DefaultBuiltins().WithImages(map[string]string{expansion.ImageCache: mirrored})
	g.Expect(err).NotTo(HaveOccurred())
	op, err := operator.NewManager(env.Config, operator.ManagerOptions{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", Builtins: builtins,
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
		g.Expect(probe.Spec.Streaming.Managed.Image).To(Equal(mirrored))
		g.Expect(probe.Provenance).To(HaveKeyWithValue("spec.streaming.managed.image", "default (RELATED_IMAGE_CACHE)"))
	}).WithTimeout(time.Minute).Should(Succeed())
}
