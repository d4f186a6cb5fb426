package controllers_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// buildPath is the path the build switch's annotation changes in every Tiled pod template.
const buildPath = "spec.template.metadata.annotations[example.org/build]"

// TestRenderChangeRolls: an operator release that renders a different Tiled pod template (here the
// build switch's annotation) for instances whose spec did not change rolls it like a change of the
// spec. Three ready beamlines with maxUnavailable 1, b held (beamtime), and a standalone instance;
// the operator restarts as the new build. The standalone instance changes at once; a and c change
// one at a time (the second once the first is Ready again); b is listed held with the path that
// would change and keeps its template; every instance's Event names the path. Released while the
// cluster is paused, b does not change until the pause ends.
func TestRenderChangeRolls(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "renderchange")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a", "b", "c")...)
	solo := &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "solo"},
		Spec: tiledv1alpha1.TiledInstanceSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
		},
	}
	createAll(t, g, solo)
	waitForStampOut(t, g, op, ns, "fleet", 3)
	instances := []string{"fleet-a", "fleet-b", "fleet-c", "solo"}
	tiled := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, i)).Tiled }
	g.Eventually(func() bool { return exists(t, &appsv1.StatefulSet{}, ns, tiled("solo")) }, time.Minute, 250*time.Millisecond).Should(BeTrue())
	for _, i := range instances {
		markReady(t, g, ns, fleet.NamesOf(getInstance(t, g, ns, i)).Postgres)
		markReady(t, g, ns, tiled(i))
	}
	instanceReady := func(i string) bool {
		ti := getInstance(t, g, ns, i)
		return ti.Status.ObservedGeneration == ti.Generation && meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)
	}
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(3)))
	g.Eventually(func() bool { return instanceReady("solo") }, time.Minute, 250*time.Millisecond).Should(BeTrue())
	waitQuiet(t, op)
	op.stop()

	// Beamtime on b, budget 1; then the new build starts.
	c := getCluster(t, g, ns)
	c.Spec.Instances[1].Hold = true
	c.Spec.Rollout = &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	restore := render.SetBuildPodAnnotationForTest("example.org/build=prime")
	t.Cleanup(restore) // after the operator below stops (cleanups run last first)
	op = startOperator(t, ns)

	build := func(i string) string {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, tiled(i))).To(BeTrue())
		return s.Spec.Template.Annotations["example.org/build"]
	}
	updated := func() (n int) {
		for _, i := range []string{"fleet-a", "fleet-c"} {
			if build(i) == "prime" {
				n++
			}
		}
		return n
	}
	g.Eventually(func() string { return build("solo") }, time.Minute, 250*time.Millisecond).Should(Equal("prime"), "a standalone instance applies a render change at once")
	for want := 1; want <= 2; want++ {
		g.Eventually(updated, time.Minute, 250*time.Millisecond).Should(Equal(want))
		waitQuiet(t, op)
		g.Expect(updated()).To(Equal(want), "more than maxUnavailable instances changed at once")
		g.Expect(build("fleet-b")).To(BeEmpty(), "the held beamline's pod template changed")
		for _, i := range []string{"fleet-a", "fleet-c"} {
			if build(i) == "prime" {
				g.Expect(getInstance(t, g, ns, i).Status.PendingRollout).To(BeNil())
				markReady(t, g, ns, tiled(i)) // the kubelet brings the new pods up
			}
		}
	}
	markReady(t, g, ns, tiled("solo"))

	// b waits, held, and says what would change; the cluster lists it.
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-b")
		g.Expect(ti.Status.PendingRollout).NotTo(BeNil())
		g.Expect(ti.Status.PendingRollout.StatefulSet).To(Equal(tiled("fleet-b")))
		g.Expect(ti.Status.PendingRollout.Differs).To(ContainElement(buildPath))
		g.Expect(ti.Status.PendingRollout.Since).NotTo(BeNil())
		pending := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(pending).NotTo(BeNil())
		g.Expect(pending.Reason).To(Equal(controllers.ReasonRenderChanged))
		g.Expect(pending.Message).To(ContainSubstring(buildPath))
		g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "a pending change leaves the instance serving")
		st := getCluster(t, g, ns).Status
		g.Expect(st.ReadyInstances).To(Equal(int32(3)))
		g.Expect(st.HeldInstances).To(Equal(int32(1)))
		g.Expect(st.Held).To(HaveLen(1))
		g.Expect(st.Held[0].Name).To(Equal("fleet-b"))
		g.Expect(st.Held[0].Fields).To(ContainElement(ContainSubstring(buildPath)))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	g.Expect(build("fleet-b")).To(BeEmpty())
	// An Event per instance names what differs.
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
		named := map[string]bool{}
		for _, e := range list.Items {
			if e.Reason == controllers.ReasonRenderChanged && strings.Contains(e.Note, buildPath) {
				named[e.Regarding.Name] = true
			}
		}
		for _, i := range instances {
			g.Expect(named).To(HaveKey(i), "no RenderChanged Event for %s", i)
		}
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())

	// Released while the cluster is paused: nothing changes until the pause ends.
	c = getCluster(t, g, ns)
	c.Spec.Paused = true
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	c = getCluster(t, g, ns)
	c.Spec.Instances[1].Hold = false
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	time.Sleep(2 * time.Second)
	waitQuiet(t, op)
	g.Expect(build("fleet-b")).To(BeEmpty(), "a paused cluster rolled a render change")
	c = getCluster(t, g, ns)
	c.Spec.Paused = false
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() string { return build("fleet-b") }, time.Minute, 250*time.Millisecond).Should(Equal("prime"))
	markReady(t, g, ns, tiled("fleet-b"))
	g.Eventually(func(g Gomega) {
		st := getCluster(t, g, ns).Status
		g.Expect(st.ReadyInstances).To(Equal(int32(3)))
		g.Expect(st.HeldInstances).To(BeZero())
		g.Expect(st.PendingInstances).To(BeZero())
		for _, i := range instances {
			ti := getInstance(t, g, ns, i)
			g.Expect(ti.Status.PendingRollout).To(BeNil())
			g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)).To(BeNil())
			g.Expect(ti.Annotations).NotTo(HaveKey(tiledv1alpha1.AnnotationApprovedTemplate), "the approval goes once the change rolled")
		}
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}
