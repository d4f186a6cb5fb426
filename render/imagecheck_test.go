package render

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// TestImageCheckGolden: the image check Jobs of the managed database and the streaming cache,
// against testdata/imagecheck-<component>.yaml (go test ./render -update rewrites them).
func TestImageCheckGolden(t *testing.T) {
	ti := singleUserManaged()
	ti.Spec.Database.Managed.ImagePullSecrets = []v1alpha1.LocalObjectReference{{Name: "registry"}}
	ti.Spec.Database.Managed.NodeSelector = map[string]string{"disk": "ssd"}
	ti.Spec.Database.Managed.Tolerations = []corev1.Toleration{{Key: "db", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	g := NewWithT(t)
	g.Expect(ManagedCacheEnabled(ti)).To(BeTrue(), "the fixture has a managed streaming cache")
	n := names.For(ti.Namespace, ti.Name)
	for _, tc := range []struct {
		name string
		c    ImageCheck
	}{
		{"postgres", ImageCheck{Component: ComponentDatabase, Image: "docker.io/library/postgres:17"}},
		{"cache", ImageCheck{Component: ComponentCache, Image: "docker.io/valkey/valkey:8.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			j, err := ImageCheckJob(ti, n, tc.c)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := jobYAML(j)
			g.Expect(err).NotTo(HaveOccurred())
			path := filepath.Join("testdata", "imagecheck-"+tc.name+".yaml")
			if *update {
				g.Expect(os.WriteFile(path, got, 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(path)
			g.Expect(err).NotTo(HaveOccurred(), "run go test ./render -update to create it")
			g.Expect(string(got)).To(Equal(string(want)))
		})
	}
}

// TestImageCheckJobName: one Job per image (a new image is a new Job), per component, within a
// label value's length.
func TestImageCheckJobName(t *testing.T) {
	g := NewWithT(t)
	n := names.For("ns", "a-rather-long-beamline-instance-name-that-goes-on-and-on-and-on")
	a := ImageCheckJobName(n, ImageCheck{Component: ComponentDatabase, Image: "postgres:16"})
	g.Expect(ImageCheckJobName(n, ImageCheck{Component: ComponentDatabase, Image: "postgres:16"})).To(Equal(a))
	g.Expect(ImageCheckJobName(n, ImageCheck{Component: ComponentDatabase, Image: "postgres:17"})).NotTo(Equal(a))
	g.Expect(ImageCheckJobName(n, ImageCheck{Component: ComponentCache, Image: "postgres:16"})).NotTo(Equal(a))
	g.Expect(len(a)).To(BeNumerically("<=", names.MaxLabelValueLength))
	_, err := ImageCheckJob(singleUserManaged(), n, ImageCheck{Component: ComponentServer, Image: "x"})
	g.Expect(err).To(HaveOccurred())
}

// TestImageCheckJobRestricted: the check's pod meets the restricted Pod Security Standard, like the
// StatefulSet's it precedes.
func TestImageCheckJobRestricted(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	n := names.For(ti.Namespace, ti.Name)
	for _, c := range []ImageCheck{{Component: ComponentDatabase, Image: "postgres:17"}, {Component: ComponentCache, Image: "valkey:8.1"}} {
		ac, err := ImageCheckJob(ti, n, c)
		g.Expect(err).NotTo(HaveOccurred())
		b, err := json.Marshal(ac)
		g.Expect(err).NotTo(HaveOccurred())
		var j batchv1.Job
		g.Expect(json.Unmarshal(b, &j)).To(Succeed())
		g.Expect(restrictedViolations(g, &j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec)).To(BeEmpty(), c.Component)
		g.Expect(j.Spec.Template.Spec.Volumes).To(BeEmpty(), "it mounts nothing")
		g.Expect(j.Spec.Template.Spec.Containers[0].Env).To(BeEmpty(), "it reads no Secret")
	}
}
