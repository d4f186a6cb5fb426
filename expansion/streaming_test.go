package expansion

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The built-in defaults give every instance a managed streaming cache; a profile naming an external
// cache replaces it (managed and external are exclusive), and a beamline may turn streaming off
// alone. Provenance says where each came from.
func TestStreamingLayers(t *testing.T) {
	g := NewWithT(t)
	o := one(t, C("", I("x", nil)), P(t, "base", 0, "tiled: {replicas: 1}"))
	s := o.Spec.Streaming
	g.Expect(s).NotTo(BeNil())
	g.Expect(*s.Enabled).To(BeTrue())
	g.Expect(s.Managed.Image).To(Equal(CacheImage))
	g.Expect(s.External).To(BeNil())
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.streaming.managed.image", "default"))
	g.Expect(*o.Spec.Tiled.Autoscaling.Enabled).To(BeFalse())

	res, err := Expand(C("", I("x", nil), I("y", T(t, "streaming: {enabled: false}"))),
		[]v1alpha1.TiledProfile{P(t, "facility", 0, "streaming: {external: {uriSecretRef: {name: facility-redis}}, dataTTLSeconds: 600}")}, DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Instances).To(HaveLen(2))
	o, y := res.Instances[0].Object, res.Instances[1].Object
	g.Expect(*y.Spec.Streaming.Enabled).To(BeFalse())
	g.Expect(y.Provenance).To(HaveKeyWithValue("spec.streaming.enabled", "instance/y/overrides"))
	s = o.Spec.Streaming
	g.Expect(*s.Enabled).To(BeTrue())
	g.Expect(s.Managed).To(BeNil(), "the profile's external cache drops the built-in managed one")
	g.Expect(s.External.URISecretRef.Name).To(Equal("facility-redis"))
	g.Expect(*s.DataTTLSeconds).To(Equal(int32(600)))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.streaming.external.uriSecretRef.name", "profile/facility@1"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.streaming.sequenceTTLSeconds", "default"))
}
