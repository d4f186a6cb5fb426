package stuckpods_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestWaitingForADependencyTakesTheBudget is the cluster's side of "dependencies before
// dependants" (issue 43), with the real StatefulSet controller: a fleet of two serving beamlines,
// rollout budget 1, has streaming turned on in its profile. The beamline the rollout reaches first
// gets its cache, whose pod cannot pull its image; its Tiled change waits for it (RolloutPending
// WaitingForDependency) while its Tiled pod stays Ready. That wait is a change under way: the other
// beamline's instance keeps its expansion until the first has its cache Ready, its Tiled pod
// replaced and Ready again.
//
// While the cache is not Ready the instance is not Ready either, so this holds the budget even
// without tiledcluster_plan.go counting WaitingForDependency; that count closes the moment the
// dependency looks ready by its pods' count while the Tiled change still waits for it (e2e case 21
// saw both beamlines without a Ready Tiled pod then, budget 1). That moment is short here: with
// the count removed this test failed once in two runs (the first beamline's Tiled StatefulSet
// never got its new template within a minute), and passed once.
func TestWaitingForADependencyTakesTheBudget(t *testing.T) {
	g := NewWithT(t)
	ns := fixture.Namespace(ctxT(t), t, env.Client, "budget")
	fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: fixture.InProcess(ns), SyncTimeout: time.Minute})
	makeFleet(t, ns, tiledv1alpha1.InstanceTemplate{Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(false)}},
		tiledv1alpha1.ClusterInstance{Name: "a"}, tiledv1alpha1.ClusterInstance{Name: "b"})
	instance := func(g Gomega, name string) *tiledv1alpha1.TiledInstance {
		ti := &tiledv1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, ti)).To(Succeed())
		return ti
	}
	objs := map[string]names.Objects{}
	for _, name := range []string{"fleet-a", "fleet-b"} {
		n := fleet.NamesOf(instance(g, name))
		objs[name] = n
		setPodStatus(t, g, podOn(t, g, ns, n.Postgres+"-0", updateRevision(t, g, ns, n.Postgres)), true, "")
		setPodStatus(t, g, podOn(t, g, ns, n.Tiled+"-0", updateRevision(t, g, ns, n.Tiled)), true, "")
	}
	g.Eventually(func(g Gomega) {
		for _, name := range []string{"fleet-a", "fleet-b"} {
			ti := instance(g, name)
			g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "%s: %v", name, ti.Status.Conditions)
		}
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	hashes := map[string]string{}
	for _, name := range []string{"fleet-a", "fleet-b"} {
		hashes[name] = instance(g, name).Annotations[desired.AnnotationExpansionHash]
		g.Expect(hashes[name]).NotTo(BeEmpty())
	}
	cacheExists := func(g Gomega, name string) bool {
		err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: objs[name].Cache}, &appsv1.StatefulSet{})
		if apierrors.IsNotFound(err) {
			return false
		}
		g.Expect(err).NotTo(HaveOccurred())
		return true
	}

	// Streaming on for the fleet: the rollout reaches one beamline, whose cache's pod cannot pull.
	g.Eventually(func() error {
		cur := &tiledv1alpha1.TiledProfile{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "defaults"}, cur); err != nil {
			return err
		}
		cur.Spec.Streaming = &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(true)}
		return env.Client.Update(ctxT(t), cur)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	var first, second string
	g.Eventually(func(g Gomega) {
		a, b := cacheExists(g, "fleet-a"), cacheExists(g, "fleet-b")
		g.Expect(a || b).To(BeTrue(), "a cache StatefulSet")
		g.Expect(a && b).To(BeFalse(), "the budget of 1 lets one beamline change")
		first, second = "fleet-a", "fleet-b"
		if b {
			first, second = second, first
		}
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	fn := objs[first]
	cachePod := podOn(t, g, ns, fn.Cache+"-0", updateRevision(t, g, ns, fn.Cache))
	setPodStatus(t, g, cachePod, false, "ImagePullBackOff")
	g.Eventually(func(g Gomega) {
		ti := instance(g, first)
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(c).NotTo(BeNil(), "%v", ti.Status.Conditions)
		g.Expect(c.Reason).To(Equal(controllers.ReasonWaitingForDependency))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	// The first beamline serves (its Tiled pod Ready on its old template) and waits: the second
	// keeps its expansion.
	g.Consistently(func(g Gomega) {
		g.Expect(instance(g, second).Annotations[desired.AnnotationExpansionHash]).To(Equal(hashes[second]), "the second beamline's change waits for the first's")
		g.Expect(cacheExists(g, second)).To(BeFalse())
	}, 5*time.Second, 200*time.Millisecond).Should(Succeed())

	// The first's cache Ready: its Tiled pod is replaced. While the new one is not Ready, the
	// second still waits; once it is, the second gets its change.
	setPodStatus(t, g, cachePod, true, "")
	tiledRev := ""
	g.Eventually(func(g Gomega) {
		s := statefulSet(t, g, ns, fn.Tiled)
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		g.Expect(s.Status.UpdateRevision).NotTo(Equal(s.Status.CurrentRevision), "the Tiled StatefulSet has its new template; %s: %v; %s: %v %v",
			first, instance(g, first).Status.Conditions, second, instance(g, second).Status.Conditions, cacheExists(g, second))
		tiledRev = s.Status.UpdateRevision
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	newTiled := podOn(t, g, ns, fn.Tiled+"-0", tiledRev)
	g.Consistently(func(g Gomega) {
		g.Expect(instance(g, second).Annotations[desired.AnnotationExpansionHash]).To(Equal(hashes[second]), "the first beamline's Tiled pod is not Ready yet")
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
	setPodStatus(t, g, newTiled, true, "")
	g.Eventually(func(g Gomega) {
		g.Expect(instance(g, second).Annotations[desired.AnnotationExpansionHash]).NotTo(Equal(hashes[second]))
		g.Expect(cacheExists(g, second)).To(BeTrue())
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
}
