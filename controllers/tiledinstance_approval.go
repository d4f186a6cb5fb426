package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Approval of a pending change by a person (spec.maintenance.approval Manual, docs/maintenance.md
// "Approvals"). The change the maintenance gate holds (gateMaintenance, upgradeApproval) is
// reported with its hash (status.pendingRollout.changeHash); `kubectl tiled approve` sets the label
// tiled.blueskyproject.io/approve to that hash, and the approval webhook stamps the requester's
// username (tiled.blueskyproject.io/approved-by). The change goes through when the label names it
// (and the window is open, or the approval says through-window); the approval is then recorded in
// status.lastApproval with an Approved Event. A label that names no pending change is refused:
// status.refusedApproval and an ApprovalRefused Event, and nothing else happens.

// approvalInput is what decides one pending change's fate (decideApproval).
type approvalInput struct {
	// Manual: spec.maintenance.approval is Manual.
	Manual bool
	// Open: the maintenance window is open.
	Open bool
	// Hash is the pending change's hash (status.pendingRollout.changeHash).
	Hash string
	// Approve is the approval label's value ("" none), Through its through-window annotation.
	Approve string
	Through bool
}

// approvalVerdict is what the gate does with the change.
type approvalVerdict struct {
	// Hold: the change waits.
	Hold bool
	// Approval is status.pendingRollout.approval: "" (Automatic), Required or Approved.
	Approval string
	// Approved: the approval names this change (it is recorded, whether it goes through now or
	// waits for the window).
	Approved bool
	// Window: the change waits (also) for the window: status.pendingRollout.window says why.
	Window bool
}

// decideApproval is the pure decision: under Automatic the window alone decides; under Manual a
// change waits until an approval names its hash, then for the window unless the approval lets it
// through a closed one.
func decideApproval(in approvalInput) approvalVerdict {
	if !in.Manual {
		return approvalVerdict{Hold: !in.Open, Window: !in.Open}
	}
	if in.Hash == "" || in.Approve != in.Hash {
		return approvalVerdict{Hold: true, Approval: tiledv1alpha1.ApprovalRequired, Window: !in.Open}
	}
	passes := in.Open || in.Through
	return approvalVerdict{Hold: !passes, Approval: tiledv1alpha1.ApprovalApproved, Approved: true, Window: !passes}
}

// staleApproval says whether the approval label approve names no change: neither the pending one
// nor the one last approved (already through). The message says why it is refused.
func staleApproval(approve string, pending *tiledv1alpha1.PendingRollout, last *tiledv1alpha1.ApprovalRecord) (bool, string) {
	if approve == "" || (last != nil && last.ChangeHash == approve) || (pending != nil && pending.ChangeHash == approve) {
		return false, ""
	}
	why := "no change waits for approval"
	if pending != nil && pending.ChangeHash != "" {
		why = "the pending change is " + pending.ChangeHash
	}
	return true, fmt.Sprintf("the approval of change %s (label %s) names no pending change and is ignored: %s", approve, tiledv1alpha1.LabelApprove, why)
}

// changeHash is the hash of a pending change from its parts (each StatefulSet with its intent, an
// upgrade's from and to): 20 hexadecimal digits, a label value.
func changeHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:])[:20]
}

// manualApproval reads the instance's approval: the label's value, whether through the window (the
// through-window annotation names the same hash: one left from an earlier approval does not carry
// over to the next), and who approved.
func manualApproval(ti *tiledv1alpha1.TiledInstance) (approve string, through bool, by string) {
	approve = ti.Labels[tiledv1alpha1.LabelApprove]
	return approve, approve != "" && ti.Annotations[tiledv1alpha1.AnnotationApproveThroughWindow] == approve,
		ti.Annotations[tiledv1alpha1.AnnotationApprovedBy]
}

// approvalOf is the record of the approval of the pending change p.
func approvalOf(ti *tiledv1alpha1.TiledInstance, p *tiledv1alpha1.PendingRollout) *tiledv1alpha1.ApprovalRecord {
	_, through, by := manualApproval(ti)
	return &tiledv1alpha1.ApprovalRecord{ChangeHash: p.ChangeHash, ApprovedBy: by, ThroughWindow: through, Change: p.Change, StatefulSet: p.StatefulSet}
}

