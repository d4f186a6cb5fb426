package webhooks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

func TestBadObjectsRefusedByHandlers(t *testing.T) {
	f := loadFixtures(t, ns)
	hs := handlers(f.reader())
	for _, tc := range admissiontable.HandlerCases() {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			resp := hs[tc.Handler].Handle(context.Background(), request(t, admissionv1.Create, tc.Object, nil))
			g.Expect(resp.Allowed).To(BeFalse(), "allowed: %+v", resp.Result)
			g.Expect(resp.Result).NotTo(BeNil())
			t.Log(resp.Result.Message)
			g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusUnprocessableEntity))
			for _, w := range tc.Want {
				g.Expect(resp.Result.Message).To(ContainSubstring(w))
			}
		})
	}
	if n := len(admissiontable.HandlerCases()); n < 20 {
		t.Fatalf("only %d bad objects", n)
	}
}

func TestValidObjectsPass(t *testing.T) {
	f := loadFixtures(t, ns)
	hs := handlers(f.reader())
	ctx := context.Background()
	for _, tc := range []struct {
		name, handler string
		obj           any
		warnings      []string
	}{
		{"each profile", "validate-profile", &f.Profiles[0], nil},
		{"the cluster", "validate-cluster", f.Cluster, nil},
		{"the terse instance", "validate-instance", f.Terse, nil},
		{"the terse instance (mutating)", "mutate", f.Terse, nil},
		{"a profile with suspicious settings", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  tiled: {image: "ghcr.io/bluesky/tiled:latest"}
  storage: {retention: Delete}
  database: {managed: {image: postgres}}
  auth: {allowAnonymousAccess: true}`, []string{
			`spec.tiled.image: "ghcr.io/bluesky/tiled:latest" uses the tag latest`,
			"spec.storage.retention: Delete",
			`spec.database.managed.image: "postgres" has no tag`,
			"spec.auth.allowAnonymousAccess: true"}},
		{"a cluster whose instances inherit suspicious settings", "validate-cluster", admissiontable.ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {expose: {ingress: {tlsSecretName: ""}}, tiled: {image: "ghcr.io/bluesky/tiled"}}
  instances: [{name: a}, {name: b}]`, []string{
			`TiledCluster beamlines/bad: spec.template: spec.tiled.image: "ghcr.io/bluesky/tiled" has no tag`,
			`TiledCluster beamlines/bad: instances a, b: spec.tiled.image`}},
		{"a cluster whose selector matches no profile yet", "validate-cluster", admissiontable.ClusterHead + `  profileSelector: {matchLabels: {facility: diamond}}
  instances: [{name: i22}]`, []string{"will report ProfilesResolved=False", "matches no TiledProfile"}},
		{"an expanded instance without limits", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20"}
provenance: {spec.tiled.image: instance}`, []string{"spec.tiled.resources: no limits"}},
		{"an expanded instance with an ingress host but enabled unset", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}}
  expose: {ingress: {className: nginx, host: a.example.org}}
provenance: {spec.tiled.image: instance}`, []string{"spec.expose.ingress.enabled: not set, but the ingress has a host: no Ingress is created"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			resp := hs[tc.handler].Handle(ctx, request(t, admissionv1.Create, tc.obj, nil))
			g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
			for _, w := range tc.warnings {
				g.Expect(strings.Join(resp.Warnings, "\n")).To(ContainSubstring(w))
			}
			if tc.warnings == nil && tc.handler != "mutate" {
				g.Expect(resp.Warnings).To(BeEmpty())
			}
		})
	}
}

// admit runs the mutating handler and returns the object with its patch applied.
func admit(t *testing.T, h admission.Handler, op admissionv1.Operation, obj, old any) (*v1alpha1.TiledInstance, admission.Response) {
	t.Helper()
	g := NewWithT(t)
	req := request(t, op, obj, old)
	resp := h.Handle(context.Background(), req)
	g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
	g.Expect(resp.Complete(req)).To(Succeed())
	out := req.Object.Raw
	if len(resp.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(resp.Patch)
		g.Expect(err).NotTo(HaveOccurred())
		out, err = p.Apply(out)
		g.Expect(err).NotTo(HaveOccurred())
	}
	ti := &v1alpha1.TiledInstance{}
	g.Expect(json.Unmarshal(out, ti)).To(Succeed())
	return ti, resp
}

