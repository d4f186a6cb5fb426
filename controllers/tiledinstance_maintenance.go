package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/calendar"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/names"
)

// The kinds of pending change (status.pendingRollout.change).
const (
	changeRender  = "Render"
	changeSpec    = "Spec"
	changeUpgrade = "Upgrade"
)

// maintenanceWindow is what an instance's spec.maintenance says at the time of one reconcile (nil
// when the spec has none: nothing is gated, and nothing of this file runs).
type maintenanceWindow struct {
	calendar.State
	// manual: spec.maintenance.approval is Manual (tiledinstance_approval.go).
	manual bool
}

// status is status.maintenance.
func (w *maintenanceWindow) status() *tiledv1alpha1.MaintenanceStatus {
	if w == nil {
		return nil
	}
	s := &tiledv1alpha1.MaintenanceStatus{Open: w.Open, Reason: w.Reason, Message: w.Message}
	if !w.NextOpen.IsZero() {
		t := metav1.NewTime(w.NextOpen.UTC().Truncate(time.Second))
		s.NextOpen = &t
	}
	if !w.NextClose.IsZero() {
		t := metav1.NewTime(w.NextClose.UTC().Truncate(time.Second))
		s.NextClose = &t
	}
	return s
}

// closedMessage says why the window is closed and when it opens: status.pendingRollout.window.
func (w *maintenanceWindow) closedMessage() string {
	if w.NextOpen.IsZero() {
		return w.Message + "; does not open within a year"
	}
	return w.Message + "; opens at " + w.NextOpen.UTC().Format(time.RFC3339)
}

// recheck is when to look again: when the window next opens or closes (status.maintenance changes
// then, and a waiting change starts), a second late so that the calendar says so; 0 when never.
func (w *maintenanceWindow) recheck(now time.Time) time.Duration {
	if w == nil {
		return 0
	}
	next := w.NextOpen
	if w.Open {
		next = w.NextClose
	}
	if next.IsZero() {
		return 0
	}
	return max(next.Sub(now), 0) + time.Second
}

// maintenanceAt reads the expanded spec's maintenance calendar at now (nil: none declared). A
// calendar admission let through cannot fail to read but on an operator whose machine lacks a time
// zone: the instance stalls then, naming the field, rather than change at the wrong time.
func maintenanceAt(spec *tiledv1alpha1.TiledInstance, now time.Time) (*maintenanceWindow, error) {
	m := spec.Spec.Maintenance
	if m == nil {
		return nil, nil
	}
	windows := make([]calendar.Window, len(m.Windows))
	for i, w := range m.Windows {
		windows[i] = calendar.Window{Schedule: w.Schedule, Duration: w.Duration.Duration, TimeZone: w.TimeZone}
	}
	exclusions := make([]calendar.Exclusion, len(m.Exclusions))
	for i, e := range m.Exclusions {
		exclusions[i] = calendar.Exclusion{Name: e.Name, Start: e.Start.Time, End: e.End.Time}
	}
	c, err := calendar.New(windows, exclusions)
	if err != nil {
		return nil, &stall{reason: ReasonMaintenanceInvalid, message: "spec.maintenance." + err.Error()}
	}
	return &maintenanceWindow{State: c.At(now), manual: m.Approval == tiledv1alpha1.ApprovalManual}, nil
}

// upgradeHeld says the start of a Tiled upgrade waits: the maintenance window is closed, or it
// opened after the upgrade waited and the instance's TiledCluster has not let it through yet (it
// approves the pending change's hash within its rollout budget, as it does a render change). An
// upgrade under way is never held (the caller asks only when none is).
//
// Under spec.maintenance.approval Manual it also waits until a person approves it (upgradeApproval),
// and an approval through the window lets it start in a closed one; approved is that approval's
// record, when it starts now.
func upgradeHeld(ti *tiledv1alpha1.TiledInstance, w *maintenanceWindow, from, to string) (held bool, approved *tiledv1alpha1.ApprovalRecord) {
	if w == nil {
		return false, nil
	}
	open := w.Open
	if w.manual {
		ok, through, rec := upgradeApproval(ti, from, to)
		if !ok {
			return true, nil
		}
		open = open || through
		approved = rec
	}
	if !open {
		return true, nil
	}
	prev := ti.Status.PendingRollout
	if prev == nil || prev.Change != changeUpgrade {
		return false, approved
	}
	ref := metav1.GetControllerOf(ti)
	member := ref != nil && ref.Kind == "TiledCluster"
	if member && ti.Annotations[tiledv1alpha1.AnnotationApprovedTemplate] != prev.TemplateHash {
		return true, nil
	}
	return false, approved
}

