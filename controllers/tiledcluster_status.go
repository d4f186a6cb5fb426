package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/expansion"
)

// maxHeldListed and maxHeldFields bound status.held (heldInstances and fieldCount count them all).
const (
	maxHeldListed = 50
	maxHeldFields = 10
	// heldNamed is how many held instances the Ready condition names.
	heldNamed = 5
)

// status writes the status of a cluster that expanded — the profiles it selected, the instance
// counts, status.held and the Ready, Reconciling and Stalled conditions — when it changed, and the
// Events of what changed: an instance pruned, a transition. A name another owner holds is not a
// change of this cluster's objects: the cluster looks again now and then (once a minute, not a hot
// loop) in case it has gone.
func (r *TiledClusterReconciler) status(ctx context.Context, cur *clusterState, want *desired.Instances, p clusterPlan,
	done clusterApplied, pruned []string) (ctrl.Result, error) {
	cluster := cur.cluster
	status := baseStatus(cluster)
	status.Profiles = want.Profiles()
	names := make([]string, len(status.Profiles))
	for i, sp := range status.Profiles {
		names[i] = sp.Name
	}
	status.ProfileNames = strings.Join(names, ",")
	setCondition(&status.Conditions, cluster.Generation, ConditionProfilesResolved, metav1.ConditionTrue, ReasonResolved,
		fmt.Sprintf("%d profiles selected: %s", len(names), status.ProfileNames))
	setRolloutStatus(status, cluster, p, done)
	for _, name := range pruned {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, "InstanceRemoved", "Prune",
			"instance %s is no longer listed and was deleted", name)
	}
	var again ctrl.Result
	if p.Refused > 0 {
		again.RequeueAfter = time.Minute
	}
	sent, err := r.writeStatus(ctx, cluster, status)
	if err != nil || !sent {
		return again, err
	}
	// Events mark transitions only: sent once, when the status that records them is written.
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionStalled); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionProfilesResolved); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, ReasonResolved, "Expand", "%s; %d instances", c.Message, len(p.Decisions))
	}
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionReady); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, c.Reason, "Reconcile", "%s", c.Message)
	}
	return again, nil
}

// expansionFailed reports a cluster that cannot be expanded: ProfilesResolved=False and Stalled
// with the engine's reason and message; its children stay exactly as they were (nothing applied,
// nothing pruned). An Event, on the cluster and for a conflict on both profiles, marks the
// transition.
func (r *TiledClusterReconciler) expansionFailed(ctx context.Context, cur *clusterState, err error) error {
	cluster := cur.cluster
	reason := expansionReason(err)
	log.FromContext(ctx).WithValues("cluster", cluster.Namespace+"/"+cluster.Name).
		Info("expansion failed; instances left as they were", "reason", reason, "error", err.Error())
	status := baseStatus(cluster)
	setCondition(&status.Conditions, cluster.Generation, ConditionProfilesResolved, metav1.ConditionFalse, reason, err.Error())
	setStalled(&status.Conditions, cluster.Generation, reason, err.Error())
	setCondition(&status.Conditions, cluster.Generation, ConditionReady, metav1.ConditionFalse, reason, "the cluster cannot be expanded: "+err.Error())
	sent, werr := r.writeStatus(ctx, cluster, status)
	// Events mark transitions only: sent once, when the status that records them is written.
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionProfilesResolved); changed && sent {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, reason, "Expand", "%s", c.Message)
		r.eventOnConflictingProfiles(err, cur.profiles, cluster)
	}
	return werr
}

// baseStatus is the cluster's status as the cache holds it, a copy, with what every reconcile sets
// first: the generation observed, the instances' label selector and how many the spec lists.
func baseStatus(cluster *tiledv1alpha1.TiledCluster) *tiledv1alpha1.TiledClusterStatus {
	status := cluster.Status.DeepCopy()
	status.ObservedGeneration = cluster.Generation
	status.InstanceSelector = tiledv1alpha1.LabelCluster + "=" + cluster.Name
	status.Instances = int32(len(cluster.Spec.Instances))
	return status
}

