package expansion

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Expressions see instance (name, labels), cluster (name, labels) and namespace.
func TestExpressionVariables(t *testing.T) {
	g := NewWithT(t)
	c := C("", v1alpha1.ClusterInstance{Name: "chx", Labels: map[string]string{"sector": "11"}})
	o := one(t, c, P(t, "p", 0, `tiled:
  env:
  - {name: ALL, valueExpression: "instance.namespace + '/' + cluster.namespace + '/' + cluster.name + '/' + cluster.labels['site'] + '/' + instance.name + '/' + instance.labels['sector'] + '/' + instance.labels['tiled.blueskyproject.io/cluster']"}
  - {name: UPPER, valueExpression: "instance.name.upperAscii()"}`))
	g.Expect(*o.Spec.Tiled.Env[0].Value).To(Equal("beamlines/beamlines/c/lab/chx/11/c"))
	g.Expect(*o.Spec.Tiled.Env[1].Value).To(Equal("CHX"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=ALL].value", "profile/p@1 (expression)"))
	g.Expect(o.Labels).To(HaveKeyWithValue("sector", "11"))
}
