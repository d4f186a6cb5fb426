package webhooks_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// With the webhook server stopped, TiledInstance writes pass unexpanded (fail open), TiledProfile
// and TiledCluster creates and updates are refused (fail closed), and deletes go through.
func TestFailurePolicyWithTheServerStopped(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	f := setupNamespace(t, s, "down")
	ctx := context.Background()
	s.stop()
	g.Eventually(func() error { _, err := s.servedSerial(); return err }).WithTimeout(time.Minute).Should(HaveOccurred())

	// TiledInstance webhooks fail open: the terse instance is stored as written (the instance
	// controller expands it when it reconciles).
	in := f.Terse.DeepCopy()
	g.Expect(env.Client.Create(ctx, in)).To(Succeed())
	g.Expect(in.Provenance).To(BeEmpty())
	g.Expect(in.Spec.Database).To(BeNil())

	// TiledProfile and TiledCluster create and update fail closed.
	p := f.Profiles[1].DeepCopy()
	p.Name, p.ResourceVersion = "while-down", ""
	err := env.Client.Create(ctx, p)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledprofile.tiled.blueskyproject.io"`))
	c := &v1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "down", Name: "nsls2"}, c)).To(Succeed())
	c.Spec.Paused = true
	err = env.Client.Update(ctx, c)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledcluster.tiled.blueskyproject.io"`))

	// Deleting a profile (the delete webhook only warns) and a cluster is never blocked.
	g.Expect(env.Client.Delete(ctx, &f.Profiles[4])).To(Succeed())
	g.Expect(env.Client.Delete(ctx, c)).To(Succeed())
	var status *apierrors.StatusError
	g.Expect(errors.As(err, &status)).To(BeTrue())
	g.Expect(strings.ToLower(status.ErrStatus.Message)).To(ContainSubstring("connect"))
}