// setRolloutStatus sets the instance counts, status.held and the Ready, Reconciling and Stalled
// conditions of a cluster that expanded, from the rollout plan and what carrying it out gave.
func setRolloutStatus(status *tiledv1alpha1.TiledClusterStatus, cluster *tiledv1alpha1.TiledCluster, p clusterPlan, done clusterApplied) {
	held := p.held
	total, pending := len(p.Decisions), p.Pending
	status.UpdatedInstances = int32(total - pending - p.Held)
	status.ReadyInstances = int32(done.ready)
	status.PendingInstances = int32(pending)
	status.HeldInstances = int32(len(held))
	status.Held = held[:min(len(held), maxHeldListed)]
	heldMsg := heldMessage(held)
	members := make([]*tiledv1alpha1.TiledInstance, 0, total)
	for _, m := range p.members {
		if m != nil {
			members = append(members, m)
		}
	}
	stalled := stalledMembers(cluster.Name, total, members, done.refused)
	// Stalled is removed only when nothing stalls: set again, it keeps its place and the time of
	// its transition (else a restarted operator's first reconcile would write a new one).
	if stalled == "" {
		removeCondition(&status.Conditions, ConditionStalled)
	}
	switch {
	case stalled != "":
		setStalled(&status.Conditions, cluster.Generation, ReasonInstancesStalled, stalled)
	case pending > 0:
		msg := fmt.Sprintf("rolling out: %d of %d instances updated, %d waiting (maxUnavailable %d)", int(status.UpdatedInstances), total, pending, p.MaxUnavailable)
		if heldMsg != "" {
			msg += "; " + heldMsg
		}
		setReconciling(&status.Conditions, cluster.Generation, ReasonRollingOut, msg)
	case int(status.ReadyInstances) < total:
		msg := fmt.Sprintf("%d of %d instances ready", status.ReadyInstances, total)
		if heldMsg != "" {
			msg = heldMsg + "; " + msg
		}
		setReconciling(&status.Conditions, cluster.Generation, ReasonWaitingForReady, msg)
	case len(held) > 0:
		// A hold is deliberate, not progress: the cluster is Ready, and says what it holds back.
		setReady(&status.Conditions, cluster.Generation, ReasonInstancesHeld, fmt.Sprintf("%s; %d of %d ready", heldMsg, status.ReadyInstances, total))
	default:
		setReady(&status.Conditions, cluster.Generation, ReasonAllReady, fmt.Sprintf("all %d instances ready", total))
	}
}

// heldMessage names the held instances for the Ready condition, e.g. "2 instances held (beamtime):
// nsls2-amx, nsls2-bmm"; "" when none is held. held is sorted by name.
func heldMessage(held []tiledv1alpha1.HeldInstance) string {
	if len(held) == 0 {
		return ""
	}
	names := make([]string, 0, heldNamed)
	for _, h := range held[:min(len(held), heldNamed)] {
		names = append(names, h.Name)
	}
	list := strings.Join(names, ", ")
	if len(held) > heldNamed {
		list += fmt.Sprintf(" and %d more (status.held)", len(held)-heldNamed)
	}
	if len(held) == 1 {
		return "1 instance held (beamtime): " + list
	}
	return fmt.Sprintf("%d instances held (beamtime): %s", len(held), list)
}

// stalledMembers describes the cluster's members that need a person: instances the API server
// refused, and instances whose own status is Stalled (with their reasons), the first few by name;
// "" when there are none.
func stalledMembers(cluster string, total int, members []*tiledv1alpha1.TiledInstance, refused []string) string {
	var list []string
	list = append(list, refused...)
	for _, ti := range members {
		if c := meta.FindStatusCondition(ti.Status.Conditions, ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			list = append(list, fmt.Sprintf("%s (%s: %s)", ti.Name, c.Reason, trimMessage(c.Message, 160)))
		}
	}
	if len(list) == 0 {
		return ""
	}
	sort.Strings(list)
	const shown = 3
	msg := fmt.Sprintf("%d of %d instances stalled: %s", len(list), total, strings.Join(list[:min(shown, len(list))], "; "))
	if len(list) > shown {
		msg += fmt.Sprintf("; and %d more (kubectl get ti -l %s=%s shows each)", len(list)-shown, tiledv1alpha1.LabelCluster, cluster)
	}
	return msg
}

// writeStatus applies the status when it differs from the one in the cache (and from the last one
// applied), and reports whether it sent it.
func (r *TiledClusterReconciler) writeStatus(ctx context.Context, cluster *tiledv1alpha1.TiledCluster, status *tiledv1alpha1.TiledClusterStatus) (bool, error) {
	if equality.Semantic.DeepEqual(&cluster.Status, status) {
		return false, nil
	}
	res, err := applyStatus(ctx, r.Applier, cluster, "TiledCluster", status)
	return res.Sent, err
}

// eventOnConflictingProfiles records the conflict on each profile involved.
func (r *TiledClusterReconciler) eventOnConflictingProfiles(err error, candidates []tiledv1alpha1.TiledProfile, cluster *tiledv1alpha1.TiledCluster) {
	var conflict *expansion.ConflictError
	if !errors.As(err, &conflict) {
		return
	}
	for _, src := range conflict.Profiles {
		for i := range candidates {
			if expansion.ProfileSource(&candidates[i]) == src {
				r.Recorder.Eventf(&candidates[i], cluster, corev1.EventTypeWarning, ReasonConflict, "Expand",
					"conflicts with %s on %s in cluster %s", other(conflict.Profiles, src), conflict.Field, cluster.Name)
			}
		}
	}
}

func other(pair [2]string, one string) string {
	if pair[0] == one {
		return pair[1]
	}
	return pair[0]
}

func trimError(err error) string { return trimMessage(err.Error(), 240) }

func trimMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
