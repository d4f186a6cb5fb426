package webhooks_test

import (
	"context"
	"encoding/json"
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
)

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
