package expansion

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

// A value that does not parse as a quantity is refused by the typed decoding with an error that
// names no field; Decode names the object, the layer, the field and the value, as for any other
// value the schema refuses.
func TestDecodeBadQuantity(t *testing.T) {
	const head = "apiVersion: tiled.blueskyproject.io/v1alpha1\n"
	cases := []struct {
		name, doc    string
		want         InvalidFieldError
		reasonPrefix string
	}{
		{
			name:         "instance",
			doc:          head + "kind: TiledInstance\nmetadata: {name: demo}\nspec: {tiled: {resources: {requests: {memory: 12 Gi}}}}\n",
			want:         InvalidFieldError{Object: "TiledInstance/demo", Layer: "instance", Field: "spec.tiled.resources.requests.memory"},
			reasonPrefix: `Invalid value: "12 Gi": quantities must match the regular expression`,
		},
		{
			name: "override",
			doc: head + `kind: TiledCluster
metadata: {name: nsls2}
spec:
  profileSelector: {}
  instances:
  - {name: bmm}
  - {name: chx, overrides: {database: {managed: {resources: {limits: {cpu: two}}}}}}
`,
			want:         InvalidFieldError{Object: "TiledCluster/nsls2", Layer: "instance/chx/overrides", Field: "spec.database.managed.resources.limits.cpu"},
			reasonPrefix: `Invalid value: "two": quantities must match`,
		},
		{
			name:         "the cluster's template",
			doc:          head + "kind: TiledCluster\nmetadata: {name: nsls2}\nspec: {profileSelector: {}, template: {tiled: {resources: {limits: {memory: 1.5.0Gi}}}}}\n",
			want:         InvalidFieldError{Object: "TiledCluster/nsls2", Layer: "cluster/template", Field: "spec.tiled.resources.limits.memory"},
			reasonPrefix: `Invalid value: "1.5.0Gi": `,
		},
		{
			name: "profile, a divisor in an env entry",
			doc: head + `kind: TiledProfile
metadata: {name: p, generation: 2}
spec:
  tiled:
    env:
    - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1 Mi}}}
`,
			want:         InvalidFieldError{Object: "TiledProfile/p", Layer: "profile/p@2", Field: "spec.tiled.env[name=MEM].valueFrom.resourceFieldRef.divisor"},
			reasonPrefix: `Invalid value: "1 Mi": `,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, err := Decode([]byte(tc.doc))
			g.Expect(obj).To(BeNil())
			var ie *InvalidFieldError
			g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
			g.Expect(ie.Reason).To(HavePrefix(tc.reasonPrefix))
			got := *ie
			got.Reason = ""
			g.Expect(got).To(Equal(tc.want))
		})
	}

	// Quantities that parse, given as strings or numbers, decode.
	g := NewWithT(t)
	_, err := Decode([]byte(head + "kind: TiledInstance\nmetadata: {name: demo}\nspec: {tiled: {resources: {requests: {memory: 12Gi, cpu: 0.5}, limits: {cpu: 2}}}}\n"))
	g.Expect(err).NotTo(HaveOccurred())
}
