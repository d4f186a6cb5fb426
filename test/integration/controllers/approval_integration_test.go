package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The test of spec.maintenance.approval Manual (docs/maintenance.md, "Approvals"), through the real
// admission path: the operator serves its webhooks, and the approvals are sent as a user of the
// API server's own (a client certificate), whom the approval webhook names.

// startOperatorWithWebhooks runs the operator watching ns and serving its admission webhooks (its
// own CA, the configurations pointing at it). The configurations are cluster-wide: they are deleted
// when the test ends, so that the suite's other tests run without webhooks as before.
func startOperatorWithWebhooks(t *testing.T, ns string) *runningOperator {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	mo := fixture.InProcess(ns)
	mo.Webhooks = &webhooks.Options{Host: "127.0.0.1", Port: port, CertDir: filepath.Join(t.TempDir(), "certs"), SelfSigned: true,
		Certs: webhooks.CertOptions{URL: fmt.Sprintf("https://127.0.0.1:%d", port), Validity: time.Hour}}
	op := &runningOperator{fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: mo, SyncTimeout: time.Minute})}
	t.Cleanup(func() {
		_ = op.Stop()
		ctx := context.Background()
		_ = env.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhooks.MutatingConfigurationName}})
		_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhooks.ValidatingConfigurationName}})
	})
	return op
}

// userClient is a client authenticated as user (a member of system:masters, to approve anything).
func userClient(t *testing.T, g Gomega, user string) client.Client {
	path, err := env.UserKubeconfig(user, "system:masters")
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// approvePatch is the patch `kubectl tiled approve` sends (cmd/kubectl-tiled/approve.go), with
// extra annotations.
func approvePatch(hash string, through bool, extra map[string]any) client.Patch {
	ann := map[string]any{tiledv1alpha1.AnnotationApproveThroughWindow: nil}
	if through {
		ann[tiledv1alpha1.AnnotationApproveThroughWindow] = hash
	}
	for k, v := range extra {
		ann[k] = v
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{tiledv1alpha1.LabelApprove: hash}, "annotations": ann}})
	return client.RawPatch(types.MergePatchType, b)
}

