package expansion

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Two profiles of equal priority setting one field differently conflict; equal values, or
// different priorities, do not.
func TestConflicts(t *testing.T) {
	cases := []struct {
		name      string
		a, b      string
		prioB     int32
		field     string
		conflicts bool
	}{
		{name: "scalar", a: "tiled: {image: 'x:1'}", b: "tiled: {image: 'x:2'}", field: "spec.tiled.image", conflicts: true},
		{name: "equal values", a: "tiled: {image: 'x:1'}", b: "tiled: {image: 'x:1'}"},
		{name: "different priorities", a: "tiled: {image: 'x:1'}", b: "tiled: {image: 'x:2'}", prioB: 1},
		{name: "keyed list item", a: "tiled: {env: [{name: A, value: '1'}]}", b: "tiled: {env: [{name: A, value: '2'}]}", field: "spec.tiled.env[name=A].value", conflicts: true},
		{name: "keyed list, other keys", a: "tiled: {env: [{name: A, value: '1'}]}", b: "tiled: {env: [{name: B, value: '2'}]}"},
		{name: "mount, disjoint fields", a: "storage: {readOnlyMounts: [{name: m, mountPath: /m}]}", b: "storage: {readOnlyMounts: [{name: m, existingClaimName: c}]}"},
		{name: "atomic list", a: "storage: {data: {accessModes: [ReadWriteOnce]}}", b: "storage: {data: {accessModes: [ReadWriteMany]}}", field: "spec.storage.data.accessModes", conflicts: true},
		{name: "map keys merge", a: "tiled: {podLabels: {a: '1'}}", b: "tiled: {podLabels: {b: '1'}}"},
		{name: "exclusive group", a: "database: {managed: {size: 1Gi}}", b: "database: {external: {uriSecretRef: {name: s}}}", field: "spec.database", conflicts: true},
		{name: "expressions with different values", a: "expose: {ingress: {hostExpression: \"instance.name + '.a.org'\"}}", b: "expose: {ingress: {host: x.b.org}}", field: "spec.expose.ingress.host", conflicts: true},
		{name: "expressions with equal values", a: "expose: {ingress: {hostExpression: \"instance.name + '.a.org'\"}}", b: "expose: {ingress: {host: x.a.org}}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res, err := Expand(C("", I("x", nil)), []v1alpha1.TiledProfile{P(t, "b", tc.prioB, tc.b), P(t, "a", 0, tc.a)}, DefaultBuiltins())
			if !tc.conflicts {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(res).To(BeNil())
			var ce *ConflictError
			g.Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
			g.Expect(ce.Profiles).To(Equal([2]string{"profile/a@1", "profile/b@1"}))
			g.Expect(ce.Field).To(Equal(tc.field))
			g.Expect(ce.Instance).To(Equal("x"))
			g.Expect(err.Error()).To(And(ContainSubstring("profile/a@1"), ContainSubstring("profile/b@1"), ContainSubstring(tc.field)))
		})
	}
}
