package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// recordingQueue records what an event handler adds, and when it asks for it.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []reconcile.Request
	after map[reconcile.Request]time.Duration
}

func (q *recordingQueue) Add(r reconcile.Request) { q.added = append(q.added, r) }
func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	if q.after == nil {
		q.after = map[reconcile.Request]time.Duration{}
	}
	q.after[r] = d
}

// TestMemberChangesArePaced: a change of a TiledInstance enqueues the cluster that controls it after
// memberPace times the cluster's last reconcile (at once before it has one, never longer than
// maxMemberWait); a deletion enqueues it at once; an instance no cluster controls enqueues nothing.
func TestMemberChangesArePaced(t *testing.T) {
	member := func(owner *metav1.OwnerReference) *tiledv1alpha1.TiledInstance {
		ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "nsls2", Name: "nsls2-bmm"}}
		if owner != nil {
			ti.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return ti
	}
	controller := &metav1.OwnerReference{APIVersion: tiledv1alpha1.GroupVersion.String(), Kind: "TiledCluster", Name: "nsls2", UID: "u", Controller: ptr.To(true)}
	cluster := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "nsls2", Name: "nsls2"}}
	for _, tc := range []struct {
		name      string
		owner     *metav1.OwnerReference
		took      time.Duration // the cluster's last reconcile; 0: none yet
		deleted   bool
		wantAdded bool
		wantAfter *time.Duration
	}{
		{name: "first change: at once", owner: controller, wantAfter: ptr.To(time.Duration(0))},
		{name: "after a 40ms reconcile", owner: controller, took: 40 * time.Millisecond, wantAfter: ptr.To(160 * time.Millisecond)},
		{name: "bounded", owner: controller, took: time.Second, wantAfter: ptr.To(maxMemberWait)},
		{name: "deleted: at once", owner: controller, took: time.Second, deleted: true, wantAdded: true},
		{name: "no controller", owner: nil},
		{name: "another kind's", owner: &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", Controller: ptr.To(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &TiledClusterReconciler{}
			if tc.took > 0 {
				r.memories.took.store(cluster.NamespacedName, tc.took)
			}
			q := &recordingQueue{}
			h := r.memberHandler()
			ti := member(tc.owner)
			if tc.deleted {
				h.Delete(context.Background(), event.DeleteEvent{Object: ti}, q)
			} else {
				h.Update(context.Background(), event.UpdateEvent{ObjectOld: ti, ObjectNew: ti}, q)
			}
			if tc.wantAdded {
				g.Expect(q.added).To(ConsistOf(cluster))
			} else {
				g.Expect(q.added).To(BeEmpty())
			}
			if tc.wantAfter != nil {
				g.Expect(q.after).To(HaveKeyWithValue(cluster, *tc.wantAfter))
			} else {
				g.Expect(q.after).To(BeEmpty())
			}
		})
	}
}
