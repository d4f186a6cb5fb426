package controllers

import (
	"testing"

	. "github.com/onsi/gomega"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/rollout"
)

// TestMemoKeepsExpansionOnlyWhilePending: the cluster memo holds hashes, and the expanded instances
// only while a rollout still has instances to apply (or holds some); once every instance is
// applied it lets them go.
func TestMemoKeepsExpansionOnlyWhilePending(t *testing.T) {
	fresh := []*tiledv1alpha1.TiledInstance{{}}
	again := []*tiledv1alpha1.TiledInstance{{}}
	for _, tc := range []struct {
		name                 string
		pendingBefore, fresh []*tiledv1alpha1.TiledInstance
		lastExpanded         []*tiledv1alpha1.TiledInstance
		plan                 rollout.Plan
		wantPending          []*tiledv1alpha1.TiledInstance
	}{
		{name: "all applied: nothing kept", fresh: fresh, plan: rollout.Plan{}, wantPending: nil},
		{name: "all applied: what was kept goes", pendingBefore: fresh, plan: rollout.Plan{}, wantPending: nil},
		{name: "waiting: this reconcile's expansion kept", fresh: fresh, plan: rollout.Plan{Pending: 3}, wantPending: fresh},
		{name: "held: kept", fresh: fresh, plan: rollout.Plan{Held: 1}, wantPending: fresh},
		{name: "waiting, memo answered, nothing expanded: kept as it was", pendingBefore: fresh, plan: rollout.Plan{Pending: 1}, wantPending: fresh},
		{name: "waiting, expanded again for a send: that expansion kept", lastExpanded: again, plan: rollout.Plan{Pending: 1}, wantPending: again},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &memo{pending: tc.pendingBefore, lastExpanded: tc.lastExpanded}
			m.keepWhilePending(tc.plan, tc.fresh)
			if tc.wantPending == nil {
				g.Expect(m.pending).To(BeNil())
			} else {
				g.Expect(m.pending).To(HaveLen(1))
				g.Expect(m.pending[0]).To(BeIdenticalTo(tc.wantPending[0]))
			}
			g.Expect(m.lastExpanded).To(BeNil())
		})
	}
}
