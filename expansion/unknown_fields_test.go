package expansion

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

// An override of a field that does not exist cannot be written in Go, so it is caught where
// objects are read: Decode checks them against the CRD's schema.
func TestDecodeUnknownFields(t *testing.T) {
	cases := []struct {
		name, doc            string
		object, layer, field string
	}{
		{
			name: "override",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: nsls2}
spec:
  profileSelector: {}
  instances:
  - {name: chx, overrides: {storage: {data: {sise: 2Ti}}}}`,
			object: "TiledCluster/nsls2", layer: "instance/chx/overrides", field: "spec.storage.data.sise",
		},
		{
			name: "keyed list item of the template",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: nsls2}
spec:
  profileSelector: {}
  template: {tiled: {env: [{name: A, vaule: x}]}}`,
			object: "TiledCluster/nsls2", layer: "cluster/template", field: "spec.tiled.env[name=A].vaule",
		},
		{
			name: "profile",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata: {name: p, generation: 4}
spec: {databse: {}}`,
			object: "TiledProfile/p", layer: "profile/p@4", field: "spec.databse",
		},
		{
			name: "outside the layers",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: nsls2}
spec: {profileSelecter: {}}`,
			object: "TiledCluster/nsls2", field: "spec.profileSelecter",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, err := Decode([]byte(tc.doc))
			g.Expect(obj).To(BeNil())
			var ue *UnknownFieldError
			g.Expect(errors.As(err, &ue)).To(BeTrue(), "%v", err)
			g.Expect(*ue).To(Equal(UnknownFieldError{Object: tc.object, Layer: tc.layer, Field: tc.field}))
			g.Expect(err.Error()).To(ContainSubstring(tc.field))
		})
	}

	t.Run("wrong kind", func(t *testing.T) {
		g := NewWithT(t)
		_, err := Decode([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
		g.Expect(err).To(MatchError(ContainSubstring("not a tiled.blueskyproject.io/v1alpha1 object")))
	})
}
