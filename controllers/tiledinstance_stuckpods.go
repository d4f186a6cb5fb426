package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
)

// The replacement of stuck pods, part of the status stage: a pod of one of the instance's
// StatefulSets that fails (an image it cannot pull, a crash loop) and is not Ready on an older
// revision, after the pod template changed (a fix, or a revert), is never replaced by the
// StatefulSet controller under OrderedReady pod management (PostgreSQL, cache; under Parallel,
// Tiled's, the controller may replace it first, and the operator's conditional deletion then finds
// it gone); the operator deletes it (podstatus.Stuck decides which), once per
// revision, and the StatefulSet controller creates it again from the current template.
//
// It writes nothing when nothing is stuck. Each deletion is made on the condition that the pod is
// still the one judged (its UID and resourceVersion): a pod that changed since the cache showed it
// is judged again at the next reconcile. It is recorded in status.replacedPods with the status the
// reconcile writes, and announced by an Event (StuckPodReplaced). Deleting a pod that is not Ready
// takes nothing from the rollout budget (it serves nothing); the template it comes back with is the
// one the rollout applied. A held instance (spec.instances[].hold of its TiledCluster) keeps its
// stuck pods, and its Stalled condition says so; a paused cluster's instances are not reconciled.

// stuckPods is what replaceStuck did: the records of status.replacedPods, and the pods it left
// because the instance is held (a sentence for the Stalled condition, "" when none).
type stuckPods struct {
	records []tiledv1alpha1.ReplacedPod
	held    string
}

// replaceStuck deletes the instance's stuck pods (podstatus.Stuck) among the pods of the
// StatefulSets sets (nil ones are left out: not there, or not the instance's) and returns the
// records of status.replacedPods: the previous ones that still matter (the pod's StatefulSet is
// there and the pod is not Ready on the revision it was replaced for), and one per pod deleted now.
func (r *TiledInstanceReconciler) replaceStuck(ctx context.Context, cur *instanceState, sets []*appsv1.StatefulSet) (stuckPods, error) {
	ti := cur.ti
	pods, err := cur.pods(ctx)
	if err != nil {
		return stuckPods{}, err
	}
	all := make([]corev1.Pod, 0, len(pods.server)+len(pods.database)+len(pods.cache))
	all = append(append(append(all, pods.server...), pods.database...), pods.cache...)
	key := client.ObjectKeyFromObject(ti)
	prev := ti.Status.ReplacedPods
	if w, ok := r.memories.replaced.load(key); ok {
		prev = w.of(&r.memories, ti, prev)
	}
	replaced := make(map[string]string, len(prev))
	for _, e := range prev {
		replaced[e.Pod] = e.Revision
	}
	var out stuckPods
	out.records = keptRecords(prev, sets, all)
	stuck := false
	for _, sts := range sets {
		if len(podstatus.Stuck(sts, all, replaced, false).Replace) > 0 {
			stuck = true
		}
	}
	if !stuck {
		return out, nil
	}
	// Only an instance with a stuck pod reads its cluster's holds.
	hold, err := cur.heldBy(ctx)
	if err != nil {
		return out, err
	}
	var held []string
	for _, sts := range sets {
		v := podstatus.Stuck(sts, all, replaced, hold != "")
		for _, p := range v.Held {
			held = append(held, fmt.Sprintf("pod %s is stuck on revision %s of StatefulSet %s (container %s %s) and is not replaced while %s is set",
				p.Pod, p.From, p.StatefulSet, p.Container, p.Reason, hold))
		}
		for _, p := range v.Replace {
			deleted, err := r.deleteStuck(ctx, ti, p)
			if err != nil {
				return out, err
			}
			if deleted {
				out.records = setRecord(out.records, tiledv1alpha1.ReplacedPod{Pod: p.Pod, Revision: p.To, Reason: p.Reason, Time: &metav1.Time{Time: time.Now().Truncate(time.Second)}})
				// Remembered at once: the status that records it is written after, and the cache
				// shows it later still.
				r.memories.replaced.store(key, over(ti, out.records))
			}
		}
	}
	out.held = strings.Join(held, "; ")
	return out, nil
}

// deleteStuck deletes the stuck pod p if it is still the one judged (its UID and resourceVersion),
// and sends the Event; false when the pod is gone or changed since (it is judged again with its
// next version).
func (r *TiledInstanceReconciler) deleteStuck(ctx context.Context, ti *tiledv1alpha1.TiledInstance, p podstatus.Replacement) (bool, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ti.Namespace, Name: p.Pod}}
	uid, rv := p.UID, p.ResourceVersion
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("stuck pod changed before its deletion", "pod", ti.Namespace+"/"+p.Pod, "error", err.Error())
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting the stuck pod %s/%s: %w", ti.Namespace, p.Pod, err)
	}
	r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, ReasonStuckPodReplaced, "Reconcile",
		"deleted pod %s: stuck on revision %s of StatefulSet %s, not Ready, container %s %s; the StatefulSet creates it again from revision %s (a StatefulSet with OrderedReady pod management never replaces a pod that is not Ready)",
		p.Pod, p.From, p.StatefulSet, p.Container, p.Reason, p.To)
	return true, nil
}

// keptRecords are the records of status.replacedPods that still matter: their pod is one of the
// StatefulSets sets' and is not Ready on the revision it was replaced for (podstatus.Recovered),
// sorted by pod.
func keptRecords(prev []tiledv1alpha1.ReplacedPod, sets []*appsv1.StatefulSet, pods []corev1.Pod) []tiledv1alpha1.ReplacedPod {
	var out []tiledv1alpha1.ReplacedPod
	for _, e := range prev {
		owned := false
		for _, sts := range sets {
			if sts != nil && podstatus.OwnedBy(e.Pod, sts.Name) {
				owned = true
			}
		}
		recovered := false
		for i := range pods {
			if pods[i].Name == e.Pod && podstatus.Recovered(&pods[i], e.Revision) {
				recovered = true
			}
		}
		if owned && !recovered {
			out = append(out, e)
		}
	}
	return out
}

// setRecord puts e into records in place of the pod's previous one, sorted by pod.
func setRecord(records []tiledv1alpha1.ReplacedPod, e tiledv1alpha1.ReplacedPod) []tiledv1alpha1.ReplacedPod {
	out := make([]tiledv1alpha1.ReplacedPod, 0, len(records)+1)
	for _, r := range records {
		if r.Pod != e.Pod {
			out = append(out, r)
		}
	}
	out = append(out, e)
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// heldBy names the hold of the instance's TiledCluster on it ("TiledCluster c spec.instances[b].hold"),
// "" when it is not held (or standalone).
func (s *instanceState) heldBy(ctx context.Context) (string, error) {
	ref := metav1.GetControllerOf(s.ti)
	if ref == nil || ref.Kind != "TiledCluster" {
		return "", nil
	}
	var clusters tiledv1alpha1.TiledClusterList
	if err := s.c.List(ctx, &clusters, client.InNamespace(s.ti.Namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
		return "", err
	}
	name := s.ti.Labels[tiledv1alpha1.LabelInstance]
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if c.Name != ref.Name || c.UID != ref.UID {
			continue
		}
		for _, ci := range c.Spec.Instances {
			if ci.Name == name && ci.Hold {
				return fmt.Sprintf("TiledCluster %s spec.instances[%s].hold", c.Name, ci.Name), nil
			}
		}
	}
	return "", nil
}
