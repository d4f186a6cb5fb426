package webhooks_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

func TestProfileDeleteWarnsAboutUsers(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	standalone := f.Terse.DeepCopy()
	h := handlers(f.reader(standalone))["validate-profile"]
	resp := h.Handle(context.Background(), request(t, admissionv1.Delete, &f.Profiles[1], nil))
	g.Expect(resp.Allowed).To(BeTrue())
	g.Expect(resp.Warnings).To(ContainElement(ContainSubstring("TiledProfile beamlines/security is used by TiledCluster(s) nsls2")))
	g.Expect(resp.Warnings).To(ContainElement(ContainSubstring("selected by standalone TiledInstance(s) demo")))

	unused := f.Profiles[5].DeepCopy() // clash-a: no cluster selects it
	resp = h.Handle(context.Background(), request(t, admissionv1.Delete, unused, nil))
	g.Expect(resp.Allowed).To(BeTrue())
	g.Expect(resp.Warnings).To(BeEmpty())
}

func TestProfileConflictAlreadyThereOrAllowedIsAWarning(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	rival := admissiontable.ProfileHead + `  priority: 0
  tiled: {image: "ghcr.io/bluesky/tiled:0.2.19"}`
	// Allowed on purpose with the annotation.
	annotated := strings.Replace(rival, "  name: bad\n", "  name: bad\n  annotations: {"+v1alpha1.AnnotationAllowConflicts+": \"true\"}\n", 1)
	resp := handlers(f.reader())["validate-profile"].Handle(context.Background(), request(t, admissionv1.Create, annotated, nil))
	g.Expect(resp.Allowed).To(BeTrue())
	g.Expect(resp.Warnings).To(ContainElement(ContainSubstring("would be left in conflict")))

	// Already in conflict before the edit: editing the rival again is not made worse.
	existing := &v1alpha1.TiledProfile{}
	g.Expect(json.Unmarshal(toJSON(t, rival), existing)).To(Succeed())
	existing.Namespace, existing.Generation = ns, 1
	r := f.reader(existing)
	edited := strings.Replace(rival, "0.2.19", "0.2.18", 1)
	resp = handlers(r)["validate-profile"].Handle(context.Background(), request(t, admissionv1.Update, edited, rival))
	g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
	g.Expect(resp.Warnings).To(ContainElement(ContainSubstring("TiledCluster beamlines/nsls2 would be left in conflict")))
}

// Two profiles of equal priority that agree, selected by a cluster of several instances: the
// engine's conflict cache once held a typed nil here and panicked on the second instance.
func TestProfileEqualToAnotherOfEqualPriority(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	twin := f.Profiles[1].DeepCopy() // security
	twin.Name = "security-twin"
	var resp admission.Response
	g.Expect(func() {
		resp = handlers(f.reader())["validate-profile"].Handle(context.Background(), request(t, admissionv1.Create, twin, nil))
	}).NotTo(Panic())
	g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
}
