package expansion

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/config/crd"
	"github.com/bluesky/tiled-operator/render"
)

// The managed PostgreSQL's requests and limits, when no profile sets them, are the built-in defaults:
// in the expanded spec, with provenance "default" on every leaf, and exactly what the rendered
// container gets — nothing the spec does not show. A profile setting one leaf replaces that leaf only.
func TestDatabaseResourcesAreVisibleDefaults(t *testing.T) {
	g := NewWithT(t)
	want := DefaultBuiltins().Defaults.Database.Managed.Resources
	g.Expect(want).NotTo(BeNil())
	g.Expect(want.Requests).To(HaveKey(corev1.ResourceCPU))
	g.Expect(want.Requests).To(HaveKey(corev1.ResourceMemory))
	g.Expect(want.Limits).To(HaveKey(corev1.ResourceMemory))

	o := one(t, C("", I("x", nil)), P(t, "site", 0, "database: {managed: {image: 'postgres:16', size: 20Gi}}"))
	g.Expect(o.Spec.Database.Managed.Resources).To(Equal(want))
	for _, leaf := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
		g.Expect(o.Provenance).To(HaveKeyWithValue("spec.database.managed.resources."+leaf, SourceDefault))
	}
	g.Expect(renderedPostgresResources(t, g, o)).To(Equal(*want))

	o = one(t, C("", I("x", nil)), P(t, "site", 0, "database: {managed: {resources: {limits: {memory: 4Gi}}}}"))
	g.Expect(o.Spec.Database.Managed.Resources.Limits[corev1.ResourceMemory]).To(Equal(resource.MustParse("4Gi")))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.database.managed.resources.limits.memory", "profile/site@1"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.database.managed.resources.requests.memory", SourceDefault))
	g.Expect(renderedPostgresResources(t, g, o)).To(Equal(*o.Spec.Database.Managed.Resources))
}

func renderedPostgresResources(t *testing.T, g Gomega, ti *v1alpha1.TiledInstance) corev1.ResourceRequirements {
	t.Helper()
	_, _, sts := render.Postgres(ti, render.Inputs{})
	g.Expect(sts).NotTo(BeNil())
	b, err := json.Marshal(sts.Spec.Template.Spec.Containers[0].Resources)
	g.Expect(err).NotTo(HaveOccurred())
	var out corev1.ResourceRequirements
	g.Expect(json.Unmarshal(b, &out)).To(Succeed())
	return out
}

// The API reference (the CRDs' descriptions, and so docs/profile-reference.md and kubectl explain)
// states the built-in requests and limits that apply when no layer sets them.
func TestDefaultResourcesAreDocumented(t *testing.T) {
	g := NewWithT(t)
	d := DefaultBuiltins().Defaults
	for path, r := range map[string]*corev1.ResourceRequirements{
		"spec.tiled.resources":            d.Tiled.Resources,
		"spec.database.managed.resources": d.Database.Managed.Resources,
	} {
		cpu, mem, lim := r.Requests[corev1.ResourceCPU], r.Requests[corev1.ResourceMemory], r.Limits[corev1.ResourceMemory]
		want := "requests cpu " + cpu.String() + " and memory " + mem.String() + ", limit memory " + lim.String()
		for _, plural := range []string{"tiledprofiles", "tiledinstances"} {
			desc := crdDescription(t, g, plural, path)
			g.Expect(strings.Join(strings.Fields(desc), " ")).To(ContainSubstring(want), "%s %s", plural, path)
		}
	}
}

// crdDescription returns the description of the field at a dotted path of a CRD's v1alpha1 schema.
func crdDescription(t *testing.T, g Gomega, plural, path string) string {
	t.Helper()
	c, err := crd.Get(plural)
	g.Expect(err).NotTo(HaveOccurred())
	s := c.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, part := range strings.Split(path, ".") {
		p, ok := s.Properties[part]
		g.Expect(ok).To(BeTrue(), "%s: no %s in %s", plural, part, path)
		s = &p
	}
	return s.Description
}
