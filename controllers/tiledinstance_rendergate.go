package controllers

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/additions"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/controllers/rollout"
	"github.com/bluesky/tiled-operator/names"
)

// maxPendingPaths bounds status.pendingRollout.differs.
const maxPendingPaths = 20

// renderGate is what the instance controller does with a change of the Tiled StatefulSet that its
// render makes without a change of the instance's spec (a new operator release: a new default, label,
// annotation or probe in the pod template). An instance in a TiledCluster does not apply it at once:
// it reports it (status.pendingRollout, the RolloutPending condition, an Event) and the cluster's
// rollout approves it within spec.rollout.maxUnavailable, holds and pause (package rollout,
// tiledcluster_plan.go), by setting AnnotationApprovedTemplate to its hash. A standalone instance
// applies it at once, with the Event.
//
// With spec.maintenance, the gate also holds the disruptive changes that wait for the maintenance
// calendar to open (tiledinstance_maintenance.go): a change of the Tiled or PostgreSQL pod template
// from the spec or the render, and the start of a Tiled upgrade.
type renderGate struct {
	// skips are the StatefulSets not to apply (none: apply everything), each kept (not pruned) as
	// it is.
	skips []gateSkip
	// pending is the status.pendingRollout to report (nil: none).
	pending *tiledv1alpha1.PendingRollout
	// event, when not "", is the RenderChanged Event's message of a standalone instance's change,
	// applied at once.
	event string
	// images is the image check's part: the StatefulSets it holds are among skips
	// (tiledinstance_imagecheck.go).
	images imageChecks
	// dependencyWait, when not "", says that the Tiled StatefulSet's change waits for a managed
	// dependency to be ready, and which (tiledinstance_dependencies.go): the RolloutPending
	// condition's message, reason WaitingForDependency.
	dependencyWait string
}

// gateSkip is a StatefulSet the apply leaves as it is: its index in the render, and its generation.
type gateSkip struct {
	idx        int
	generation int64
}

// skipped says the child at index i of the render is not applied.
func (g renderGate) skipped(i int) bool {
	for _, s := range g.skips {
		if s.idx == i {
			return true
		}
	}
	return false
}

// gateRender decides the renderGate of one reconcile. It is a render change (not a spec change)
// when the Tiled StatefulSet's intent differs from the one the live object carries while the
// instance's status describes its current generation, it is Ready, no upgrade or restore runs, and
// the applier did not apply this intent itself. Only then is the live StatefulSet read whole (the
// cache holds it trimmed), once, past the cache, to say which paths of its pod template differ; a
// change that differs in none (nothing restarts) is applied at once.
func (r *TiledInstanceReconciler) gateRender(ctx context.Context, cur *instanceState, in instanceInputs, want *desired.Children) (renderGate, error) {
	ti := cur.ti
	if g, gated, err := r.gateMaintenance(ctx, cur, in, want); gated || err != nil {
		return g, err
	}
	var g renderGate
	if ti.Generation != ti.Status.ObservedGeneration || !instanceReady(ti) || ti.Status.Upgrade != nil || in.restoring || in.upgrade.Changed {
		return g, nil // a spec change, a start, an instance not serving anyway, or the upgrade's own change
	}
	if l := in.render.Lifecycle; l != nil && (l.ServingImage != "" || l.Stopped || l.Step != nil) {
		return g, nil
	}
	name := names.For(ti.Namespace, in.spec.Name).Tiled
	key := stsKey(ti.Namespace, name)
	idx := -1
	for i := range want.Len() {
		if want.Prepared(i).Key == key {
			idx = i
		}
	}
	if idx < 0 {
		return g, nil
	}
	p := want.Prepared(idx)
	if r.Applier.Holds(p) {
		return g, nil
	}
	live := cur.statefulSet(ctx, key)
	if live == nil {
		return g, nil
	}
	hash := p.Annotation()
	if was := applier.IntentOf(live); was == "" || was == hash {
		return g, nil
	}
	ref := metav1.GetControllerOf(ti)
	member := ref != nil && ref.Kind == "TiledCluster"
	if member && ti.Annotations[tiledv1alpha1.AnnotationApprovedTemplate] == hash {
		return g, nil // approved by the cluster's rollout
	}
	prev := r.previousPending(ti)
	same := samePending(prev, name, hash)
	var differs []string
	var added additions.Added
	if same {
		// Found before: not read again. What it adds was found before it was applied (the objects
		// it adds exist once the first reconcile that found it applied the others).
		differs, added = prev.Differs, additions.Added{Objects: prev.AddedObjects, Images: prev.AddedImages}
	} else {
		obj, err := want.Object(idx)
		if err != nil {
			return g, err
		}
		if differs, err = r.templateDiff(ctx, obj); err != nil {
			return g, err
		}
		if len(differs) == 0 {
			return g, nil // the pod template stays as it is: nothing restarts
		}
		if added, err = r.renderAdditions(ctx, cur, want); err != nil {
			return g, err
		}
	}
	if !member {
		if same && prev.Change != "" && prev.Change != changeRender {
			// A change of the spec (or an upgrade's) that waited for the maintenance window.
			g.event = fmt.Sprintf("StatefulSet %s: the maintenance window is open: the change of its pod template that waited for it "+
				"(spec.maintenance) is applied: %s", name, strings.Join(differs, ", "))
			return g, nil
		}
		g.event = fmt.Sprintf("StatefulSet %s: the operator renders its pod template differently though the instance's spec did not change "+
			"(a new operator release, or a changed TiledProfile)%s; applied at once (a standalone instance has no rollout); the paths that differ: %s",
			name, addedPhrase(added), strings.Join(differs, ", "))
		return g, nil
	}
	g.skips = []gateSkip{{idx: idx, generation: live.Generation}}
	g.pending = &tiledv1alpha1.PendingRollout{StatefulSet: name, TemplateHash: hash, Differs: differs[:min(len(differs), maxPendingPaths)], DifferCount: int32(len(differs))}
	added = additions.Limit(added, maxPendingPaths)
	g.pending.AddedObjects, g.pending.AddedImages = added.Objects, added.Images
	if same {
		g.pending.Differs, g.pending.DifferCount, g.pending.Since = prev.Differs, prev.DifferCount, prev.Since
		// A change that waited for the maintenance window keeps its kind; it now waits for the
		// cluster's rollout as a render change does.
		g.pending.Change = prev.Change
	}
	if g.pending.Since == nil {
		now := metav1.Now().Rfc3339Copy()
		g.pending.Since = &now
	}
	r.memories.pending.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name},
		over(ti, g.pending))
	return g, nil
}