// TestApprovalManual: a fleet of a (spec.maintenance.approval Manual, no windows: the calendar is
// open) and b (no spec.maintenance). A profile change of the Tiled pod template rolls on b at once,
// while a keeps its StatefulSet and says that it waits for approval (status.pendingRollout with
// its changeHash, RolloutPending WaitingForApproval, status.maintenance). An approval of another
// hash is refused (status.refusedApproval, an ApprovalRefused Event) and changes nothing; an
// approver's name the client makes up is refused by admission. The approval of the pending hash
// lets the change through, and status.lastApproval and the Approved Event name the user the API
// server authenticated. Then, inside an exclusion, a second change waits: approved without
// through-window it still waits for the window; approved through the window it rolls.
func TestApprovalManual(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "approval")
	op := startOperatorWithWebhooks(t, ns)
	manual := func(m *tiledv1alpha1.MaintenanceSpec) *tiledv1alpha1.InstanceTemplate {
		m.Approval = tiledv1alpha1.ApprovalManual
		return &tiledv1alpha1.InstanceTemplate{Maintenance: m}
	}
	smallFleet(t, g, ns,
		tiledv1alpha1.ClusterInstance{Name: "a", Overrides: manual(&tiledv1alpha1.MaintenanceSpec{})},
		tiledv1alpha1.ClusterInstance{Name: "b"})
	waitForStampOut(t, g, op, ns, "fleet", 2)
	tiled := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, i)).Tiled }
	postgres := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, i)).Postgres }
	team := func(i string) string {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, tiled(i))).To(BeTrue())
		return s.Spec.Template.Annotations["team"]
	}
	for _, i := range []string{"fleet-a", "fleet-b"} {
		g.Expect(team(i)).To(Equal("a"), "first creation waits for no approval")
		markReady(t, g, ns, postgres(i))
		markReady(t, g, ns, tiled(i))
	}
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(2)))
	waitQuiet(t, op)
	setTeam := func(v string) {
		g.Eventually(func() error {
			p := &tiledv1alpha1.TiledProfile{}
			if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "defaults"}, p); err != nil {
				return err
			}
			p.Spec.Tiled.PodAnnotations["team"] = v
			return env.Client.Update(ctxT(t), p)
		}, time.Minute, 250*time.Millisecond).Should(Succeed())
	}
	events := func(g Gomega, reason string) []string {
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Name == "fleet-a" {
				notes = append(notes, e.Note)
			}
		}
		return notes
	}

	// The profile changes the Tiled pod template: b rolls (Automatic: as without approvals, and a's
	// waiting change takes nothing from the budget of one), a waits for approval.
	setTeam("b")
	g.Eventually(func() string { return team("fleet-b") }, time.Minute, 250*time.Millisecond).Should(Equal("b"))
	g.Expect(getInstance(t, g, ns, "fleet-b").Status.PendingRollout).To(BeNil())
	markReady(t, g, ns, tiled("fleet-b"))
	var hash string
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(ti.Spec.Tiled.PodAnnotations).To(HaveKeyWithValue("team", "b"), "the cluster applied the spec")
		pr := ti.Status.PendingRollout
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.Change).To(Equal("Spec"))
		g.Expect(pr.Approval).To(Equal(tiledv1alpha1.ApprovalRequired))
		g.Expect(pr.Window).To(BeEmpty(), "the calendar is open")
		g.Expect(pr.ChangeHash).To(MatchRegexp(`^[0-9a-f]{20}$`))
		g.Expect(pr.Differs).To(ContainElement("spec.template.metadata.annotations[team]"))
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controllers.ReasonWaitingForApproval))
		g.Expect(c.Message).To(ContainSubstring("approval needed (spec.maintenance.approval Manual): `kubectl tiled approve` change " + pr.ChangeHash))
		g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue())
		g.Expect(ti.Status.Maintenance).NotTo(BeNil())
		g.Expect(ti.Status.Maintenance.Open).To(BeTrue())
		hash = pr.ChangeHash
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(2)),
		"a waiting change leaves the instance serving")
	waitQuiet(t, op)
	g.Expect(team("fleet-a")).To(Equal("a"), "a change waiting for approval was applied")
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, controllers.ReasonWaitingForApproval)).To(ContainElement(ContainSubstring(hash)))
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())

	// Approvals are sent as the beamline's scientist, whom the API server authenticates.
	const approver = "beamline-scientist"
	scientist := userClient(t, g, approver)
	a := func() *tiledv1alpha1.TiledInstance {
		return &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-a"}}
	}

	// A name the client makes up is refused by admission.
	g.Eventually(func() string {
		err := scientist.Patch(ctxT(t), a(), approvePatch(hash, false, map[string]any{tiledv1alpha1.AnnotationApprovedBy: "mallory"}))
		if err == nil {
			return ""
		}
		return err.Error()
	}, time.Minute, 500*time.Millisecond).Should(ContainSubstring(`"mallory" is not the user who sends this approval ("` + approver + `")`))

	// A stale approval (another hash) is refused and changes nothing.
	g.Expect(scientist.Patch(ctxT(t), a(), approvePatch("0123456789abcdef0123", false, nil))).To(Succeed())
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(ti.Annotations).To(HaveKeyWithValue(tiledv1alpha1.AnnotationApprovedBy, approver), "stamped by admission")
		r := ti.Status.RefusedApproval
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.ChangeHash).To(Equal("0123456789abcdef0123"))
		g.Expect(r.Message).To(ContainSubstring("the pending change is " + hash))
		g.Expect(ti.Status.LastApproval).To(BeNil())
		g.Expect(ti.Status.PendingRollout).NotTo(BeNil())
		g.Expect(events(g, controllers.ReasonApprovalRefused)).To(ContainElement(ContainSubstring(approver + ": the approval of change 0123456789abcdef0123")))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	g.Expect(team("fleet-a")).To(Equal("a"), "a stale approval let the change through")

	// The approval of the pending change lets it through, naming the approver.
	g.Expect(scientist.Patch(ctxT(t), a(), approvePatch(hash, false, nil))).To(Succeed())
	g.Eventually(func() string { return team("fleet-a") }, time.Minute, 250*time.Millisecond).Should(Equal("b"))
	markReady(t, g, ns, tiled("fleet-a"))
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(ti.Status.PendingRollout).To(BeNil())
		g.Expect(ti.Status.RefusedApproval).To(BeNil())
		l := ti.Status.LastApproval
		g.Expect(l).NotTo(BeNil())
		g.Expect(l.ChangeHash).To(Equal(hash))
		g.Expect(l.ApprovedBy).To(Equal(approver))
		g.Expect(l.Time).NotTo(BeNil())
		g.Expect(l.ThroughWindow).To(BeFalse())
		g.Expect(events(g, controllers.ReasonApproved)).To(ContainElement(ContainSubstring(approver + " approved change " + hash)))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())

	// Inside an exclusion, a second change waits for the window and the approval.
	now := time.Now()
	g.Eventually(func() error {
		c := getCluster(t, g, ns)
		c.Spec.Instances[0].Overrides = manual(&tiledv1alpha1.MaintenanceSpec{Exclusions: []tiledv1alpha1.MaintenanceExclusion{{
			Name: "beam-run", Start: metav1.NewTime(now.Add(-time.Hour).Truncate(time.Second)), End: metav1.NewTime(now.Add(time.Hour).Truncate(time.Second))}}})
		return env.Client.Update(ctxT(t), c)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		m := getInstance(t, g, ns, "fleet-a").Status.Maintenance
		g.Expect(m).NotTo(BeNil())
		g.Expect(m.Open).To(BeFalse())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	setTeam("c")
	g.Eventually(func() string { return team("fleet-b") }, time.Minute, 250*time.Millisecond).Should(Equal("c"))
	markReady(t, g, ns, tiled("fleet-b"))
	var hash2 string
	g.Eventually(func(g Gomega) {
		pr := getInstance(t, g, ns, "fleet-a").Status.PendingRollout
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.Approval).To(Equal(tiledv1alpha1.ApprovalRequired))
		g.Expect(pr.Window).To(ContainSubstring("inside exclusion beam-run"))
		g.Expect(pr.ChangeHash).NotTo(Equal(hash))
		hash2 = pr.ChangeHash
	}, time.Minute, 250*time.Millisecond).Should(Succeed())

	// Approved, not through the window: recorded, and it still waits for the window.
	g.Expect(scientist.Patch(ctxT(t), a(), approvePatch(hash2, false, nil))).To(Succeed())
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		pr := ti.Status.PendingRollout
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.Approval).To(Equal(tiledv1alpha1.ApprovalApproved))
		g.Expect(pr.Window).To(ContainSubstring("beam-run"))
		g.Expect(ti.Status.LastApproval.ChangeHash).To(Equal(hash2))
		g.Expect(ti.Status.LastApproval.ThroughWindow).To(BeFalse())
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controllers.ReasonWaitingForMaintenance))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	g.Expect(team("fleet-a")).To(Equal("b"), "an approval without through-window let the change through a closed window")

	// Approved through the window: it rolls.
	g.Expect(scientist.Patch(ctxT(t), a(), approvePatch(hash2, true, nil))).To(Succeed())
	g.Eventually(func() string { return team("fleet-a") }, time.Minute, 250*time.Millisecond).Should(Equal("c"))
	markReady(t, g, ns, tiled("fleet-a"))
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(ti.Status.PendingRollout).To(BeNil())
		g.Expect(ti.Status.Maintenance.Open).To(BeFalse(), "still inside the exclusion")
		l := ti.Status.LastApproval
		g.Expect(l.ChangeHash).To(Equal(hash2))
		g.Expect(l.ThroughWindow).To(BeTrue())
		g.Expect(l.ApprovedBy).To(Equal(approver))
		g.Expect(events(g, controllers.ReasonApproved)).To(ContainElement(And(ContainSubstring(hash2), ContainSubstring("through a closed maintenance window"))))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(strings.Join(events(g, controllers.ReasonApprovalRefused), "\n")).NotTo(ContainSubstring(hash2), "the approved change was never refused")
}

