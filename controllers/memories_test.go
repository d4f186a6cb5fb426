package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// TestMemoriesShowWhatTheCacheHasNotCaughtUpWith is the stuck pods' race: a reconcile started on a
// cache that showed version 10 though an earlier status write had made 12; it deleted a stuck pod,
// remembered the record over 10, and wrote the status that holds it (over 10, making 14). The next
// reconcile's cache shows 12: newer than 10, older than 14 — the record is read from the memory, or
// the status written from that cache drops it (and the pod's replacement is never recorded).
func TestMemoriesShowWhatTheCacheHasNotCaughtUpWith(t *testing.T) {
	record := []tiledv1alpha1.ReplacedPod{{Pod: "a-cache-0", Revision: "good"}}
	cases := []struct {
		name  string
		uid   types.UID
		rv    string // the cache's
		write *statusWrite
		want  bool
	}{
		{name: "the cache shows the version the memory was written over", uid: "u", rv: "10", want: true},
		{name: "a newer version, no status write remembered", uid: "u", rv: "12", want: false},
		{name: "a newer version older than the write over 10 (the race)", uid: "u", rv: "12", write: &statusWrite{uid: "u", over: "10", made: "14"}, want: true},
		{name: "the write's own version: the cache has caught up", uid: "u", rv: "14", write: &statusWrite{uid: "u", over: "10", made: "14"}, want: false},
		{name: "a version after the write", uid: "u", rv: "15", write: &statusWrite{uid: "u", over: "10", made: "14"}, want: false},
		{name: "compared as integers, not as text", uid: "u", rv: "9", write: &statusWrite{uid: "u", over: "8", made: "10"}, want: true},
		{name: "the last write went over another version", uid: "u", rv: "12", write: &statusWrite{uid: "u", over: "11", made: "14"}, want: false},
		{name: "the last write was another instance's of the same name", uid: "u", rv: "12", write: &statusWrite{uid: "old", over: "10", made: "14"}, want: false},
		{name: "another instance of the same name", uid: "new", rv: "10", want: false},
		{name: "a version that is not an integer is compared for equality only", uid: "u", rv: "x12", write: &statusWrite{uid: "u", over: "10", made: "14"}, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var m instanceMemories
			at := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "10"}}
			if tc.write != nil {
				at.ResourceVersion = tc.write.over // the last write went over it, unless the case says otherwise
				if tc.name == "the last write went over another version" {
					at.ResourceVersion = "10"
				}
			}
			w := over(at, record)
			if tc.write != nil {
				m.statusWrite.store(types.NamespacedName{Namespace: "ns", Name: "a"}, *tc.write)
			}
			cached := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: tc.uid, ResourceVersion: tc.rv}}
			got := w.of(&m, cached, nil)
			if tc.want {
				g.Expect(got).To(Equal(record))
			} else {
				g.Expect(got).To(BeNil())
			}
		})
	}
}

// TestWroteStatusRemembersTheWritesVersions: a status write that was sent is remembered with the
// version it went over and the one it made; one that made none (not sent) changes nothing.
func TestWroteStatusRemembersTheWritesVersions(t *testing.T) {
	g := NewWithT(t)
	var m instanceMemories
	ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "10"}}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	m.wroteStatus(ti, "")
	_, ok := m.statusWrite.load(key)
	g.Expect(ok).To(BeFalse())
	m.wroteStatus(ti, "14")
	w, ok := m.statusWrite.load(key)
	g.Expect(ok).To(BeTrue())
	g.Expect(w).To(Equal(statusWrite{uid: "u", over: "10", made: "14"}))
}

// TestApprovalRecordKeptUntilTheCacheShowsIt is the approved upgrade's race: the reconcile that
// accepted an approval wrote the upgrade's phase (making 12), then the status with
// status.lastApproval over it (making 14). A reconcile on a cache that shows 12 no longer sees the
// approval pending (the upgrade runs) and would write the status without the record; with the
// memory it keeps it, and records no second approval (no second Approved Event). Once the cache
// shows 14, the cache's record is read.
func TestApprovalRecordKeptUntilTheCacheShowsIt(t *testing.T) {
	g := NewWithT(t)
	r := &TiledInstanceReconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	accepting := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "12"}}
	approved := &tiledv1alpha1.ApprovalRecord{ChangeHash: "0123456789abcdef0123", Change: "Upgrade", ApprovedBy: "alice"}
	status := accepting.Status.DeepCopy()
	accepted, refused := approvalStatus(accepting, status, approved, metav1.Now())
	g.Expect(accepted).NotTo(BeNil())
	g.Expect(refused).To(BeNil())
	r.rememberApprovals(accepting, status, accepted, refused)
	r.memories.statusWrite.store(key, statusWrite{uid: "u", over: "12", made: "14"})

	// The next reconcile, on a cache that shows 12: the upgrade runs, nothing is approved now.
	stale := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "12"}}
	next := stale.Status.DeepCopy()
	r.rememberedApprovals(stale, next)
	again, _ := approvalStatus(stale, next, nil, metav1.Now())
	g.Expect(again).To(BeNil(), "no second Approved Event")
	g.Expect(next.LastApproval).NotTo(BeNil(), "the record is not dropped by a status computed from the stale cache")
	g.Expect(next.LastApproval.ApprovedBy).To(Equal("alice"))

	// The cache shows the write: its own record is read (here another, to tell them apart).
	caught := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "14"}}
	caught.Status.LastApproval = &tiledv1alpha1.ApprovalRecord{ChangeHash: "0123456789abcdef0123", ApprovedBy: "from-the-cache"}
	shown := caught.Status.DeepCopy()
	r.rememberedApprovals(caught, shown)
	g.Expect(shown.LastApproval.ApprovedBy).To(Equal("from-the-cache"))
}