// samePending says prev (nil: none) is the pending change of the StatefulSet name to the template
// of this hash: found before, so not looked for again.
func samePending(prev *tiledv1alpha1.PendingRollout, name, hash string) bool {
	return prev != nil && prev.TemplateHash == hash && prev.StatefulSet == name
}

// previousPending is the status.pendingRollout found before: by a reconcile whose status the cache
// does not show yet, else the cache's.
func (r *TiledInstanceReconciler) previousPending(ti *tiledv1alpha1.TiledInstance) *tiledv1alpha1.PendingRollout {
	if w, ok := r.memories.pending.load(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}); ok {
		return w.of(&r.memories, ti, ti.Status.PendingRollout)
	}
	return ti.Status.PendingRollout
}

// renderAdditions says what the instance's desired children add to it (package additions): the
// children the cache does not hold, and the images of the desired StatefulSets' pod templates that
// none of its live StatefulSets runs. The cache holds StatefulSets trimmed (their Tiled container's
// image only), so the instance's StatefulSets are listed whole, past the cache, in one request (by
// its app.kubernetes.io/instance label, those it controls): only when a render change is found.
func (r *TiledInstanceReconciler) renderAdditions(ctx context.Context, cur *instanceState, want *desired.Children) (additions.Added, error) {
	ti := cur.ti
	var children []additions.Child
	present := map[additions.Child]bool{}
	var wantImages []string
	for i := range want.Len() {
		k := want.Prepared(i).Key
		c := additions.Child{Kind: k.Kind, Name: k.Name}
		children = append(children, c)
		obj, err := cur.child(ctx, k)
		if err != nil {
			return additions.Added{}, err
		}
		present[c] = obj != nil
		if k.Kind == "StatefulSet" {
			o, err := want.Object(i)
			if err != nil {
				return additions.Added{}, err
			}
			wantImages = append(wantImages, additions.TemplateImages(o.Object)...)
		}
	}
	var list appsv1.StatefulSetList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(ti.Namespace), client.MatchingLabels{tiledv1alpha1.LabelAppInstance: ti.Name}); err != nil {
		return additions.Added{}, fmt.Errorf("reading the StatefulSets of %s/%s to compare their images: %w", ti.Namespace, ti.Name, err)
	}
	var liveImages []string
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == ti.UID {
			liveImages = append(liveImages, additions.PodImages(&list.Items[i].Spec.Template.Spec)...)
		}
	}
	return additions.Find(children, func(c additions.Child) bool { return present[c] }, wantImages, liveImages), nil
}

// addedPhrase is "; it adds images ... and objects ..." of the render change's messages ("" when
// it adds nothing).
func addedPhrase(a additions.Added) string {
	if d := additions.Describe(a); d != "" {
		return "; " + d
	}
	return ""
}

