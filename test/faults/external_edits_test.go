package faults_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// Another field manager edits an operator-owned field (replicas) and a field the operator does not
// set (an annotation) of a StatefulSet: the first is restored, the second left alone, and the
// instance reports it (condition ExternalEdits, reason FieldsManagedElsewhere).
func testExternalEdits(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-edits", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	name := "nsls2-bmm"
	s := &appsv1.StatefulSet{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	replicas := ptr.Deref(s.Spec.Replicas, 1)
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.Replicas = ptr.To(replicas + 4)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations["nsls2.bnl.gov/on-call"] = "controls-group"
	g.Expect(env.Client.Patch(ctxT(t), s, patch, client.FieldOwner("ops-console"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		s := &appsv1.StatefulSet{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		g.Expect(ptr.Deref(s.Spec.Replicas, 1)).To(Equal(replicas), "the operator-owned field is restored")
		g.Expect(s.Annotations).To(HaveKeyWithValue("nsls2.bnl.gov/on-call", "controls-group"), "the other manager's field is left alone")
		ti := &tiledv1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, ti)).To(Succeed())
		cond := condition(ti.Status.Conditions, controllers.ConditionExternalEdits)
		g.Expect(cond).NotTo(BeNil(), "no ExternalEdits condition")
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(controllers.ReasonFieldsManaged))
		g.Expect(cond.Message).To(ContainSubstring("StatefulSet/" + name + " has fields managed by ops-console"))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	// It stays restored, and nothing else moved.
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	g.Expect(ptr.Deref(s.Spec.Replicas, 1)).To(Equal(replicas))
	checkFleet(t, g, c)
}