// gateMaintenance is the render gate (gateRender) of an instance whose maintenance window holds a
// disruptive change: gated says it decided the gate. It holds, while the window is closed, a change
// of the Tiled or the PostgreSQL StatefulSet's pod template, whether the spec or the render makes it,
// and the Tiled StatefulSet of an upgrade that may not start yet (upgradeHeld); after the window
// opens, an upgrade that waited also waits for its cluster's approval. Nothing else is held: a
// StatefulSet that does not exist yet (first creation, or deleted: a repair), one whose pod template
// stays the same (scaling), every other child, an upgrade, restore or lost catalog under way (a step
// that started always finishes).
func (r *TiledInstanceReconciler) gateMaintenance(ctx context.Context, cur *instanceState, in instanceInputs, want *desired.Children) (renderGate, bool, error) {
	var g renderGate
	w := in.window
	if w == nil || (w.Open && in.heldUpgrade == "" && !w.manual) {
		return g, false, nil
	}
	ti := cur.ti
	if in.heldUpgrade == "" && (ti.Status.Upgrade != nil || in.restoring || in.upgrade.Changed) {
		return g, false, nil
	}
	if l := in.render.Lifecycle; l != nil && (l.ServingImage != "" || l.Stopped || l.Step != nil) {
		return g, false, nil
	}
	n := names.For(ti.Namespace, in.spec.Name)
	sets := []string{n.Tiled}
	if !in.external {
		sets = append(sets, n.Postgres)
	}
	prev := r.previousPending(ti)
	var pending *tiledv1alpha1.PendingRollout
	var others, parts []string
	upgradeSkip := -1
	for j, name := range sets {
		upgrade := j == 0 && in.heldUpgrade != ""
		if !upgrade && w.Open && !w.manual {
			continue // open: only the upgrade that waited still waits, for its cluster
		}
		key := stsKey(ti.Namespace, name)
		idx := -1
		for i := range want.Len() {
			if want.Prepared(i).Key == key {
				idx = i
			}
		}
		if idx < 0 {
			continue
		}
		p := want.Prepared(idx)
		if !upgrade && r.Applier.Holds(p) {
			continue // applied as it is
		}
		live := cur.statefulSet(ctx, key)
		if live == nil {
			continue // made, or made again: never held
		}
		hash := p.Annotation()
		if was := applier.IntentOf(live); !upgrade && (was == "" || was == hash) {
			continue
		}
		differs, err := r.pendingDiffers(ctx, prev, want, idx, name, hash)
		if err != nil {
			return g, true, err
		}
		if len(differs) == 0 && !upgrade {
			continue // the pod template stays as it is (scaling): nothing restarts
		}
		if upgrade {
			upgradeSkip = len(g.skips)
		}
		g.skips = append(g.skips, gateSkip{idx: idx, generation: live.Generation})
		parts = append(parts, name+"="+hash)
		if pending != nil {
			for _, d := range differs {
				others = append(others, "StatefulSet "+name+" "+d)
			}
			continue
		}
		change := changeSpec
		switch {
		case upgrade:
			change = changeUpgrade
		case ti.Generation == ti.Status.ObservedGeneration && prev == nil:
			change = changeRender // the spec did not change: the operator's render did
		}
		if samePending(prev, name, hash) && prev.Change != "" {
			change = prev.Change
		}
		pending = &tiledv1alpha1.PendingRollout{StatefulSet: name, TemplateHash: hash, Differs: differs, Change: change}
	}
	if pending == nil {
		return g, len(g.skips) > 0, nil
	}
	if in.heldUpgrade != "" {
		pending.From, pending.To = in.upgradeFrom, in.upgradeTo
		parts = append(parts, "upgrade "+in.heldUpgrade)
	}
	pending.ChangeHash = changeHash(parts...)
	approve, through, _ := manualApproval(ti)
	v := decideApproval(approvalInput{Manual: w.manual, Open: w.Open, Hash: pending.ChangeHash, Approve: approve, Through: through})
	pending.Approval = v.Approval
	if v.Approved {
		cur.approved = approvalOf(ti, pending)
	}
	if !v.Hold && w.manual {
		// Approved, and the window is open or the approval passes it: as in an open window, only
		// the upgrade that waited still waits, for its cluster.
		if upgradeSkip < 0 {
			return renderGate{}, false, nil
		}
		g.skips, others = g.skips[upgradeSkip:upgradeSkip+1], nil
	}
	all := append(slices.Clip(pending.Differs), others...)
	pending.Differs, pending.DifferCount = all[:min(len(all), maxPendingPaths)], int32(len(all))
	if pending.Change == changeUpgrade && len(pending.Differs) == 0 {
		pending.Differs, pending.DifferCount = []string{"spec.template.spec.containers[tiled].image"}, 1
	}
	if v.Window {
		pending.Window = w.closedMessage()
	}
	if samePending(prev, pending.StatefulSet, pending.TemplateHash) {
		pending.Since = prev.Since
	}
	if pending.Since == nil {
		now := metav1.Now().Rfc3339Copy()
		pending.Since = &now
	}
	g.pending = pending
	r.memories.pending.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name},
		over(ti, pending))
	return g, true, nil
}

// pendingDiffers are the paths of the pod template of StatefulSet name that applying the render's
// child idx (whose intent is hash) would change: the ones status.pendingRollout already names for
// that intent (prev), else read from the live object (one request past the cache, templateDiff).
func (r *TiledInstanceReconciler) pendingDiffers(ctx context.Context, prev *tiledv1alpha1.PendingRollout, want *desired.Children, idx int, name, hash string) ([]string, error) {
	if samePending(prev, name, hash) && int(prev.DifferCount) == len(prev.Differs) &&
		!slices.ContainsFunc(prev.Differs, func(d string) bool { return strings.HasPrefix(d, "StatefulSet ") }) {
		return prev.Differs, nil // found before (and not mixed with another StatefulSet's): not read again
	}
	obj, err := want.Object(idx)
	if err != nil {
		return nil, err
	}
	return r.templateDiff(ctx, obj)
}

// changeWhat says what kind of change waits, for messages.
func changeWhat(change string) string {
	switch change {
	case changeSpec:
		return "the instance's spec changes its pod template"
	case changeUpgrade:
		return "an upgrade of Tiled (with its migration) waits to start"
	default:
		return "the operator renders its pod template differently though the instance's spec did not change (a new operator release)"
	}
}

// windowMessage is the RolloutPending message of a change the maintenance calendar holds.
func windowMessage(p *tiledv1alpha1.PendingRollout, paths string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "StatefulSet %s: %s: %s; the change waits for the maintenance window (spec.maintenance): %s", p.StatefulSet, changeWhat(p.Change), paths, p.Window)
	return b.String()
}
