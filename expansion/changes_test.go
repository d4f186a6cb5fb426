package expansion

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestChangedFields(t *testing.T) {
	cluster, profs := loadFleet(t)
	res, err := Expand(cluster, profs, DefaultBuiltins())
	if err != nil {
		t.Fatal(err)
	}
	base := res.Instances[0].Object.DeepCopy()
	base.Spec.Tiled.PodAnnotations = map[string]string{"team": "a"}
	base.Spec.Tiled.Env = append(base.Spec.Tiled.Env, v1alpha1.EnvVar{Name: "HOLD_TEST", Value: ptr.To("1")})
	base.Labels["team"] = "a"
	base.Provenance["spec.tiled.podAnnotations.team"] = "profile/a@1"
	base.Provenance["spec.tiled.image"] = "profile/a@1"

	for _, tc := range []struct {
		name   string
		edit   func(ti *v1alpha1.TiledInstance)
		fields []string
	}{
		{"identical", func(*v1alpha1.TiledInstance) {}, nil},
		{"a map value", func(ti *v1alpha1.TiledInstance) { ti.Spec.Tiled.PodAnnotations["team"] = "b" },
			[]string{"spec.tiled.podAnnotations.team"}},
		{"a map key added, not a plain name", func(ti *v1alpha1.TiledInstance) {
			ti.Spec.Tiled.NodeSelector = map[string]string{"kubernetes.io/hostname": "n1"}
		}, []string{`spec.tiled.nodeSelector["kubernetes.io/hostname"]`}},
		{"a map key removed", func(ti *v1alpha1.TiledInstance) { ti.Spec.Tiled.PodAnnotations = nil },
			[]string{"spec.tiled.podAnnotations.team"}},
		{"a keyed list item", func(ti *v1alpha1.TiledInstance) {
			ti.Spec.Tiled.Env[len(ti.Spec.Tiled.Env)-1].Value = ptr.To("2")
		}, []string{"spec.tiled.env[name=HOLD_TEST].value"}},
		{"two scalars", func(ti *v1alpha1.TiledInstance) {
			ti.Spec.Tiled.Image = "ghcr.io/bluesky/tiled:9.9.9"
			ti.Spec.Tiled.Replicas = ptr.To(*ti.Spec.Tiled.Replicas + 1)
		}, []string{"spec.tiled.image", "spec.tiled.replicas"}},
		{"a label", func(ti *v1alpha1.TiledInstance) { ti.Labels["team"] = "b" }, []string{"metadata.labels.team"}},
		{"a label removed, not a plain name", func(ti *v1alpha1.TiledInstance) { delete(ti.Labels, v1alpha1.LabelCluster) },
			[]string{`metadata.labels["` + v1alpha1.LabelCluster + `"]`}},
		{"the source of an unchanged value", func(ti *v1alpha1.TiledInstance) {
			ti.Provenance["spec.tiled.image"] = "profile/b@1"
		}, []string{FieldProvenance}},
		{"a value with its source", func(ti *v1alpha1.TiledInstance) {
			ti.Spec.Tiled.PodAnnotations["team"] = "b"
			ti.Provenance["spec.tiled.podAnnotations.team"] = "profile/b@1"
		}, []string{"spec.tiled.podAnnotations.team"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			desired := base.DeepCopy()
			tc.edit(desired)
			got, err := ChangedFields(base, desired)
			g.Expect(err).NotTo(HaveOccurred())
			// Symmetric: the same fields change going back.
			back, err := ChangedFields(desired, base)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.fields == nil {
				g.Expect(got).To(BeEmpty())
				g.Expect(back).To(BeEmpty())
				return
			}
			g.Expect(got).To(Equal(tc.fields))
			g.Expect(back).To(Equal(tc.fields))
		})
	}

	t.Run("empty specs", func(t *testing.T) {
		g := NewWithT(t)
		got, err := ChangedFields(&v1alpha1.TiledInstance{}, &v1alpha1.TiledInstance{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(BeEmpty())
	})
}
