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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The tests of spec.maintenance (docs/maintenance.md): a disruptive change waits while the
// instance's maintenance calendar is closed and rolls once it opens, at the time the calendar says
// (the controller requeues then: nothing else wakes it); what is not disruptive is never held.

// exclusionOverride is a beamline's overrides with one exclusion, beam-run, over [start, end).
func exclusionOverride(start, end time.Time) *tiledv1alpha1.InstanceTemplate {
	return &tiledv1alpha1.InstanceTemplate{Maintenance: &tiledv1alpha1.MaintenanceSpec{
		Exclusions: []tiledv1alpha1.MaintenanceExclusion{{Name: "beam-run", Start: metav1.NewTime(start.Truncate(time.Second)), End: metav1.NewTime(end.Truncate(time.Second))}},
	}}
}

// TestMaintenanceHoldsTemplateChange: a fleet of a (inside an exclusion: the calendar is closed) and
// b (no spec.maintenance). a is created all the same; its Tiled StatefulSet, deleted, is made again
// (a repair). A profile change of the Tiled and PostgreSQL pod templates then rolls on b at once —
// a change waiting for its window takes nothing from the rollout budget — while a keeps both
// templates and says why (status.pendingRollout, RolloutPending, an Event naming the exclusion).
// Moved to end a few seconds later, the exclusion ends, and the change rolls on a within the
// cluster's budget.
func TestMaintenanceHoldsTemplateChange(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "maintenance")
	op := startOperator(t, ns)
	now := time.Now()
	smallFleet(t, g, ns,
		tiledv1alpha1.ClusterInstance{Name: "a", Overrides: exclusionOverride(now.Add(-time.Hour), now.Add(time.Hour))},
		tiledv1alpha1.ClusterInstance{Name: "b"})
	waitForStampOut(t, g, op, ns, "fleet", 2)
	tiled := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, i)).Tiled }
	postgres := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, i)).Postgres }
	disk := func(i string) string {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, postgres(i))).To(BeTrue())
		return s.Spec.Template.Spec.NodeSelector["disk"]
	}
	team := func(i string) string {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, tiled(i))).To(BeTrue())
		return s.Spec.Template.Annotations["team"]
	}
	for _, i := range []string{"fleet-a", "fleet-b"} {
		g.Expect(team(i)).To(Equal("a"), "first creation is not held")
		markReady(t, g, ns, fleet.NamesOf(getInstance(t, g, ns, i)).Postgres)
		markReady(t, g, ns, tiled(i))
	}
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(2)))

	// The calendar as a's status says it; b has none.
	g.Eventually(func(g Gomega) {
		m := getInstance(t, g, ns, "fleet-a").Status.Maintenance
		g.Expect(m).NotTo(BeNil())
		g.Expect(m.Open).To(BeFalse())
		g.Expect(m.Reason).To(Equal("Excluded"))
		g.Expect(m.Message).To(ContainSubstring("beam-run"))
		g.Expect(m.NextOpen).NotTo(BeNil())
		g.Expect(m.NextOpen.Time).To(BeTemporally("~", now.Add(time.Hour), 2*time.Second))
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())
	g.Expect(getInstance(t, g, ns, "fleet-b").Status.Maintenance).To(BeNil(), "no spec.maintenance, no status.maintenance")

	// A repair is not held: the deleted StatefulSet comes back while the calendar is closed.
	gone := &appsv1.StatefulSet{}
	g.Expect(exists(t, gone, ns, tiled("fleet-a"))).To(BeTrue())
	g.Expect(env.Client.Delete(ctxT(t), gone)).To(Succeed())
	g.Eventually(func() types.UID {
		s := &appsv1.StatefulSet{}
		if !exists(t, s, ns, tiled("fleet-a")) {
			return gone.UID
		}
		return s.UID
	}, time.Minute, 250*time.Millisecond).ShouldNot(Equal(gone.UID), "a deleted StatefulSet is made again while the window is closed")
	waitQuiet(t, op) // the StatefulSet made again, as the operator left it
	markReady(t, g, ns, tiled("fleet-a"))
	condition(t, g, ns, "fleet-a", controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)
	waitQuiet(t, op)

	// The profile changes the Tiled pod template: b rolls, a waits.
	p := &tiledv1alpha1.TiledProfile{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "defaults"}, p)).To(Succeed())
	p.Spec.Tiled.PodAnnotations["team"] = "b"
	p.Spec.Database.Managed.NodeSelector = map[string]string{"disk": "ssd"}
	g.Expect(env.Client.Update(ctxT(t), p)).To(Succeed())
	// b's database rolls first; its Tiled pod template waits for the database to be ready
	// (dependencies before dependants, tiledinstance_dependencies.go).
	g.Eventually(func() string { return disk("fleet-b") }, time.Minute, 250*time.Millisecond).Should(Equal("ssd"),
		"an instance without spec.maintenance rolls at once, and a's waiting change does not take the budget")
	markReady(t, g, ns, postgres("fleet-b"))
	g.Eventually(func() string { return team("fleet-b") }, time.Minute, 250*time.Millisecond).Should(Equal("b"))
	markReady(t, g, ns, tiled("fleet-b"))
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(ti.Spec.Tiled.PodAnnotations).To(HaveKeyWithValue("team", "b"), "the cluster applied the spec")
		pr := ti.Status.PendingRollout
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.StatefulSet).To(Equal(tiled("fleet-a")))
		g.Expect(pr.Change).To(Equal("Spec"))
		g.Expect(pr.Differs).To(ContainElement("spec.template.metadata.annotations[team]"))
		g.Expect(pr.Differs).To(ContainElement(HavePrefix("StatefulSet "+postgres("fleet-a")+" spec.template.spec.nodeSelector")), "the database's change waits too")
		g.Expect(pr.Window).To(ContainSubstring("inside exclusion beam-run"))
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controllers.ReasonWaitingForMaintenance))
		g.Expect(c.Message).To(ContainSubstring("waits for the maintenance window (spec.maintenance)"))
		g.Expect(c.Message).To(ContainSubstring("beam-run"))
		g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "a waiting change leaves the instance serving")
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	g.Expect(team("fleet-a")).To(Equal("a"), "a change of the pod template was applied while the calendar was closed")
	g.Expect(disk("fleet-a")).To(BeEmpty(), "a change of the database's pod template was applied while the calendar was closed")
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
		found := false
		for _, e := range list.Items {
			found = found || (e.Reason == controllers.ReasonWaitingForMaintenance && e.Regarding.Name == "fleet-a" && strings.Contains(e.Note, "beam-run"))
		}
		g.Expect(found).To(BeTrue(), "no WaitingForMaintenance Event on fleet-a")
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())

	// The run ends a few seconds from now: the change rolls then, with nothing else to wake it.
	opens := time.Now().Add(6 * time.Second)
	g.Eventually(func() error {
		c := getCluster(t, g, ns)
		c.Spec.Instances[0].Overrides = exclusionOverride(now.Add(-time.Hour), opens)
		return env.Client.Update(ctxT(t), c)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		m := getInstance(t, g, ns, "fleet-a").Status.Maintenance
		g.Expect(m).NotTo(BeNil())
		g.Expect(m.NextOpen).NotTo(BeNil())
		g.Expect(m.NextOpen.Time).To(BeTemporally("~", opens, 2*time.Second))
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())
	g.Expect(team("fleet-a")).To(Equal("a"))
	// The database rolls first, then Tiled once the database is ready (dependencies before
	// dependants).
	g.Eventually(func() string { return disk("fleet-a") }, 30*time.Second, 250*time.Millisecond).Should(Equal("ssd"))
	g.Expect(time.Now()).To(BeTemporally(">=", opens.Truncate(time.Second)), "rolled before the exclusion ended")
	markReady(t, g, ns, postgres("fleet-a"))
	g.Eventually(func() string { return team("fleet-a") }, 30*time.Second, 250*time.Millisecond).Should(Equal("b"))
	markReady(t, g, ns, tiled("fleet-a"))
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(ti.Status.PendingRollout).To(BeNil())
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)).To(BeNil())
		g.Expect(ti.Status.Maintenance.Open).To(BeTrue())
		g.Expect(ti.Status.Maintenance.Reason).To(Equal("NoWindows"))
		g.Expect(ti.Annotations).NotTo(HaveKey(tiledv1alpha1.AnnotationApprovedTemplate), "the approval goes once the change rolled")
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}

