package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// An instance whose upgrade waits for a person while its old version serves takes nothing from the
// rollout budget (instanceReady); one whose pods are stopped, or that is not serving, does.
func TestUpgradeWaitingOnAPersonKeepsTheBudget(t *testing.T) {
	stalled := []metav1.Condition{{Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: "x"},
		{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: "x"}}
	progressing := []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: "Upgrading"}}
	ready := []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady}}
	cases := []struct {
		name    string
		phase   tiledv1alpha1.UpgradePhase // "" for no upgrade
		conds   []metav1.Condition
		serving int32
		stale   bool
		want    bool
	}{
		{name: "Ready", conds: ready, serving: 1, want: true},
		{name: "Ready at an older generation", conds: ready, serving: 1, stale: true, want: false},
		{name: "not Ready, no upgrade", conds: stalled, serving: 1, want: false},
		{name: "migration failed and undone, old version serving", phase: tiledv1alpha1.UpgradeFailed, conds: stalled, serving: 1, want: true},
		{name: "migration failed and undone, no pod ready yet", phase: tiledv1alpha1.UpgradeFailed, conds: stalled, serving: 0, want: false},
		{name: "check failed, old version serving", phase: tiledv1alpha1.UpgradeChecking, conds: stalled, serving: 2, want: true},
		{name: "backup failed, old version serving", phase: tiledv1alpha1.UpgradeBackingUp, conds: stalled, serving: 1, want: true},
		{name: "checking, not stalled: the upgrade goes on", phase: tiledv1alpha1.UpgradeChecking, conds: progressing, serving: 1, want: false},
		{name: "restore failed: Tiled stopped", phase: tiledv1alpha1.UpgradeRestoring, conds: stalled, serving: 0, want: false},
		{name: "migrating", phase: tiledv1alpha1.UpgradeMigrating, conds: progressing, serving: 0, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := &tiledv1alpha1.TiledInstance{}
			ti.Generation = 3
			ti.Status.ObservedGeneration = 3
			if tc.stale {
				ti.Status.ObservedGeneration = 2
			}
			ti.Status.Conditions, ti.Status.ReadyReplicas = tc.conds, tc.serving
			if tc.phase != "" {
				ti.Status.Upgrade = &tiledv1alpha1.UpgradeStatus{Phase: tc.phase}
			}
			g.Expect(instanceReady(ti)).To(Equal(tc.want))
		})
	}
}

// A reconcile whose cache has not yet shown the controller's last upgrade write decides from what
// was written; once the cache shows a newer instance, or for another instance of the same name, the
// cache wins.
func TestWrittenUpgradeOverAStaleCache(t *testing.T) {
	written := writtenUpgrade{uid: "u1", resourceVersion: "7",
		upgrade: &tiledv1alpha1.UpgradeStatus{Phase: tiledv1alpha1.UpgradeBackingUp, Backup: "pre-upgrade-1"},
		last:    &tiledv1alpha1.MigrationRecord{Result: "Succeeded"}}
	cached := &tiledv1alpha1.UpgradeStatus{Phase: tiledv1alpha1.UpgradeChecking}
	cases := []struct {
		name      string
		uid, rv   string
		wantPhase tiledv1alpha1.UpgradePhase
		wantLast  bool
	}{
		{name: "the cache still shows the instance written over", uid: "u1", rv: "7", wantPhase: tiledv1alpha1.UpgradeBackingUp, wantLast: true},
		{name: "the cache caught up (a newer instance)", uid: "u1", rv: "8", wantPhase: tiledv1alpha1.UpgradeChecking},
		{name: "another instance of the same name", uid: "u2", rv: "7", wantPhase: tiledv1alpha1.UpgradeChecking},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := &tiledv1alpha1.TiledInstance{}
			ti.UID, ti.ResourceVersion = types.UID(tc.uid), tc.rv
			ti.Status.Upgrade = cached.DeepCopy()
			written.apply(&instanceMemories{}, ti)
			g.Expect(ti.Status.Upgrade.Phase).To(Equal(tc.wantPhase))
			g.Expect(ti.Status.LastMigration != nil).To(Equal(tc.wantLast))
		})
	}
}
