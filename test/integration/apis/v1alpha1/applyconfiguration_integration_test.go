package v1alpha1_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	tiledac "github.com/bluesky/tiled-operator/applyconfiguration/apis/v1alpha1"
)

// TestApplyConfigurations applies a TiledProfile and a TiledCluster through the generated apply
// configurations (package applyconfiguration, the public Go API for clients that server-side apply
// the operator's kinds), as two field managers would: the API server accepts them, the objects read
// back as applied, and the instances merge by name (+listType=map), as the CRD's schema says.
func TestApplyConfigurations(t *testing.T) {
	g := NewWithT(t)
	ns := createNamespace(t, g, "applyconfig")

	profile := tiledac.TiledProfile("defaults", ns).
		WithLabels(map[string]string{"facility": "nsls2"}).
		WithSpec(tiledac.TiledProfileSpec().WithPriority(10).
			WithStorage(tiledac.StorageSpec().WithData(tiledac.DataVolume().WithSize("100Gi"))))
	g.Expect(env.Client.Apply(ctxT(t), profile, client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())

	// The GitOps tool's cluster: csx, and chx (with an override) unless withoutChx. A new apply
	// configuration each time: Apply fills the one it is given with what the server stored.
	gitops := func(withoutChx bool) *tiledac.TiledClusterApplyConfiguration {
		instances := []*tiledac.ClusterInstanceApplyConfiguration{tiledac.ClusterInstance().WithName("csx")}
		if !withoutChx {
			instances = append(instances, tiledac.ClusterInstance().WithName("chx").WithOverrides(
				tiledac.InstanceTemplate().WithStorage(tiledac.StorageSpec().WithData(tiledac.DataVolume().WithSize("2Ti")))))
		}
		return tiledac.TiledCluster("beamlines", ns).
			WithSpec(tiledac.TiledClusterSpec().
				WithProfileSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"facility": "nsls2"})).
				WithInstances(instances...))
	}
	g.Expect(env.Client.Apply(ctxT(t), gitops(false), client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())

	// A second manager adds one instance: merged by name, the others kept.
	held := tiledac.TiledCluster("beamlines", ns).
		WithSpec(tiledac.TiledClusterSpec().WithInstances(tiledac.ClusterInstance().WithName("bmm").WithHold(true)))
	g.Expect(env.Client.Apply(ctxT(t), held, client.FieldOwner("ops-console"))).To(Succeed())

	var gotProfile tiledv1alpha1.TiledProfile
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "defaults"}, &gotProfile)).To(Succeed())
	g.Expect(gotProfile.Spec.Priority).To(Equal(int32(10)))
	g.Expect(gotProfile.Spec.Storage.Data.Size).To(Equal("100Gi"))

	var got tiledv1alpha1.TiledCluster
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "beamlines"}, &got)).To(Succeed())
	g.Expect(got.Spec.ProfileSelector.MatchLabels).To(Equal(map[string]string{"facility": "nsls2"}))
	names := map[string]tiledv1alpha1.ClusterInstance{}
	for _, ci := range got.Spec.Instances {
		names[ci.Name] = ci
	}
	g.Expect(names).To(HaveLen(3))
	g.Expect(names["chx"].Overrides.Storage.Data.Size).To(Equal("2Ti"))
	g.Expect(names["bmm"].Hold).To(BeTrue())
	managers := map[string]bool{}
	for _, mf := range got.ManagedFields {
		managers[mf.Manager] = true
	}
	g.Expect(managers).To(HaveKey("gitops"))
	g.Expect(managers).To(HaveKey("ops-console"))

	// The first manager applies again without chx: its instance goes, the other manager's stays.
	g.Expect(env.Client.Apply(ctxT(t), gitops(true), client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "beamlines"}, &got)).To(Succeed())
	var left []string
	for _, ci := range got.Spec.Instances {
		left = append(left, ci.Name)
	}
	g.Expect(left).To(ConsistOf("csx", "bmm"))
}