// upgradeApproval decides, under spec.maintenance.approval Manual, whether the start of the upgrade
// from to to is approved: the previous status reported it pending (the hash a person saw) and the
// approval label names that hash. through: it may start through a closed window. The record is
// the approval's (nil when not approved).
func upgradeApproval(ti *tiledv1alpha1.TiledInstance, from, to string) (approved, through bool, rec *tiledv1alpha1.ApprovalRecord) {
	prev := ti.Status.PendingRollout
	if prev == nil || prev.Change != changeUpgrade || prev.From != from || prev.To != to || prev.ChangeHash == "" {
		return false, false, nil
	}
	approve, through, _ := manualApproval(ti)
	if approve != prev.ChangeHash {
		return false, false, nil
	}
	return true, through, approvalOf(ti, prev)
}

// approvalRecords are an instance's status.lastApproval and status.refusedApproval, as remembered
// (instanceMemories.approvals).
type approvalRecords struct {
	last, refused *tiledv1alpha1.ApprovalRecord
}

// rememberedApprovals puts into status the approval records this controller last recorded for ti,
// when the cache does not show the status write that recorded them yet.
func (r *TiledInstanceReconciler) rememberedApprovals(ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus) {
	if w, ok := r.memories.approvals.load(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}); ok {
		rec := w.of(&r.memories, ti, approvalRecords{last: status.LastApproval, refused: status.RefusedApproval})
		status.LastApproval, status.RefusedApproval = rec.last, rec.refused
	}
}

// rememberApprovals remembers the approval records of status, about to be written over ti, when
// this reconcile recorded one anew.
func (r *TiledInstanceReconciler) rememberApprovals(ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus, accepted, refused *tiledv1alpha1.ApprovalRecord) {
	if accepted == nil && refused == nil {
		return
	}
	r.memories.approvals.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name},
		over(ti, approvalRecords{last: status.LastApproval, refused: status.RefusedApproval}))
}

// approvalStatus records in status what this reconcile found of approvals: a new approval
// (status.lastApproval, returned to be sent as the Approved Event), and an approval label that
// names no change (status.refusedApproval, returned when new, for the ApprovalRefused Event).
func approvalStatus(ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus, approved *tiledv1alpha1.ApprovalRecord, now metav1.Time) (accepted, refused *tiledv1alpha1.ApprovalRecord) {
	if last := status.LastApproval; approved != nil && (last == nil || last.ChangeHash != approved.ChangeHash ||
		last.ThroughWindow != approved.ThroughWindow || last.ApprovedBy != approved.ApprovedBy) {
		// A new approval, or the same change approved again (through the window, or by another).
		accepted = approved.DeepCopy()
		accepted.Time = &now
		status.LastApproval = accepted
	}
	approve, _, by := manualApproval(ti)
	stale, msg := staleApproval(approve, status.PendingRollout, status.LastApproval)
	switch {
	case !stale:
		status.RefusedApproval = nil
	case status.RefusedApproval == nil || status.RefusedApproval.ChangeHash != approve:
		refused = &tiledv1alpha1.ApprovalRecord{ChangeHash: approve, ApprovedBy: by, Time: &now, Message: msg}
		status.RefusedApproval = refused
	}
	return accepted, refused
}

// approvalEvents sends the Approved and ApprovalRefused Events of what approvalStatus recorded.
func (r *TiledInstanceReconciler) approvalEvents(ti *tiledv1alpha1.TiledInstance, accepted, refused *tiledv1alpha1.ApprovalRecord) {
	if a := accepted; a != nil {
		how := "once the maintenance window is open"
		if a.ThroughWindow {
			how = "through a closed maintenance window if need be"
		}
		r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, ReasonApproved, "Approve", "%s", eventNote(fmt.Sprintf(
			"%s approved change %s (%s, StatefulSet %s): it goes through %s", approver(a.ApprovedBy), a.ChangeHash, a.Change, a.StatefulSet, how)))
	}
	if f := refused; f != nil {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, ReasonApprovalRefused, "Approve", "%s", eventNote(
			fmt.Sprintf("%s: %s", approver(f.ApprovedBy), f.Message)))
	}
}

// approver names the approver for messages.
func approver(by string) string {
	if by == "" {
		return "an unnamed user (no approval webhook stamped " + tiledv1alpha1.AnnotationApprovedBy + ")"
	}
	return by
}

// approvalPhrase is what pendingMessage says of a change's approval.
func approvalPhrase(p *tiledv1alpha1.PendingRollout) string {
	switch p.Approval {
	case tiledv1alpha1.ApprovalRequired:
		return fmt.Sprintf("; approval needed (spec.maintenance.approval Manual): `kubectl tiled approve` change %s", p.ChangeHash)
	case tiledv1alpha1.ApprovalApproved:
		return fmt.Sprintf("; change %s is approved", p.ChangeHash)
	}
	return ""
}