func TestMutateExpandsTerseInstance(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	h := handlers(f.reader())["mutate"]
	got, resp := admit(t, h, admissionv1.Create, f.Terse, nil)
	g.Expect(resp.Patches).NotTo(BeEmpty())
	want, err := expansion.ExpandInstance(f.Terse, f.Profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Spec).To(Equal(want.Spec))
	g.Expect(got.Provenance).To(Equal(want.Provenance))
	g.Expect(got.Provenance).To(HaveKeyWithValue("spec.storage.data.size", "instance"))
	g.Expect(got.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=BEAMLINE].value", "instance (expression)"))
	g.Expect(got.Provenance).To(HaveKeyWithValue("spec.monitoring.interval", "profile/monitoring@1"))
	g.Expect(got.Provenance).To(HaveKeyWithValue("spec.tiled.resources.limits.memory", "profile/big-data@1"))
	g.Expect(got.Spec.Expose.Ingress.Host).To(Equal("demo.tiled.nsls2.bnl.gov"))
	// Only spec and provenance are patched.
	for _, p := range resp.Patches {
		g.Expect(p.Path).To(Or(HavePrefix("/spec"), HavePrefix("/provenance")))
	}
}

func TestMutateAlreadyExpandedIsEmptyPatch(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	h := handlers(f.reader())["mutate"]
	expanded, _ := admit(t, h, admissionv1.Create, f.Terse, nil)

	// Created again (kubectl apply of the dry-run output), updated unchanged, and updated with a
	// label change: the patch is empty every time.
	_, resp := admit(t, h, admissionv1.Create, expanded, nil)
	g.Expect(resp.Patches).To(BeEmpty())
	g.Expect(resp.PatchType).To(BeNil())
	_, resp = admit(t, h, admissionv1.Update, expanded, expanded)
	g.Expect(resp.Patches).To(BeEmpty())
	relabelled := expanded.DeepCopy()
	relabelled.Labels = map[string]string{"team": "data"}
	_, resp = admit(t, h, admissionv1.Update, relabelled, expanded)
	g.Expect(resp.Patches).To(BeEmpty())

	// The engine's idempotence, which the above rests on: expanding the expansion gives its spec.
	again, err := expansion.ExpandInstance(expanded, f.Profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Spec).To(Equal(expanded.Spec))
}

func TestMutateReexpandsFollowingProfilesAndEdits(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	expanded, _ := admit(t, handlers(f.reader())["mutate"], admissionv1.Create, f.Terse, nil)

	// A profile changed since: the fields that came from it follow it.
	changed := f.Profiles[4].DeepCopy() // big-data
	changed.Generation = 2
	changed.Spec.Tiled.Resources.Limits["memory"] = resourceMust("32Gi")
	f.Profiles[4] = *changed
	h := handlers(f.reader())["mutate"]
	got, resp := admit(t, h, admissionv1.Update, expanded, expanded)
	g.Expect(resp.Patches).NotTo(BeEmpty())
	g.Expect(got.Spec.Tiled.Resources.Limits.Memory().String()).To(Equal("32Gi"))
	g.Expect(got.Provenance["spec.tiled.resources.limits.memory"]).To(HavePrefix("profile/big-data@"))
	g.Expect(got.Spec.Storage.Data.Size).To(Equal("5Gi"), "the instance's own field stays")

	// A field edited on update becomes the instance's own, and stays so.
	edited := got.DeepCopy()
	edited.Spec.Tiled.PriorityClassName = "beamtime"
	edited.Spec.Monitoring.Interval = "45s"
	got2, _ := admit(t, h, admissionv1.Update, edited, got)
	g.Expect(got2.Spec.Monitoring.Interval).To(Equal("45s"))
	g.Expect(got2.Provenance).To(HaveKeyWithValue("spec.monitoring.interval", "instance"))
	_, resp = admit(t, h, admissionv1.Update, got2, got2)
	g.Expect(resp.Patches).To(BeEmpty())

	// A field removed falls back to the layers below.
	dropped := got2.DeepCopy()
	dropped.Spec.Monitoring.Interval = ""
	got3, _ := admit(t, h, admissionv1.Update, dropped, got2)
	g.Expect(got3.Spec.Monitoring.Interval).To(Equal("15s"))
	g.Expect(got3.Provenance).To(HaveKeyWithValue("spec.monitoring.interval", "profile/monitoring@1"))
}

