package desired

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/render"
)

// TestRenderIsRemembered: a second reconcile with the inputs of the first takes the prepared
// objects from the cache and renders nothing unless an object must be sent, and then renders the
// same objects; any change of the inputs (the spec, the Secret's data, the owner) renders again.
func TestRenderIsRemembered(t *testing.T) {
	g := NewWithT(t)
	_, expanded := fleetInstances(t)
	ti := expanded[0]
	in := render.Inputs{SecretData: map[string][]byte{"api-key": []byte("k1")}}
	r := &Renders{}

	first, err := r.Render(ti, ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.objects).NotTo(BeEmpty(), "the first reconcile renders")
	g.Expect(first.prepared).To(HaveLen(len(first.objects)))
	g.Expect(first.Len()).To(Equal(len(first.objects)))

	again, err := r.Render(ti, ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.objects).To(BeNil(), "the same inputs render nothing")
	g.Expect(again.prepared).To(Equal(first.prepared))
	for i := range again.Len() {
		u, err := again.Object(i)
		g.Expect(err).NotTo(HaveOccurred())
		p, err := applier.PrepareUnstructured(u)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p).To(Equal(first.Prepared(i)), "an object rendered on demand is the one prepared")
	}

	changed := ti.DeepCopy()
	changed.Spec.Tiled.Replicas = ptr.To(int32(3))
	otherOwner := ti.DeepCopy()
	otherOwner.UID = types.UID("another-uid")
	for name, tc := range map[string]struct {
		ti *tiledv1alpha1.TiledInstance
		in render.Inputs
	}{
		"the spec":          {changed, in},
		"the Secret's data": {ti, render.Inputs{SecretData: map[string][]byte{"api-key": []byte("k2")}}},
		"ServiceMonitors":   {ti, render.Inputs{SecretData: in.SecretData, ServiceMonitorAvailable: true}},
		"the owner":         {otherOwner, in},
	} {
		r := &Renders{}
		_, err := r.Render(ti, ti, in)
		g.Expect(err).NotTo(HaveOccurred())
		got, err := r.Render(tc.ti, tc.ti, tc.in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.objects).NotTo(BeNil(), "a change of %s renders again", name)
	}
}

// TestRenderIsForgotten: Forget drops the instance's render, so that the next render of the same
// inputs renders again; the other instances' stay.
func TestRenderIsForgotten(t *testing.T) {
	g := NewWithT(t)
	_, expanded := fleetInstances(t)
	r := &Renders{}
	for _, ti := range expanded[:2] {
		_, err := r.Render(ti, ti, render.Inputs{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(r.Len()).To(Equal(2))
	r.Forget(types.NamespacedName{Namespace: expanded[0].Namespace, Name: expanded[0].Name})
	g.Expect(r.Len()).To(Equal(1))
	got, err := r.Render(expanded[0], expanded[0], render.Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.objects).NotTo(BeNil(), "forgotten: rendered again")
}

// TestRenderErrorIsTyped: render's refusal is a *RenderError (the instance stalls on it), and
// nothing is remembered of it.
func TestRenderErrorIsTyped(t *testing.T) {
	g := NewWithT(t)
	_, expanded := fleetInstances(t)
	ti := expanded[0].DeepCopy()
	g.Expect(ti.Spec.Database).NotTo(BeNil())
	g.Expect(ti.Spec.Database.Managed).NotTo(BeNil())
	ti.Spec.Database.Managed.Image = "" // not expanded: render refuses it
	r := &Renders{}
	_, err := r.Render(ti, ti, render.Inputs{})
	var renderErr *RenderError
	g.Expect(errors.As(err, &renderErr)).To(BeTrue(), "%v", err)
	g.Expect(r.Len()).To(BeZero())
}
