package controllers

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/rollout"
)

// TestHeldMessage: the Ready condition names the first few held instances and counts the rest.
func TestHeldMessage(t *testing.T) {
	held := func(n int) []tiledv1alpha1.HeldInstance {
		out := make([]tiledv1alpha1.HeldInstance, n)
		for i := range out {
			out[i].Name = fmt.Sprintf("nsls2-b%02d", i)
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{1, "1 instance held (beamtime): nsls2-b00"},
		{2, "2 instances held (beamtime): nsls2-b00, nsls2-b01"},
		{7, "7 instances held (beamtime): nsls2-b00, nsls2-b01, nsls2-b02, nsls2-b03, nsls2-b04 and 2 more (status.held)"},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			NewWithT(t).Expect(heldMessage(held(tc.n))).To(Equal(tc.want))
		})
	}
}

// TestHeldEntry: status.held keeps at most maxHeldFields fields with the full count, and keeps the
// time a change was first held back.
func TestHeldEntry(t *testing.T) {
	g := NewWithT(t)
	fields := make([]string, 12)
	for i := range fields {
		fields[i] = fmt.Sprintf("spec.tiled.podAnnotations.a%02d", i)
	}
	e := heldEntry(nil, "nsls2-amx", fields)
	g.Expect(e.Name).To(Equal("nsls2-amx"))
	g.Expect(e.Fields).To(Equal(fields[:maxHeldFields]))
	g.Expect(e.FieldCount).To(Equal(int32(12)))
	g.Expect(e.Since).NotTo(BeNil())
	g.Expect(e.Since.Nanosecond()).To(BeZero(), "since is stored to the second; a finer time would differ from the cache and rewrite the status")

	then := metav1.NewTime(time.Date(2025, 6, 2, 9, 14, 3, 0, time.UTC))
	previous := []tiledv1alpha1.HeldInstance{{Name: "nsls2-bmm", Since: &metav1.Time{}}, {Name: "nsls2-amx", Since: &then}}
	e = heldEntry(previous, "nsls2-amx", fields[:1])
	g.Expect(e.Fields).To(Equal(fields[:1]))
	g.Expect(e.FieldCount).To(Equal(int32(1)))
	g.Expect(e.Since.Time).To(Equal(then.Time))
}

// TestStalledMembers: the cluster's Stalled message counts every stalled or refused member and
// names the first few, sorted, with their reasons.
func TestStalledMembers(t *testing.T) {
	g := NewWithT(t)
	member := func(name, reason string) *tiledv1alpha1.TiledInstance {
		ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if reason != "" {
			ti.Status.Conditions = []metav1.Condition{{Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: "pod " + name + "-0"}}
		}
		return ti
	}
	g.Expect(stalledMembers("fleet", 2, []*tiledv1alpha1.TiledInstance{member("fleet-a", ""), member("fleet-b", "")}, nil)).To(BeEmpty())
	msg := stalledMembers("fleet", 6, []*tiledv1alpha1.TiledInstance{
		member("fleet-d", ReasonImagePull), member("fleet-a", ""), member("fleet-b", ReasonCrashLoop), member("fleet-e", ReasonCrashLoop),
	}, []string{"fleet-c (invalid: spec.storage.data.size)"})
	g.Expect(msg).To(Equal("4 of 6 instances stalled: fleet-b (CrashLoopBackOff: pod fleet-b-0); fleet-c (invalid: spec.storage.data.size); " +
		"fleet-d (ImagePullBackOff: pod fleet-d-0); and 1 more (kubectl get ti -l tiled.blueskyproject.io/cluster=fleet shows each)"))
}

// TestClusterStalledKeepsItsTransitionTime: a cluster's Stalled computed again (a restarted
// operator's first reconcile) keeps its place and lastTransitionTime, so that nothing is written.
func TestClusterStalledKeepsItsTransitionTime(t *testing.T) {
	g := NewWithT(t)
	cluster := &tiledv1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Generation: 2}}
	member := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "fleet-a"}}
	member.Status.Conditions = []metav1.Condition{{Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: "CrashLoopBackOff", Message: "crash"}}
	p := clusterPlan{members: []*tiledv1alpha1.TiledInstance{member}}
	p.Decisions = []rollout.Decision{{Name: "fleet-a", Action: rollout.Apply, Member: true}}
	first := &tiledv1alpha1.TiledClusterStatus{}
	setRolloutStatus(first, cluster, p, clusterApplied{})
	c := meta.FindStatusCondition(first.Conditions, ConditionStalled)
	g.Expect(c).NotTo(BeNil())
	c.LastTransitionTime = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	again := first.DeepCopy()
	setRolloutStatus(again, cluster, p, clusterApplied{})
	g.Expect(again).To(Equal(first))
}
