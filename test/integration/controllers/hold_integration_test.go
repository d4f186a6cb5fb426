package controllers_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestHoldDuringBeamtime: one of three ready beamlines is held (in user operation) when a profile
// change reaches every pod template. The other two roll, one at a time; the held one keeps its
// template, the cluster lists it with the field that would change and stays Ready, and
// `kubectl get tc` shows HELD 1. Released while another beamline is unavailable, it waits for the
// rollout budget, then rolls, and the cluster's status forgets it.
func TestHoldDuringBeamtime(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "hold")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a", "b", "c")...)
	waitForStampOut(t, g, op, ns, "fleet", 3)
	tiled := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, "fleet-"+i)).Tiled }
	allReady := func() {
		for _, i := range []string{"a", "b", "c"} {
			markReady(t, g, ns, tiled(i))
		}
	}
	for _, i := range []string{"a", "b", "c"} {
		markReady(t, g, ns, fleet.NamesOf(getInstance(t, g, ns, "fleet-"+i)).Postgres)
	}
	allReady()
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(3)))
	waitQuiet(t, op)

	// Beamtime on b: a hold with nothing to hold back changes nothing and holds nothing.
	c := getCluster(t, g, ns)
	c.Spec.Instances[1].Hold = true
	c.Spec.Rollout = &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() int64 { return getCluster(t, g, ns).Status.ObservedGeneration }, time.Minute, 250*time.Millisecond).Should(Equal(c.Generation))
	waitQuiet(t, op)
	g.Expect(getCluster(t, g, ns).Status.HeldInstances).To(BeZero())
	g.Expect(getCluster(t, g, ns).Status.Held).To(BeEmpty())

	// A facility-wide change of every pod template.
	p := &tiledv1alpha1.TiledProfile{}
	g.Expect(exists(t, p, ns, "defaults")).To(BeTrue())
	p.Spec.Tiled.PodAnnotations["team"] = "b"
	g.Expect(env.Client.Update(ctxT(t), p)).To(Succeed())

	team := func(i string) string {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, tiled(i))).To(BeTrue())
		return s.Spec.Template.Annotations["team"]
	}
	updated := func() (n int) {
		for _, i := range []string{"a", "c"} {
			if team(i) == "b" {
				n++
			}
		}
		return n
	}
	for want := 1; want <= 2; want++ {
		g.Eventually(updated, time.Minute, 250*time.Millisecond).Should(Equal(want))
		waitQuiet(t, op)
		g.Expect(updated()).To(Equal(want), "more than maxUnavailable instances changed at once")
		g.Expect(team("b")).To(Equal("a"), "the held beamline's pod template changed")
		st := getCluster(t, g, ns).Status
		g.Expect(st.HeldInstances).To(Equal(int32(1)))
		g.Expect(st.PendingInstances).To(Equal(int32(2 - want)))
		allReady() // the kubelet brings the new pods up
	}

	// Everything that can change has; the held beamline is listed, and the cluster is Ready.
	g.Eventually(func(g Gomega) {
		st := getCluster(t, g, ns).Status
		g.Expect(st.ReadyInstances).To(Equal(int32(3)))
		g.Expect(st.PendingInstances).To(BeZero())
		g.Expect(st.HeldInstances).To(Equal(int32(1)))
		g.Expect(st.UpdatedInstances).To(Equal(int32(2)))
		g.Expect(st.Held).To(HaveLen(1))
		g.Expect(st.Held[0].Name).To(Equal("fleet-b"))
		g.Expect(st.Held[0].Fields).To(ContainElement("spec.tiled.podAnnotations.team"))
		g.Expect(st.Held[0].FieldCount).To(Equal(int32(len(st.Held[0].Fields))))
		g.Expect(st.Held[0].Since).NotTo(BeNil())
		ready := meta.FindStatusCondition(st.Conditions, controllers.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ready.Reason).To(Equal(controllers.ReasonInstancesHeld))
		g.Expect(ready.Message).To(Equal("1 instance held (beamtime): fleet-b; 3 of 3 ready"))
		g.Expect(meta.FindStatusCondition(st.Conditions, controllers.ConditionReconciling)).To(BeNil())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(kstatusOf(t, g, getCluster(t, g, ns))).To(Equal(status.CurrentStatus))
	g.Expect(getInstance(t, g, ns, "fleet-b").Spec.Tiled.PodAnnotations).To(HaveKeyWithValue("team", "a"))
	g.Expect(team("b")).To(Equal("a"))

	out, stderr, err := env.Kubectl(ctxT(t), "get", "tc", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2))
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	column := func(name string) string {
		for i, h := range header {
			if h == name && i < len(row) {
				return row[i]
			}
		}
		return "no column " + name
	}
	g.Expect(column("READY")).To(Equal("3"), out)
	g.Expect(column("HELD")).To(Equal("1"), out)
	g.Expect(column("PENDING")).To(Equal("0"), out)

	// Beamtime ends while a is down: b's change waits for the budget (a is unavailable) ...
	setStatefulSetReady(t, g, ns, tiled("a"), 0)
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(2)))
	c = getCluster(t, g, ns)
	c.Spec.Instances[1].Hold = false
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		st := getCluster(t, g, ns).Status
		g.Expect(st.ObservedGeneration).To(Equal(c.Generation))
		g.Expect(st.HeldInstances).To(BeZero())
		g.Expect(st.Held).To(BeEmpty())
		g.Expect(st.PendingInstances).To(Equal(int32(1)))
		rolling := meta.FindStatusCondition(st.Conditions, controllers.ConditionReconciling)
		g.Expect(rolling).NotTo(BeNil())
		g.Expect(rolling.Reason).To(Equal(controllers.ReasonRollingOut))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	g.Expect(team("b")).To(Equal("a"), "a released beamline rolled beyond maxUnavailable")

	// ... and rolls when a is back.
	markReady(t, g, ns, tiled("a"))
	g.Eventually(func() string { return team("b") }, time.Minute, 250*time.Millisecond).Should(Equal("b"))
	allReady()
	g.Eventually(func(g Gomega) {
		st := getCluster(t, g, ns).Status
		g.Expect(st.ReadyInstances).To(Equal(int32(3)))
		g.Expect(st.UpdatedInstances).To(Equal(int32(3)))
		g.Expect(st.PendingInstances).To(BeZero())
		g.Expect(st.HeldInstances).To(BeZero())
		ready := meta.FindStatusCondition(st.Conditions, controllers.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(controllers.ReasonAllReady))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(kstatusOf(t, g, getCluster(t, g, ns))).To(Equal(status.CurrentStatus))
}

// TestHoldCreatesNewInstances: a hold protects a running beamline only; a held beamline that does
// not exist yet is created.
func TestHoldCreatesNewInstances(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "hold-new")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, tiledv1alpha1.ClusterInstance{Name: "a", Hold: true})
	waitForStampOut(t, g, op, ns, "fleet", 1)
	g.Expect(getInstance(t, g, ns, "fleet-a").Spec.Tiled.PodAnnotations).To(HaveKeyWithValue("team", "a"))
	g.Expect(getCluster(t, g, ns).Status.HeldInstances).To(BeZero())
}
