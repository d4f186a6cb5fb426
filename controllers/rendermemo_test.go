package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/render"
)

// TestRenderIsRemembered: a second reconcile with the inputs of the first takes the prepared
// objects from the memo and renders nothing unless an object must be sent, and then renders the
// same objects; any change of the inputs (the spec, the Secret's data, the owner) renders again.
func TestRenderIsRemembered(t *testing.T) {
	g := NewWithT(t)
	_, expanded := fleetInstances(t)
	ti := expanded[0]
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	in := render.Inputs{SecretData: map[string][]byte{"api-key": []byte("k1")}}
	r := &TiledInstanceReconciler{}

	first, err := r.intents(key, ti, ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.objects).NotTo(BeEmpty(), "the first reconcile renders")
	g.Expect(first.prepared).To(HaveLen(len(first.objects)))

	again, err := r.intents(key, ti, ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.objects).To(BeNil(), "the same inputs render nothing")
	g.Expect(again.prepared).To(Equal(first.prepared))
	for i := range again.prepared {
		ac, err := again.object(i)
		g.Expect(err).NotTo(HaveOccurred())
		p, err := applier.Prepare(ac)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p).To(Equal(first.prepared[i]), "an object rendered on demand is the one prepared")
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
		r := &TiledInstanceReconciler{}
		_, err := r.intents(key, ti, ti, in)
		g.Expect(err).NotTo(HaveOccurred())
		got, err := r.intents(key, tc.ti, tc.ti, tc.in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.objects).NotTo(BeNil(), "a change of %s renders again", name)
	}
}
