package faults_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"

	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The webhook server (the operator's manager) goes down, then comes back. While down, as
// docs/webhooks.md says: TiledInstance webhooks fail open (a terse standalone instance is stored as
// written), TiledProfile and TiledCluster create/update fail closed (refused, naming the webhook),
// deletes are never blocked, the fleet's objects are untouched. Once up: the refused changes go
// through, the terse instance is expanded and reconciled by the controller, the fleet is intact.
func testWebhookDown(t *testing.T, g Gomega) {
	defer func() {
		ctx := context.Background()
		_ = env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhooks.MutatingConfigurationName, metav1.DeleteOptions{})
		_ = env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, webhooks.ValidatingConfigurationName, metav1.DeleteOptions{})
	}()
	port := freePort(g)
	hooks := func() *webhooks.Options {
		return &webhooks.Options{Host: "127.0.0.1", Port: port, CertDir: filepath.Join(t.TempDir(), "certs"), SelfSigned: true,
			Certs: webhooks.CertOptions{URL: fmt.Sprintf("https://127.0.0.1:%d", port), Validity: time.Hour}}
	}
	ns, _ := newFleet(t, g, "faults-webhooks", nil)
	op := startOperator(t, g, ns, hooks())
	waitWebhooks(t, g, ns)
	c := defaultCluster(fleetN)(ns)
	g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
	waitStampedOut(t, g, op, ns, fleetN)
	rvs := fleet.ResourceVersions(checkFleet(t, g, c))
	spare := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spare", Labels: map[string]string{"facility": "spare"}},
		Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"spare": "yes"}}}}}
	g.Expect(env.Client.Create(ctxT(t), spare)).To(Succeed())

	_ = op.Stop()
	g.Eventually(func() error {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}).WithTimeout(time.Minute).Should(HaveOccurred(), "the webhook server still answers")

	// TiledInstance: fail open.
	terse := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "standalone"},
		Spec: tiledv1alpha1.TiledInstanceSpec{ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": fleet.Facility}}}}
	g.Expect(env.Client.Create(ctxT(t), terse)).To(Succeed(), "a TiledInstance is refused while the webhooks are down")
	g.Expect(terse.Provenance).To(BeEmpty(), "the instance was expanded, so a webhook answered")
	// TiledProfile and TiledCluster create/update: fail closed.
	extra := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-late", Labels: map[string]string{"facility": "other"}},
		Spec: tiledv1alpha1.TiledProfileSpec{Priority: 20, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"nsls2.bnl.gov/late": "yes"}}}}}
	err := env.Client.Create(ctxT(t), extra.DeepCopy())
	g.Expect(err).To(HaveOccurred(), "a TiledProfile was accepted while the webhooks are down")
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledprofile.tiled.blueskyproject.io"`))
	cl := getCluster(t, g, ns)
	cl.Spec.Instances = cl.Spec.Instances[:len(cl.Spec.Instances)-1]
	err = env.Client.Update(ctxT(t), cl)
	g.Expect(err).To(HaveOccurred(), "a TiledCluster update was accepted while the webhooks are down")
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledcluster.tiled.blueskyproject.io"`))
	// Deletes are never blocked (the profile delete webhook only warns, and fails open).
	g.Expect(env.Client.Delete(ctxT(t), spare)).To(Succeed(), "a TiledProfile delete was blocked while the webhooks are down")
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	delete(objs, "TiledInstance/standalone")
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty(), "the fleet changed while the operator was down")

	// Up again.
	op2 := startOperator(t, g, ns, hooks())
	waitWebhooks(t, g, ns)
	g.Expect(env.Client.Create(ctxT(t), extra.DeepCopy())).To(Succeed(), "the refused profile is accepted once the webhooks are back")
	cl = getCluster(t, g, ns)
	cl.Spec.Instances = cl.Spec.Instances[:len(cl.Spec.Instances)-1]
	g.Expect(env.Client.Update(ctxT(t), cl)).To(Succeed(), "the refused cluster update is accepted once the webhooks are back")
	// The terse instance written while the webhooks were down is expanded by the controller.
	g.Eventually(func(g Gomega) {
		ti := &tiledv1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "standalone"}, ti)).To(Succeed())
		g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation))
		g.Expect(condition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
		s := &appsv1.StatefulSet{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: fleet.NamesOf(ti).Tiled}, s)).To(Succeed())
		g.Expect(s.Spec.Template.Spec.Containers).NotTo(BeEmpty())
	}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	waitStampedOut(t, g, op2, ns, fleetN-1)
	cl = getCluster(t, g, ns)
	removed := c.Spec.Instances[len(c.Spec.Instances)-1].Name
	checkFleet(t, g, cl, removed)
	// The removed beamline's data (Retain, the default) is still there.
	gone := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-" + removed}}
	for _, claim := range []string{fleet.NamesOf(gone).DataClaim, fleet.NamesOf(gone).DatabaseClaim} {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: claim}, &corev1.PersistentVolumeClaim{})).To(Succeed(), "retained claim %s", claim)
	}
}

// waitWebhooks waits until the API server calls the webhooks: a dry-run terse instance comes back
// expanded.
func waitWebhooks(t *testing.T, g Gomega, ns string) {
	g.Eventually(func(g Gomega) {
		probe := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
		g.Expect(env.Client.Create(ctxT(t), probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Provenance).NotTo(BeEmpty())
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

func freePort(g Gomega) int {
	port, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	return port
}
