package webhooks_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/webhooks"
)

// Rotating the serving certificate three times never makes the API server distrust the webhooks:
// each certificate is served in turn, and the caBundle (the current and the previous CA) is applied
// under the operator's field owner.
func TestRotationKeepsTheAPIServerCalling(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	setupNamespace(t, s, "rotation")
	ctx := context.Background()
	f := loadBase(t, "rotation")
	expandedDryRun := func(g Gomega) {
		in := f.Terse.DeepCopy()
		g.Expect(env.Client.Create(ctx, in, client.DryRunAll)).To(Succeed())
		g.Expect(in.Provenance).NotTo(BeEmpty())
	}
	first := s.hooks.Certs.ServingCertificate().SerialNumber.String()
	g.Expect(s.servedSerial()).To(Equal(first))
	seen := map[string]bool{first: true}
	for i := 0; i < 3; i++ {
		g.Expect(s.hooks.Certs.Rotate(ctx)).To(Succeed())
		// Whichever certificate is served during the switch, the API server trusts it.
		expandedDryRun(g)
		next := s.hooks.Certs.ServingCertificate().SerialNumber.String()
		g.Expect(seen).NotTo(HaveKey(next))
		seen[next] = true
		g.Eventually(s.servedSerial).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(next))
		expandedDryRun(g)
		profile := f.Profiles[1].DeepCopy()
		profile.Name = fmt.Sprintf("after-rotation-%d", i)
		g.Expect(env.Client.Create(ctx, profile, client.DryRunAll)).To(Succeed())
	}
	m, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhooks.MutatingConfigurationName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Webhooks[0].ClientConfig.CABundle).To(Equal(s.hooks.Certs.CABundle()))
	g.Expect(bytes.Count(m.Webhooks[0].ClientConfig.CABundle, []byte("BEGIN CERTIFICATE"))).To(Equal(2), "the current and the previous CA")
	// The CA bundle is the operator's, applied server-side.
	owners := []string{}
	for _, mf := range m.ManagedFields {
		owners = append(owners, mf.Manager)
	}
	g.Expect(owners).To(ContainElement(v1alpha1.FieldOwner))
}