func TestMutatePassesThrough(t *testing.T) {
	f := loadFixtures(t, ns)
	h := handlers(f.reader())["mutate"]
	owned := f.Terse.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster",
		Name: "nsls2", UID: "u", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		name string
		edit func(*admission.Request)
		obj  any
	}{
		{"instance of a cluster", nil, owned},
		{"the operator's field manager", func(r *admission.Request) {
			r.Options = runtime.RawExtension{Raw: []byte(`{"kind":"PatchOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"tiled-operator"}`)}
		}, f.Terse},
		{"the operator's service account", func(r *admission.Request) {
			r.UserInfo.Username = "system:serviceaccount:tiled-system:tiled-operator"
		}, f.Terse},
		{"a delete", func(r *admission.Request) { r.Operation = admissionv1.Delete }, f.Terse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := request(t, admissionv1.Create, tc.obj, nil)
			if tc.edit != nil {
				tc.edit(&req)
			}
			resp := h.Handle(context.Background(), req)
			g.Expect(resp.Allowed).To(BeTrue())
			g.Expect(resp.Patches).To(BeEmpty())
		})
	}
}

func TestMalformedRequests(t *testing.T) {
	f := loadFixtures(t, ns)
	for name, h := range handlers(f.reader()) {
		kind := map[string]string{"mutate": "TiledInstance", "validate-instance": "TiledInstance",
			"validate-profile": "TiledProfile", "validate-cluster": "TiledCluster"}[name]
		for _, tc := range []struct {
			name string
			req  admission.Request
		}{
			{"no object", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind: metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: kind}}}},
			{"not JSON", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: kind},
				Object: runtime.RawExtension{Raw: []byte("{not json")}}}},
			{"another kind", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"Pod"}`)}}}},
			{"another version", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v9", Kind: kind},
				Object: runtime.RawExtension{Raw: []byte(`{}`)}}}},
			{"a list where the object should be", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: kind},
				Object: runtime.RawExtension{Raw: []byte(`[1,2]`)}}}},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				g := NewWithT(t)
				var resp admission.Response
				g.Expect(func() { resp = h.Handle(context.Background(), tc.req) }).NotTo(Panic())
				g.Expect(resp.Allowed).To(BeFalse())
				g.Expect(resp.Result.Code).To(BeNumerically(">=", 400))
				g.Expect(resp.Result.Code).To(BeNumerically("<", 500))
			})
		}
	}
}

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
	annotated := strings.Replace(rival, "  name: bad\n", "  name: bad\n  annotations: {tiled.blueskyproject.io/allow-conflicts: \"true\"}\n", 1)
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

// Applying the terse file again over the stored expansion (client-side or server-side apply) merges
// an expression with the value it computed: the expression computes it again, and nothing changes.
func TestMutateExpressionAppliedAgainOverItsValue(t *testing.T) {
	g := NewWithT(t)
	f := loadFixtures(t, ns)
	h := handlers(f.reader())["mutate"]
	expanded, _ := admit(t, h, admissionv1.Create, f.Terse, nil)
	merged := expanded.DeepCopy()
	for i := range merged.Spec.Tiled.Env {
		if merged.Spec.Tiled.Env[i].Name == "BEAMLINE" {
			merged.Spec.Tiled.Env[i].ValueExpression = ptr.To("instance.name.upperAscii()")
		}
	}
	got, _ := admit(t, h, admissionv1.Update, merged, expanded)
	g.Expect(got.Spec).To(Equal(expanded.Spec))
	g.Expect(got.Provenance).To(Equal(expanded.Provenance))
}

// TestInstanceHandlersDecodeWithTheSchema: both instance handlers decode with the shared decoder
// (decodeRaw): a field the CRD does not declare is refused naming the object and the field, and an
// update whose old object is not JSON is a bad request for the mutating handler.
func TestInstanceHandlersDecodeWithTheSchema(t *testing.T) {
	f := loadFixtures(t, ns)
	for _, name := range []string{"mutate", "validate-instance"} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			h := handlers(f.reader())[name]
			req := request(t, admissionv1.Create, f.Terse, nil)
			req.Object.Raw = []byte(strings.Replace(string(req.Object.Raw), `"spec":{`, `"spec":{"imageTypo":"x",`, 1))
			g.Expect(string(req.Object.Raw)).To(ContainSubstring("imageTypo"))
			resp := h.Handle(context.Background(), req)
			g.Expect(resp.Allowed).To(BeFalse())
			g.Expect(resp.Result.Message).To(ContainSubstring("spec.imageTypo"))
			g.Expect(resp.Result.Message).To(ContainSubstring(f.Terse.Name))
		})
	}
	g := NewWithT(t)
	req := request(t, admissionv1.Update, f.Terse, f.Terse)
	req.OldObject.Raw = []byte("{not json")
	resp := handlers(f.reader())["mutate"].Handle(context.Background(), req)
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Code).To(BeNumerically("==", 400))
	g.Expect(resp.Result.Message).To(ContainSubstring("cannot decode the old TiledInstance"))
}
