package controllers

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/controllers/rollout"
)

// clusterPlan is what one reconcile does with each desired instance, from comparing the desired
// state with the current one.
type clusterPlan struct {
	rollout.Plan
	// members are, per desired instance (in order), the instance when this cluster controls it,
	// nil otherwise.
	members []*tiledv1alpha1.TiledInstance
	// held are the status.held entries of the held instances, sorted by name.
	held []tiledv1alpha1.HeldInstance
}

// plan compares what the cluster wants with what is there — for each desired instance, whether it
// exists, who controls it, whether it is up to date (its expansion hash) and Ready, and, when held,
// the fields a change would change — and makes the rollout plan (package rollout).
func plan(cur *clusterState, want *desired.Instances) (clusterPlan, error) {
	cluster := cur.cluster
	hold := map[string]bool{}
	for _, ci := range cluster.Spec.Instances {
		hold[ci.Name] = ci.Hold
	}
	observed := make([]rollout.Instance, want.Len())
	p := clusterPlan{members: make([]*tiledv1alpha1.TiledInstance, want.Len())}
	for i := range want.Len() {
		o := rollout.Instance{Name: want.Name(i)}
		member, exists, foreign := cur.member(o.Name)
		o.Exists, o.Foreign = exists, foreign
		if member != nil {
			p.members[i] = member
			o.UpToDate = member.Annotations[desired.AnnotationExpansionHash] == want.Hash(i)
			// A new database or cache image whose check runs is a change under way: once it passes,
			// the StatefulSet's pod is replaced. It takes the budget, as an upgrade's check does, so
			// that the next instance's change waits for it; a check that fails (the image cannot be
			// pulled or run) holds that change on its own, the instance serving, and takes nothing.
			// Likewise a change of the Tiled pod template that waits for its dependency
			// (RolloutPending WaitingForDependency): once the dependency is ready, the Tiled pods are
			// replaced (the stranded-rollout e2e case saw two beamlines without a Ready Tiled pod at
			// once when it took nothing).
			o.Ready = instanceReady(member) && !imageCheckRunning(member) && !waitingForDependency(member)
			// A change of the pod template the operator renders without a change of the spec (a new
			// operator release) rolls as a change of the spec does; with one of the spec, it goes
			// along with it.
			// A change that waits for the instance's maintenance window (pendingRollout.window) is
			// not let through, nor counted against the budget, until the window opens.
			// Nor is one that waits for a person's approval (spec.maintenance.approval Manual).
			pr := member.Status.PendingRollout
			o.RenderPending = o.UpToDate && pr != nil && pr.Window == "" && pr.Approval != tiledv1alpha1.ApprovalRequired
		}
		// A hold protects an instance that exists; one that does not is created.
		if hold[want.Instance(i)] && member != nil && o.RenderPending {
			pr := member.Status.PendingRollout
			fields := make([]string, len(pr.Differs))
			for j, d := range pr.Differs {
				fields[j] = "StatefulSet " + pr.StatefulSet + " " + d
			}
			o.Held = true
			e := heldEntry(cluster.Status.Held, o.Name, fields)
			e.FieldCount = max(e.FieldCount, pr.DifferCount)
			p.held = append(p.held, e)
		}
		if hold[want.Instance(i)] && member != nil && !o.UpToDate {
			fields, err := want.ChangedFields(member, i)
			if err != nil {
				return clusterPlan{}, fmt.Errorf("comparing the held instance %s with its expansion: %w", o.Name, err)
			}
			// A change no field shows (only the expansion hash differs) restarts nothing: applied.
			if len(fields) > 0 {
				o.Held = true
				p.held = append(p.held, heldEntry(cluster.Status.Held, o.Name, fields))
			}
		}
		observed[i] = o
	}
	sort.Slice(p.held, func(i, j int) bool { return p.held[i].Name < p.held[j].Name })
	p.Plan = rollout.Make(observed, rollout.MaxUnavailable(rolloutMaxUnavailable(cluster), len(cluster.Spec.Instances)))
	return p, nil
}

// heldEntry is the status.held entry of a held instance: the fields that would change (the first
// maxHeldFields) and since when, kept from the previous status.
func heldEntry(previous []tiledv1alpha1.HeldInstance, name string, fields []string) tiledv1alpha1.HeldInstance {
	e := tiledv1alpha1.HeldInstance{Name: name, Fields: fields[:min(len(fields), maxHeldFields)], FieldCount: int32(len(fields))}
	for _, p := range previous {
		if p.Name == name && p.Since != nil {
			e.Since = p.Since.DeepCopy()
		}
	}
	if e.Since == nil {
		now := metav1.Now().Rfc3339Copy()
		e.Since = &now
	}
	return e
}

// foreignOwner says who holds an instance this cluster does not control.
func foreignOwner(ref *metav1.OwnerReference) string {
	if ref == nil {
		return "has no controller (made by hand)"
	}
	return fmt.Sprintf("is controlled by %s %s", ref.Kind, ref.Name)
}

// rolloutMaxUnavailable is spec.rollout.maxUnavailable, nil when unset.
func rolloutMaxUnavailable(cluster *tiledv1alpha1.TiledCluster) *intstr.IntOrString {
	if cluster.Spec.Rollout == nil {
		return nil
	}
	return cluster.Spec.Rollout.MaxUnavailable
}
