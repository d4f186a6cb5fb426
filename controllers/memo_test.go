package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/rollout"
)

// TestMemoKeepsExpansionOnlyWhilePending: the cluster memo holds hashes, and the expanded instances
// only while a rollout still has instances to apply (or holds some); once every instance is
// applied it lets them go. A reconcile the memo answered expands again only when it needs an
// instance, and at most once.
func TestMemoKeepsExpansionOnlyWhilePending(t *testing.T) {
	instance := func() []*tiledv1alpha1.TiledInstance {
		return []*tiledv1alpha1.TiledInstance{{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-bmm"}}}
	}
	fresh, again := instance(), instance()
	for _, tc := range []struct {
		name          string
		pendingBefore []*tiledv1alpha1.TiledInstance
		fresh         []*tiledv1alpha1.TiledInstance
		needed        bool // the reconcile reads an instance (to send it, or to compare a held one)
		plan          rollout.Plan
		wantPending   []*tiledv1alpha1.TiledInstance
		wantExpanded  int
	}{
		{name: "all applied: nothing kept", fresh: fresh, plan: rollout.Plan{}},
		{name: "all applied: what was kept goes", pendingBefore: fresh, plan: rollout.Plan{}},
		{name: "waiting: this reconcile's expansion kept", fresh: fresh, plan: rollout.Plan{Pending: 3}, wantPending: fresh},
		{name: "held: kept", fresh: fresh, plan: rollout.Plan{Held: 1}, wantPending: fresh},
		{name: "waiting, memo answered, nothing expanded: kept as it was", pendingBefore: fresh, needed: true, plan: rollout.Plan{Pending: 1}, wantPending: fresh},
		{name: "waiting, expanded again for a send: that expansion kept", needed: true, plan: rollout.Plan{Pending: 1}, wantPending: again, wantExpanded: 1},
		{name: "all applied, memo answered, nothing needed: no expansion", plan: rollout.Plan{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &memo{intents: []intent{{name: "nsls2-bmm"}}, pending: tc.pendingBefore}
			typed := tc.fresh
			if typed == nil {
				typed = m.pending
			}
			expanded := 0
			v := &expansionView{cluster: "ns/nsls2", m: m, typed: typed, expand: func() ([]*tiledv1alpha1.TiledInstance, error) {
				expanded++
				return again, nil
			}}
			if tc.needed {
				for range 2 {
					got, err := v.get(0)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(got.Name).To(Equal("nsls2-bmm"))
				}
			}
			v.keepWhilePending(tc.plan)
			g.Expect(expanded).To(Equal(tc.wantExpanded))
			if tc.wantPending == nil {
				g.Expect(m.pending).To(BeNil())
			} else {
				g.Expect(m.pending).To(HaveLen(1))
				g.Expect(m.pending[0]).To(BeIdenticalTo(tc.wantPending[0]))
			}
		})
	}
}

// TestExpansionViewRefusesAChangedExpansion: an expansion that no longer lines up with the memo's
// intents is an error naming the cluster, never a wrong instance applied.
func TestExpansionViewRefusesAChangedExpansion(t *testing.T) {
	g := NewWithT(t)
	m := &memo{intents: []intent{{name: "nsls2-bmm"}}}
	v := &expansionView{cluster: "ns/nsls2", m: m, expand: func() ([]*tiledv1alpha1.TiledInstance, error) {
		return []*tiledv1alpha1.TiledInstance{{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-chx"}}}, nil
	}}
	_, err := v.get(0)
	g.Expect(err).To(MatchError(ContainSubstring("the expansion of ns/nsls2 changed under the same inputs (instance 0: nsls2-bmm)")))
}
