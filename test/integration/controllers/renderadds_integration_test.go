package controllers_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestRenderChangeSaysWhatItAdds: an operator release whose render adds a child object and a
// container image the beamline does not run yet says so before the change reaches the beamline.
// The world an older release left is made by hand while no operator runs: the beamline's headless
// Service absent and its PostgreSQL StatefulSet running an older image. The new build (the build switch's
// annotation) then finds a render change on the held beamline: status.pendingRollout names the
// Service and the image it adds, the RolloutPending condition and one RenderChanged Event say them,
// and the beamline keeps its template until the hold ends.
func TestRenderChangeSaysWhatItAdds(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "renderadds")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	markReady(t, g, ns, n.Postgres)
	markReady(t, g, ns, n.Tiled)
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(1)))
	waitQuiet(t, op)
	op.stop()

	// Beamtime on a; the children as an older release left them.
	c := getCluster(t, g, ns)
	c.Spec.Instances[0].Hold = true
	c.Spec.Rollout = &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Expect(env.Client.Delete(ctxT(t), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.HeadlessService}})).To(Succeed())
	image := getInstance(t, g, ns, "fleet-a").Spec.Database.Managed.Image
	g.Expect(image).NotTo(BeEmpty())
	const older = "registry.example.org/postgres:older"
	// As the older release applied it: the operator's own apply of the same fields, with the older
	// image (not another writer's edit, which the operator would undo at once).
	db := &appsv1.StatefulSet{}
	g.Expect(exists(t, db, ns, n.Postgres)).To(BeTrue())
	ac, err := appsv1ac.ExtractStatefulSet(db, tiledv1alpha1.FieldOwner)
	g.Expect(err).NotTo(HaveOccurred())
	var swapped int
	for _, cs := range [][]corev1ac.ContainerApplyConfiguration{ac.Spec.Template.Spec.InitContainers, ac.Spec.Template.Spec.Containers} {
		for i := range cs {
			if ptr.Deref(cs[i].Image, "") == image {
				cs[i].Image = ptr.To(older)
				swapped++
			}
		}
	}
	g.Expect(swapped).To(BeNumerically(">", 0))
	g.Expect(env.Client.Apply(ctxT(t), ac, client.FieldOwner(tiledv1alpha1.FieldOwner), client.ForceOwnership)).To(Succeed())
	markReady(t, g, ns, n.Postgres)
	restore := render.SetBuildPodAnnotationForTest("example.org/build=adds")
	t.Cleanup(restore) // after the operator below stops (cleanups run last first)
	op = startOperator(t, ns)

	added := "it adds image " + image + " and object Service/" + n.HeadlessService
	g.Eventually(func(g Gomega) {
		cur := getInstance(t, g, ns, "fleet-a")
		p := cur.Status.PendingRollout
		g.Expect(p).NotTo(BeNil(), "conditions: %+v", cur.Status.Conditions)
		g.Expect(p.AddedObjects).To(Equal([]string{"Service/" + n.HeadlessService}))
		g.Expect(p.AddedImages).To(Equal([]string{image}))
		pending := meta.FindStatusCondition(getInstance(t, g, ns, "fleet-a").Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(pending).NotTo(BeNil())
		g.Expect(pending.Message).To(ContainSubstring(added))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	// The Service is created (only the Tiled StatefulSet waits); what the change adds stays
	// recorded as found, and the held beamline keeps its template.
	g.Expect(exists(t, &corev1.Service{}, ns, n.HeadlessService)).To(BeTrue())
	cur := getInstance(t, g, ns, "fleet-a")
	g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "a pending change leaves the instance serving")
	p := cur.Status.PendingRollout
	g.Expect(p.AddedObjects).To(Equal([]string{"Service/" + n.HeadlessService}))
	sts := &appsv1.StatefulSet{}
	g.Expect(exists(t, sts, ns, n.Tiled)).To(BeTrue())
	g.Expect(sts.Spec.Template.Annotations).NotTo(HaveKey("example.org/build"))

	// One Event for the change, naming what it adds.
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Reason == controllers.ReasonRenderChanged && e.Regarding.Name == "fleet-a" {
			notes = append(notes, e.Note)
		}
	}
	g.Expect(notes).To(HaveLen(1), strings.Join(notes, "\n"))
	g.Expect(notes[0]).To(ContainSubstring(added))
}
