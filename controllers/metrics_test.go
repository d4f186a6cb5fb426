package controllers

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
)

// A migration's end is counted under its instance's cluster (its controller ownerReference; ""
// for a standalone instance), by result; a second Metrics on the same registry counts into the
// first's counters.
func TestMigrationsAreCountedByResult(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	again := NewMetrics(reg) // a second manager of the process
	member := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "nsls2", Name: "nsls2-bmm",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(
			&tiledv1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Name: "nsls2", UID: "u"}},
			tiledv1alpha1.GroupVersion.WithKind("TiledCluster"))}}}
	lab := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "tiled"}}
	m.migrationEnded(member, &tiledv1alpha1.MigrationRecord{Result: upgrade.ResultSucceeded})
	again.migrationEnded(member, &tiledv1alpha1.MigrationRecord{Result: upgrade.ResultSucceeded})
	m.migrationEnded(lab, &tiledv1alpha1.MigrationRecord{Result: upgrade.ResultRolledBack})
	m.migrationEnded(lab, nil)
	(*Metrics)(nil).migrationEnded(lab, &tiledv1alpha1.MigrationRecord{Result: upgrade.ResultSucceeded})
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tiled_operator_migrations_total Database migrations of TiledInstances that ended, by result: succeeded, or failed (rolled back from the backup taken before it). tiled_cluster is the owning TiledCluster, empty for a standalone instance.
# TYPE tiled_operator_migrations_total counter
tiled_operator_migrations_total{instance="tiled",namespace="lab",result="failed",tiled_cluster=""} 1
tiled_operator_migrations_total{instance="nsls2-bmm",namespace="nsls2",result="succeeded",tiled_cluster="nsls2"} 2
`), "tiled_operator_migrations_total")).To(Succeed())
}

func TestClusterOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		want string
	}{
		{"standalone", nil, ""},
		{"a member", []metav1.OwnerReference{{APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledCluster", Name: "nsls2", Controller: ptr.To(true)}}, "nsls2"},
		{"an owner that is not the controller", []metav1.OwnerReference{{APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledCluster", Name: "nsls2"}}, ""},
		{"another group's kind", []metav1.OwnerReference{{APIVersion: "example.org/v1", Kind: "TiledCluster", Name: "x", Controller: ptr.To(true)}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tc.refs}}
			NewWithT(t).Expect(ClusterOf(ti)).To(Equal(tc.want))
		})
	}
}
