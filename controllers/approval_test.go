package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestDecideApproval(t *testing.T) {
	const req, ok = tiledv1alpha1.ApprovalRequired, tiledv1alpha1.ApprovalApproved
	for _, c := range []struct {
		name string
		in   approvalInput
		want approvalVerdict
	}{
		{"automatic, open: through", approvalInput{Open: true, Hash: "h"}, approvalVerdict{}},
		{"automatic, closed: waits for the window", approvalInput{Hash: "h"}, approvalVerdict{Hold: true, Window: true}},
		{"automatic ignores an approval", approvalInput{Open: true, Hash: "h", Approve: "x"}, approvalVerdict{}},
		{"manual, open, none: waits for approval", approvalInput{Manual: true, Open: true, Hash: "h"}, approvalVerdict{Hold: true, Approval: req}},
		{"manual, closed, none: waits for both", approvalInput{Manual: true, Hash: "h"}, approvalVerdict{Hold: true, Approval: req, Window: true}},
		{"manual, open, another hash (stale): waits", approvalInput{Manual: true, Open: true, Hash: "h", Approve: "old"}, approvalVerdict{Hold: true, Approval: req}},
		{"manual, closed, stale through-window: waits", approvalInput{Manual: true, Hash: "h", Approve: "old", Through: true}, approvalVerdict{Hold: true, Approval: req, Window: true}},
		{"manual, open, approved: through", approvalInput{Manual: true, Open: true, Hash: "h", Approve: "h"}, approvalVerdict{Approval: ok, Approved: true}},
		{"manual, closed, approved: waits for the window", approvalInput{Manual: true, Hash: "h", Approve: "h"}, approvalVerdict{Hold: true, Approval: ok, Approved: true, Window: true}},
		{"manual, closed, approved through the window: through", approvalInput{Manual: true, Hash: "h", Approve: "h", Through: true}, approvalVerdict{Approval: ok, Approved: true}},
		{"manual, no hash: never approved by an empty label", approvalInput{Manual: true, Open: true}, approvalVerdict{Hold: true, Approval: req}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(decideApproval(c.in)).To(Equal(c.want))
		})
	}
}

func TestStaleApproval(t *testing.T) {
	pending := &tiledv1alpha1.PendingRollout{ChangeHash: "h2"}
	last := &tiledv1alpha1.ApprovalRecord{ChangeHash: "h1"}
	for _, c := range []struct {
		name    string
		approve string
		pending *tiledv1alpha1.PendingRollout
		last    *tiledv1alpha1.ApprovalRecord
		stale   bool
		says    string
	}{
		{"no label", "", pending, last, false, ""},
		{"the pending change", "h2", pending, last, false, ""},
		{"the change already through", "h1", pending, last, false, ""},
		{"another change", "h0", pending, last, true, "the pending change is h2"},
		{"nothing pending", "h0", nil, nil, true, "no change waits for approval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			stale, msg := staleApproval(c.approve, c.pending, c.last)
			g.Expect(stale).To(Equal(c.stale))
			g.Expect(msg).To(ContainSubstring(c.says))
		})
	}
}

func TestApprovalStatus(t *testing.T) {
	g := NewWithT(t)
	now := metav1.NewTime(time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC))
	ti := &tiledv1alpha1.TiledInstance{}
	ti.Labels = map[string]string{tiledv1alpha1.LabelApprove: "h1"}
	ti.Annotations = map[string]string{tiledv1alpha1.AnnotationApprovedBy: "alice"}
	status := &tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{ChangeHash: "h1", Change: changeSpec, StatefulSet: "chx"}}

	// Approved now: recorded with its time, once.
	accepted, refused := approvalStatus(ti, status, approvalOf(ti, status.PendingRollout), now)
	g.Expect(refused).To(BeNil())
	g.Expect(accepted).To(Equal(&tiledv1alpha1.ApprovalRecord{ChangeHash: "h1", ApprovedBy: "alice", Time: &now, Change: changeSpec, StatefulSet: "chx"}))
	g.Expect(status.LastApproval).To(Equal(accepted))
	accepted, _ = approvalStatus(ti, status, approvalOf(ti, status.PendingRollout), now)
	g.Expect(accepted).To(BeNil(), "the same approval is not recorded (nor its Event sent) twice")

	// Through: nothing pending, the label names the change last approved: not stale.
	status.PendingRollout = nil
	_, refused = approvalStatus(ti, status, nil, now)
	g.Expect(refused).To(BeNil())

	// A label naming no change: refused once, then kept, then cleared when the label goes.
	ti.Labels[tiledv1alpha1.LabelApprove] = "h9"
	_, refused = approvalStatus(ti, status, nil, now)
	g.Expect(refused).NotTo(BeNil())
	g.Expect(refused.Message).To(ContainSubstring("change h9"))
	g.Expect(status.RefusedApproval).To(Equal(refused))
	_, refused = approvalStatus(ti, status, nil, now)
	g.Expect(refused).To(BeNil())
	g.Expect(status.RefusedApproval).NotTo(BeNil())
	delete(ti.Labels, tiledv1alpha1.LabelApprove)
	approvalStatus(ti, status, nil, now)
	g.Expect(status.RefusedApproval).To(BeNil())
}

func TestUpgradeHeldManual(t *testing.T) {
	g := NewWithT(t)
	open := &maintenanceWindow{manual: true}
	open.Open = true
	closed := &maintenanceWindow{manual: true}
	ti := &tiledv1alpha1.TiledInstance{}
	held, _ := upgradeHeld(ti, open, "tiled:0.1", "tiled:0.2")
	g.Expect(held).To(BeTrue(), "manual: an upgrade nobody approved waits in an open window")

	ti.Status.PendingRollout = &tiledv1alpha1.PendingRollout{Change: changeUpgrade, ChangeHash: "h", From: "tiled:0.1", To: "tiled:0.2"}
	ti.Labels = map[string]string{tiledv1alpha1.LabelApprove: "h"}
	held, rec := upgradeHeld(ti, open, "tiled:0.1", "tiled:0.2")
	g.Expect(held).To(BeFalse())
	g.Expect(rec.ChangeHash).To(Equal("h"))
	held, _ = upgradeHeld(ti, open, "tiled:0.1", "tiled:0.3")
	g.Expect(held).To(BeTrue(), "the approval was of the upgrade to 0.2, not 0.3")
	held, _ = upgradeHeld(ti, closed, "tiled:0.1", "tiled:0.2")
	g.Expect(held).To(BeTrue(), "approved, not through the window")
	ti.Annotations = map[string]string{tiledv1alpha1.AnnotationApproveThroughWindow: "another"}
	held, _ = upgradeHeld(ti, closed, "tiled:0.1", "tiled:0.2")
	g.Expect(held).To(BeTrue(), "through the window for another change")
	ti.Annotations = map[string]string{tiledv1alpha1.AnnotationApproveThroughWindow: "h"}
	held, _ = upgradeHeld(ti, closed, "tiled:0.1", "tiled:0.2")
	g.Expect(held).To(BeFalse(), "approved through the window")
}