// TestMaintenanceHoldsUpgradeStart: a standalone instance serving Tiled 0.2.14 gets a maintenance
// window that opens at the next minute (cron has minutes) and, in the same change, the image of
// 0.2.20. The upgrade does not start while the window is closed: the StatefulSet serves the old
// image, status.upgrade is absent and status.pendingRollout says an upgrade waits; at the window's
// start the upgrade begins (phase Checking).
func TestMaintenanceHoldsUpgradeStart(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "maintenance-upgrade")
	// Far enough ahead for the operator to say the window is closed (it is slow on a loaded machine).
	opens := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(opens) < 25*time.Second {
		opens = opens.Add(time.Minute)
	}
	g.Eventually(func() error {
		ti := f.instance(g)
		ti.Spec.Tiled.Image = upgradeTo
		ti.Spec.Maintenance = &tiledv1alpha1.MaintenanceSpec{Windows: []tiledv1alpha1.MaintenanceWindow{{
			Schedule: itoa(opens.Minute()) + " " + itoa(opens.Hour()) + " * * *", Duration: metav1.Duration{Duration: 5 * time.Minute}, TimeZone: "Etc/UTC",
		}}}
		return env.Client.Update(ctxT(t), ti)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation))
		m := ti.Status.Maintenance
		g.Expect(m).NotTo(BeNil())
		g.Expect(m.Open).To(BeFalse())
		g.Expect(m.Reason).To(Equal("OutsideWindows"))
		g.Expect(m.NextOpen).NotTo(BeNil())
		g.Expect(m.NextOpen.Time).To(BeTemporally("==", opens))
		g.Expect(ti.Status.Upgrade).To(BeNil(), "an upgrade started while the window was closed")
		pr := ti.Status.PendingRollout
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.Change).To(Equal("Upgrade"))
		g.Expect(pr.Window).To(ContainSubstring("opens at " + opens.Format(time.RFC3339)))
		g.Expect(ti.Status.Image).To(Equal(upgradeFrom), "status.image: the image the pods run")
	}, time.Until(opens), upgradePoll).Should(Succeed(), "the window opened before the operator said it was closed")
	waitQuiet(t, f.op)
	if time.Until(opens) > time.Second {
		g.Expect(containerImage(f.tiledSTS(g), "tiled")).To(Equal(upgradeFrom))
		g.Expect(f.instance(g).Status.Upgrade).To(BeNil())
	}
	time.Sleep(time.Until(opens)) // nothing happens meanwhile; the operator wakes itself at the opening
	ti := f.phase(tiledv1alpha1.UpgradeChecking)
	g.Expect(time.Now()).To(BeTemporally(">=", opens), "the upgrade started before the window opened")
	g.Expect(ti.Status.Upgrade.FromImage).To(Equal(upgradeFrom))
	g.Expect(ti.Status.Upgrade.ToImage).To(Equal(upgradeTo))
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		g.Expect(ti.Status.PendingRollout).To(BeNil())
		g.Expect(ti.Status.Maintenance.Open).To(BeTrue())
		g.Expect(ti.Status.Maintenance.Reason).To(Equal("InWindow"))
		g.Expect(ti.Status.Maintenance.NextClose.Time).To(BeTemporally("==", opens.Add(5*time.Minute)))
	}, upgradeWithin, upgradePoll).Should(Succeed())
}

