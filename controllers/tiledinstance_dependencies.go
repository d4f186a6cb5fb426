package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/names"
)

// Dependencies before dependants (issue 43). Tiled runs against the instance's managed PostgreSQL
// and, when it streams, its managed streaming cache; both are StatefulSets of the instance, applied
// before the Tiled StatefulSet in the same reconcile. A change that makes Tiled depend on something
// new or changed — streaming turned on (the cache's StatefulSet is new, and config.yml names it), a
// new cache or PostgreSQL pod template (a new image, a new setting) — would otherwise replace the
// Tiled pods at once with pods configured for a dependency that may never come up (an image the
// node cannot pull): the beamline then stops working although the pods it had served well.
//
// gateDependencies holds such a change: while a managed dependency the render wants is not ready at
// the template the render gives it, a change of the Tiled StatefulSet's pod template is not applied;
// the Tiled StatefulSet stays exactly as it is live (its pods keep serving with what they have), and
// the instance says what it waits for (the RolloutPending condition, reason WaitingForDependency,
// naming the dependency's StatefulSet and why it is not ready: what its pods' statuses say,
// package podstatus). The dependency itself is applied at once, and the next change of its
// StatefulSet's status (the StatefulSet controller reports its pods, an owned StatefulSet watched
// by the instance controller) reconciles the instance again: once the dependency is ready, the
// held change is applied.
//
// Ready is the StatefulSet rolled out at its current spec: the StatefulSet controller has seen its
// generation, every replica is updated and ready, and its current revision is its update revision
// (the StatefulSet controller moves the current revision only when the rollout completes). A
// dependency that is not ready for another reason than a change (an outage of its node, a pod that
// lost its image) holds the change too: Tiled pods replaced now would not work either, and the ones
// that run keep what they have.
//
// Nothing is held:
//   - when the Tiled StatefulSet does not exist (the instance is created, or its StatefulSet was
//     deleted: made at once, as before), or its intent does not change, or the change leaves its pod
//     template as it is (scaling: nothing restarts);
//   - while a Tiled upgrade, a restore (of a new instance, in place, or of a lost catalog) or any of
//     their steps is under way: they change the Tiled StatefulSet themselves, and a step that
//     started always finishes (as the maintenance gate, tiledinstance_maintenance.go);
//   - when another gate already holds the Tiled StatefulSet (the cluster's rollout, the maintenance
//     window): the change waits for that first, and for its dependencies once let through;
//   - for an external database or an external streaming cache: the operator cannot see whether
//     they are ready, and they are not its StatefulSets.
//
// It reads nothing in the steady state (the applier holds the Tiled intent: not even the cache),
// and past the cache only when the Tiled StatefulSet's intent changes while a dependency is not
// ready: then the live Tiled StatefulSet is read whole (templateDiff, one request, in each reconcile
// of the wait) to tell a change of its pod template from scaling and to name the paths that differ.

// tiledChange is what the dependency gate reads of the Tiled StatefulSet in one reconcile.
type tiledChange struct {
	// name is the Tiled StatefulSet's name.
	name string
	// exists: the cache holds the live Tiled StatefulSet.
	exists bool
	// liveIntent is the intent the live StatefulSet carries ("" when unknown: not applied by the
	// operator, or not cached); intent the one this reconcile's render gives it.
	liveIntent, intent string
	// busy: an upgrade, a restore or a lost catalog's step is under way, another gate already holds
	// the StatefulSet, or the applier knows it applied this intent itself.
	busy bool
}

// changes says the reconcile would change the live Tiled StatefulSet: the only case the gate
// looks at its dependencies for.
func (t tiledChange) changes() bool {
	return t.exists && !t.busy && t.liveIntent != "" && t.liveIntent != t.intent
}

// dependencyState is one managed dependency of Tiled (a StatefulSet of the instance) as one
// reconcile sees it.
type dependencyState struct {
	// name is the StatefulSet's name; what says what it is, for messages ("the managed streaming
	// cache").
	name, what string
	// live is the StatefulSet as the cache holds it (nil: it does not exist yet, this reconcile
	// creates it); liveIntent the intent it carries, intent the one this reconcile's render gives it.
	live               *appsv1.StatefulSet
	liveIntent, intent string
	// problem is what its pods' statuses say is wrong (podstatus.Diagnose; nil: nothing it can name).
	problem *podstatus.Problem
}

// notReady says why the dependency is not ready at the template the render gives it, "" when it is.
func (d dependencyState) notReady() string {
	var why string
	switch {
	case d.live == nil:
		why = "it does not exist yet (created now)"
	case d.liveIntent != d.intent:
		why = "its new version is applied now"
	case d.live.Status.ObservedGeneration < d.live.Generation:
		why = fmt.Sprintf("the StatefulSet controller has not rolled out generation %d yet", d.live.Generation)
	default:
		s, want := d.live.Status, int32(1)
		if d.live.Spec.Replicas != nil {
			want = *d.live.Spec.Replicas
		}
		if s.ReadyReplicas >= want && s.UpdatedReplicas >= want && s.UpdateRevision == s.CurrentRevision {
			return ""
		}
		why = fmt.Sprintf("%d of %d pods ready, %d on its update revision %s", s.ReadyReplicas, want, s.UpdatedReplicas, s.UpdateRevision)
	}
	if d.problem != nil {
		why += ": " + d.problem.Message
	}
	return why
}

// dependencyInput is what decideDependencies decides from.
type dependencyInput struct {
	tiled tiledChange
	// deps are the managed dependencies the render wants (none for an external database and an
	// external or no streaming cache).
	deps []dependencyState
	// differs returns the paths of the Tiled pod template the change sets (none: scaling, or a
	// change of the StatefulSet's metadata). Called only when a dependency is not ready: it costs a
	// read past the cache.
	differs func() ([]string, error)
}

