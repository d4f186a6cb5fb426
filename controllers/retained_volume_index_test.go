package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// TestIndexVolumeCluster: releaseVolumes finds a cluster's NFS PersistentVolumes through this index
// alone, so a volume the index leaves out is never released, and one it files under another
// cluster is released by that cluster's reconcile.
func TestIndexVolumeCluster(t *testing.T) {
	pv := func(labels map[string]string, claimNS string) *corev1.PersistentVolume {
		v := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "v", Labels: labels}}
		if claimNS != "" {
			v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: claimNS, Name: "c"}
		}
		return v
	}
	managed := map[string]string{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue, tiledv1alpha1.LabelCluster: "nsls2"}
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want []string
	}{
		{"the operator's, of a cluster: claim namespace/cluster", pv(managed, "beamlines"), []string{"beamlines/nsls2"}},
		{"of a standalone instance (no cluster label)", pv(map[string]string{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}, "beamlines"), nil},
		{"someone else's, with the same cluster label", pv(map[string]string{tiledv1alpha1.LabelCluster: "nsls2"}, "beamlines"), nil},
		{"not bound to a claim", pv(managed, ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(indexVolumeCluster(tc.pv)).To(Equal(tc.want))
		})
	}
	g := NewWithT(t)
	g.Expect(indexVolumeCluster(&corev1.Secret{})).To(BeNil(), "only PersistentVolumes are indexed")
}