// TestApprovalManualUpgrade: a standalone instance under spec.maintenance.approval Manual (no
// windows: the calendar is open) gets the image of a newer Tiled. The upgrade does not start:
// status.pendingRollout says an upgrade from → to waits for approval, with its hash. An approval of
// another hash starts nothing; the approval of the pending hash starts it (phase Checking), and
// status.lastApproval records it. (Run without the webhooks: nothing stamps the approver, and
// the record says none.)
func TestApprovalManualUpgrade(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "approval-upgrade")
	g.Eventually(func() error {
		ti := f.instance(g)
		ti.Spec.Tiled.Image = upgradeTo
		ti.Spec.Maintenance = &tiledv1alpha1.MaintenanceSpec{Approval: tiledv1alpha1.ApprovalManual}
		return env.Client.Update(ctxT(t), ti)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	var hash string
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation))
		g.Expect(ti.Status.Upgrade).To(BeNil(), "an upgrade started without approval")
		pr := ti.Status.PendingRollout
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.Change).To(Equal("Upgrade"))
		g.Expect(pr.From).To(Equal(upgradeFrom))
		g.Expect(pr.To).To(Equal(upgradeTo))
		g.Expect(pr.Approval).To(Equal(tiledv1alpha1.ApprovalRequired))
		g.Expect(pr.Window).To(BeEmpty())
		g.Expect(ti.Status.Maintenance.Open).To(BeTrue())
		hash = pr.ChangeHash
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g.Expect(hash).NotTo(BeEmpty())
	label := func(v string) {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{tiledv1alpha1.LabelApprove: v}}})
		g.Expect(env.Client.Patch(ctxT(t), &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name}},
			client.RawPatch(types.MergePatchType, b))).To(Succeed())
	}
	label("ffffffffffffffffffff")
	g.Eventually(func(g Gomega) {
		g.Expect(f.instance(g).Status.RefusedApproval).NotTo(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	waitQuiet(t, f.op)
	g.Expect(f.instance(g).Status.Upgrade).To(BeNil(), "a stale approval started the upgrade")
	g.Expect(containerImage(f.tiledSTS(g), "tiled")).To(Equal(upgradeFrom))

	label(hash)
	ti := f.phase(tiledv1alpha1.UpgradeChecking)
	g.Expect(ti.Status.Upgrade.ToImage).To(Equal(upgradeTo))
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		l := ti.Status.LastApproval
		g.Expect(l).NotTo(BeNil())
		g.Expect(l.ChangeHash).To(Equal(hash))
		g.Expect(l.Change).To(Equal("Upgrade"))
		g.Expect(l.ApprovedBy).To(BeEmpty(), "no webhook ran: nothing stamped the approver")
		g.Expect(ti.Status.RefusedApproval).To(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
}