// dependencyVerdict is the dependency gate's decision: hold the Tiled StatefulSet as it is, and the
// RolloutPending message that says why ("" when nothing is held).
type dependencyVerdict struct {
	hold    bool
	message string
}

// decideDependencies is the dependency gate's pure decision (see above): the Tiled StatefulSet's
// change is held while one of its managed dependencies is not ready at its rendered template.
func decideDependencies(in dependencyInput) (dependencyVerdict, error) {
	var v dependencyVerdict
	if !in.tiled.changes() {
		return v, nil
	}
	var waits []string
	for _, d := range in.deps {
		if why := d.notReady(); why != "" {
			waits = append(waits, fmt.Sprintf("StatefulSet %s (%s) to be ready (%s)", d.name, d.what, why))
		}
	}
	if len(waits) == 0 {
		return v, nil
	}
	differs, err := in.differs()
	if err != nil {
		return v, err
	}
	if len(differs) == 0 {
		return dependencyVerdict{}, nil // the pod template stays as it is: nothing restarts
	}
	paths := strings.Join(differs[:min(len(differs), maxPendingPaths)], ", ")
	if more := len(differs) - maxPendingPaths; more > 0 {
		paths += fmt.Sprintf(" and %d more", more)
	}
	v.hold = true
	v.message = fmt.Sprintf("StatefulSet %s: the change of its pod template waits for %s; its pods keep the template they run until then; "+
		"the paths that differ: %s", in.tiled.name, strings.Join(waits, ", and for "), paths)
	return v, nil
}

// gateDependencies adds to the render gate g the hold of the Tiled StatefulSet while a managed
// dependency is not ready (see above), and the message that says so (g.dependencyWait). A held change's
// RenderChanged Event (a standalone instance's render change, applied at once) is not sent: it is
// sent when the change is applied, if it still is a render change then.
func (r *TiledInstanceReconciler) gateDependencies(ctx context.Context, cur *instanceState, in instanceInputs, want *desired.Children, g renderGate) (renderGate, error) {
	ti := cur.ti
	n := names.For(ti.Namespace, in.spec.Name)
	idx := indexInRender(want, stsKey(ti.Namespace, n.Tiled))
	if idx < 0 {
		return g, nil
	}
	p := want.Prepared(idx)
	t := tiledChange{name: n.Tiled, intent: p.Annotation()}
	t.busy = procedureUnderWay(ti, in) || g.skipped(idx) || r.Applier.Holds(p)
	var live *appsv1.StatefulSet
	if !t.busy {
		// Read only when it may change: in the steady state the applier holds the intent, and a
		// reconcile costs no read here.
		if live = cur.statefulSet(ctx, stsKey(ti.Namespace, n.Tiled)); live != nil {
			t.exists, t.liveIntent = true, applier.IntentOf(live)
		}
	}
	if !t.changes() {
		return g, nil // nothing to hold: no dependency is read
	}
	pods, err := cur.pods(ctx)
	if err != nil {
		return g, err
	}
	grace := r.ProbeGrace
	if grace == 0 {
		grace = DefaultProbeGrace
	}
	now := time.Now()
	dependencies := []struct {
		name, what string
		pods       []corev1.Pod
	}{
		{n.Postgres, "the managed PostgreSQL database", pods.database},
		{n.Cache, "the managed streaming cache", pods.cache},
	}
	var deps []dependencyState
	for _, dep := range dependencies {
		key := stsKey(ti.Namespace, dep.name)
		i := indexInRender(want, key)
		if i < 0 {
			continue // not rendered: an external database or cache, or no streaming
		}
		d := dependencyState{name: dep.name, what: dep.what, intent: want.Prepared(i).Annotation(), live: cur.statefulSet(ctx, key)}
		if d.live != nil {
			d.liveIntent = applier.IntentOf(d.live)
		}
		d.problem, _ = podstatus.Diagnose(dep.pods, now, grace)
		deps = append(deps, d)
	}
	v, err := decideDependencies(dependencyInput{tiled: t, deps: deps, differs: func() ([]string, error) {
		obj, err := want.Object(idx)
		if err != nil {
			return nil, err
		}
		return r.templateDiff(ctx, obj)
	}})
	if err != nil || !v.hold {
		return g, err
	}
	g.skips = append(g.skips, gateSkip{idx: idx, generation: live.Generation})
	g.dependencyWait = v.message
	g.event = ""
	return g, nil
}

// procedureUnderWay says a Tiled upgrade (started, or waiting for the maintenance window), a
// restore (of a new instance, in place, or of a lost catalog) or one of their steps is under way:
// they change the Tiled StatefulSet themselves, and are never held by a dependency.
func procedureUnderWay(ti *tiledv1alpha1.TiledInstance, in instanceInputs) bool {
	if ti.Status.Upgrade != nil || in.restoring || in.upgrade.Changed || in.heldUpgrade != "" {
		return true
	}
	l := in.render.Lifecycle
	return l != nil && (l.ServingImage != "" || l.Stopped || l.Step != nil)
}

// indexInRender is the index of the child k in the render, -1 when it is not rendered.
func indexInRender(want *desired.Children, k applier.Key) int {
	for i := range want.Len() {
		if want.Prepared(i).Key == k {
			return i
		}
	}
	return -1
}

// waitingForDependency says whether a change of the instance's Tiled pod template waits for a
// managed dependency (RolloutPending True, reason WaitingForDependency): the cluster's rollout
// counts such an instance against its budget (tiledcluster_plan.go).
func waitingForDependency(ti *tiledv1alpha1.TiledInstance) bool {
	c := meta.FindStatusCondition(ti.Status.Conditions, ConditionRolloutPending)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonWaitingForDependency
}