// TestMaintenanceUpgradeUnderWayFinishes: an upgrade that started while the calendar was open
// carries on when an exclusion begins during it — backup, stop, migration and start — and never
// stops half-migrated.
func TestMaintenanceUpgradeUnderWayFinishes(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "maintenance-underway")
	closes := time.Now().Add(5 * time.Second).Truncate(time.Second)
	g.Eventually(func() error {
		ti := f.instance(g)
		ti.Spec.Tiled.Image = upgradeTo
		ti.Spec.Maintenance = &tiledv1alpha1.MaintenanceSpec{Exclusions: []tiledv1alpha1.MaintenanceExclusion{{
			Name: "beam-run", Start: metav1.NewTime(closes), End: metav1.NewTime(closes.Add(time.Hour)),
		}}}
		return env.Client.Update(ctxT(t), ti)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	f.phase(tiledv1alpha1.UpgradeChecking)
	g.Expect(time.Now()).To(BeTemporally("<", closes), "the upgrade did not start before the exclusion")
	check := f.job(render.StepCheck)

	// The exclusion begins: the calendar closes, the upgrade goes on.
	g.Eventually(func(g Gomega) {
		m := f.instance(g).Status.Maintenance
		g.Expect(m).NotTo(BeNil())
		g.Expect(m.Open).To(BeFalse())
		g.Expect(m.Reason).To(Equal("Excluded"))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	_, migrate := f.toMigrating(check)
	f.finish(migrate, 0, migratedReport)
	f.phase(tiledv1alpha1.UpgradeStarting)
	f.expectServing(upgradeTo, upgradeReplicas)
	markReady(t, g, f.ns, f.n.Tiled)
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		g.Expect(ti.Status.Upgrade).To(BeNil())
		g.Expect(ti.Status.LastMigration).NotTo(BeNil())
		g.Expect(ti.Status.LastMigration.Result).To(Equal(upgrade.ResultSucceeded))
		g.Expect(ti.Status.PendingRollout).To(BeNil(), "nothing waits: the upgrade's own change is not held")
		g.Expect(ti.Status.Maintenance.Open).To(BeFalse())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	f.expectServing(upgradeTo, upgradeReplicas)
}
