package operator

import (
	"encoding/json"
	"reflect"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// beamline is a TiledInstance as a fleet's cluster expands it: the same resources, replicas and
// pod annotations as every other beamline, an environment variable of its own.
func beamline(name string) *tiledv1alpha1.TiledInstance {
	ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-" + name, Namespace: "nsls2", UID: types.UID("uid-" + name)}}
	ti.Spec.Tiled = &tiledv1alpha1.TiledServerSpec{
		Image:    "ghcr.io/bluesky/tiled:0.2.20",
		Replicas: ptr.To(int32(1)),
		Resources: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
		},
		Env:            []tiledv1alpha1.EnvVar{{Name: "BEAMLINE", Value: ptr.To(name)}},
		PodAnnotations: map[string]string{"nsls2.bnl.gov/team": "data-services"},
	}
	return ti
}

// decoded is ti as the cache receives it: decoded from its encoding, every part its own.
func decoded(g Gomega, ti *tiledv1alpha1.TiledInstance) *tiledv1alpha1.TiledInstance {
	b, err := json.Marshal(ti)
	g.Expect(err).NotTo(HaveOccurred())
	out := &tiledv1alpha1.TiledInstance{}
	g.Expect(json.Unmarshal(b, out)).To(Succeed())
	return out
}

// TestInstancesShareTheirEqualParts: two cached beamlines hold one copy of each part they have
// equal (resources, their lists, replicas, pod annotations), a part of their own where they differ
// (env), and the part holding both (the Tiled server spec) each its own; both read as before, and
// sharing again changes nothing.
func TestInstancesShareTheirEqualParts(t *testing.T) {
	g := NewWithT(t)
	a, b := decoded(g, beamline("bmm")), decoded(g, beamline("chx"))
	g.Expect(a.Spec.Tiled.Resources).NotTo(BeIdenticalTo(b.Spec.Tiled.Resources))
	out, err := trimTransform()(a)
	g.Expect(err).NotTo(HaveOccurred())
	a = out.(*tiledv1alpha1.TiledInstance)
	out, err = trimTransform()(b)
	g.Expect(err).NotTo(HaveOccurred())
	b = out.(*tiledv1alpha1.TiledInstance)

	g.Expect(a.Spec.Tiled.Resources).To(BeIdenticalTo(b.Spec.Tiled.Resources))
	g.Expect(a.Spec.Tiled.Replicas).To(BeIdenticalTo(b.Spec.Tiled.Replicas))
	g.Expect(sameMap(a.Spec.Tiled.PodAnnotations, b.Spec.Tiled.PodAnnotations)).To(BeTrue())
	g.Expect(sameMap(a.Spec.Tiled.Resources.Requests, b.Spec.Tiled.Resources.Requests)).To(BeTrue())
	g.Expect(a.Spec.Tiled).NotTo(BeIdenticalTo(b.Spec.Tiled), "they differ in env")
	g.Expect(a.Spec.Tiled.Env).NotTo(Equal(b.Spec.Tiled.Env))

	g.Expect(a.Spec).To(Equal(beamline("bmm").Spec))
	g.Expect(b.Spec).To(Equal(beamline("chx").Spec))
	again := a.Spec.Tiled.Resources
	instanceParts.Share(&a.Spec)
	g.Expect(a.Spec.Tiled.Resources).To(BeIdenticalTo(again))
	g.Expect(a.Spec).To(Equal(beamline("bmm").Spec))

	// A copy handed out by the cache is the caller's own: writing it leaves the shared parts alone.
	c := a.DeepCopy()
	c.Spec.Tiled.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
	g.Expect(b.Spec.Tiled.Resources.Requests.Cpu().String()).To(Equal("250m"))
}

// sameMap says whether two maps are one map.
func sameMap(a, b any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