// templateDiff reads the live StatefulSet obj names whole, past the cache (one request), and returns the paths of its pod
// template that applying obj would change (rollout.TemplateDiff), with the field set the operator
// applied to it.
func (r *TiledInstanceReconciler) templateDiff(ctx context.Context, obj *unstructured.Unstructured) ([]string, error) {
	k := obj.GetNamespace() + "/" + obj.GetName()
	// A list of the one object (field selector on its name), not a get: the operator's role lists
	// StatefulSets and gets none, and this read is rare enough not to be worth a verb of its own.
	var list appsv1.StatefulSetList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{"metadata.name": obj.GetName()}); err != nil {
		return nil, fmt.Errorf("reading StatefulSet %s to compare its pod template: %w", k, err)
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("reading StatefulSet %s to compare its pod template: found %d", k, len(list.Items))
	}
	live := &list.Items[0]
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err != nil {
		return nil, err
	}
	var owned []byte
	for _, mf := range live.ManagedFields {
		if mf.Manager == tiledv1alpha1.FieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" && mf.FieldsV1 != nil {
			owned = mf.FieldsV1.GetRawBytes()
		}
	}
	differs, err := rollout.TemplateDiff(obj.Object, content, owned)
	if err != nil {
		return nil, fmt.Errorf("comparing the pod template of StatefulSet %s: %w", k, err)
	}
	return differs, nil
}

// pendingMessage is the RolloutPending condition's message and the RenderChanged Event's.
func pendingMessage(ti *tiledv1alpha1.TiledInstance, p *tiledv1alpha1.PendingRollout) string {
	cluster := "its TiledCluster"
	if ref := metav1.GetControllerOf(ti); ref != nil {
		cluster = "TiledCluster " + ref.Name
	}
	paths := strings.Join(p.Differs, ", ")
	if more := int(p.DifferCount) - len(p.Differs); more > 0 {
		paths += fmt.Sprintf(" and %d more", more)
	}
	if p.Window != "" {
		return windowMessage(p, paths) + approvalPhrase(p)
	}
	if p.Approval == tiledv1alpha1.ApprovalRequired {
		return fmt.Sprintf("StatefulSet %s: %s: %s; the change waits for a person's approval", p.StatefulSet, changeWhat(p.Change), paths) + approvalPhrase(p)
	}
	if p.Change != "" && p.Change != changeRender {
		return fmt.Sprintf("StatefulSet %s: %s: %s; the maintenance window is open, and the change waits for %s's rollout to let it through "+
			"(spec.rollout.maxUnavailable, spec.instances[].hold, spec.paused)", p.StatefulSet, changeWhat(p.Change), paths, cluster)
	}
	added := addedPhrase(additions.Added{Objects: p.AddedObjects, Images: p.AddedImages})
	return fmt.Sprintf("StatefulSet %s: the operator renders its pod template differently though the instance's spec did not change "+
		"(a new operator release)%s; the paths that differ: %s; the change waits for %s's rollout to let it through (spec.rollout.maxUnavailable, spec.instances[].hold, spec.paused)",
		p.StatefulSet, added, paths, cluster)
}

// approvalChanged passes the updates of a TiledInstance that change AnnotationApprovedTemplate (the
// cluster's rollout approving a render change, tiledcluster_apply.go), AnnotationAcceptCatalogLoss
// (a person accepting the loss of its catalog, tiledinstance_lostcatalog.go), or AnnotationRestore
// and AnnotationRestoreRequest (a restore in place requested, tiledinstance_inplace.go).
var approvalChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		for _, k := range []string{tiledv1alpha1.AnnotationApprovedTemplate, tiledv1alpha1.AnnotationAcceptCatalogLoss,
			tiledv1alpha1.AnnotationRestore, tiledv1alpha1.AnnotationRestoreRequest, tiledv1alpha1.AnnotationApproveThroughWindow,
			tiledv1alpha1.AnnotationApprovedBy} {
			if e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k] {
				return true
			}
		}
		if e.ObjectOld.GetLabels()[tiledv1alpha1.LabelApprove] != e.ObjectNew.GetLabels()[tiledv1alpha1.LabelApprove] {
			return true // a person's approval of a pending change (tiledinstance_approval.go)
		}
		return false
	},
}

// renderChangedEvent sends the RenderChanged Event of a change just recorded in the status (or of a
// standalone instance's, applied at once).
func (r *TiledInstanceReconciler) renderChangedEvent(ti *tiledv1alpha1.TiledInstance, msg string) {
	r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, ReasonRenderChanged, "Rollout", "%s", eventNote(msg))
}

// pendingEvent sends the Event of a pending change just recorded in the status: RenderChanged, or
// WaitingForMaintenance for one the maintenance calendar holds.
func (r *TiledInstanceReconciler) pendingEvent(ti *tiledv1alpha1.TiledInstance, p *tiledv1alpha1.PendingRollout) {
	reason := ReasonRenderChanged
	switch {
	case p.Approval == tiledv1alpha1.ApprovalRequired:
		reason = ReasonWaitingForApproval
	case p.Window != "":
		reason = ReasonWaitingForMaintenance
	}
	r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, reason, "Rollout", "%s", eventNote(pendingMessage(ti, p)))
}
