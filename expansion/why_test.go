package expansion

import (
	"testing"

	. "github.com/onsi/gomega"
)

// Why lists the value and source of each leaf under a field ("spec." may be left out), and refuses a
// field the instance does not set or a prefix that is not a whole field name.
func TestWhy(t *testing.T) {
	g := NewWithT(t)
	o := one(t, C("", I("x", nil)), P(t, "p", 0, "tiled: {env: [{name: A, value: a}]}"))
	got, err := Why(o, ".spec.tiled.env")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]FieldSource{
		{Path: "spec.tiled.env[name=A].name", Value: `"A"`, Source: "profile/p@1"},
		{Path: "spec.tiled.env[name=A].value", Value: `"a"`, Source: "profile/p@1"},
	}))
	short, err := Why(o, "tiled.env")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(short).To(Equal(got), "spec. may be left out")
	_, err = Why(o, "spec.tiled.nothing")
	g.Expect(err).To(MatchError(ContainSubstring("does not set spec.tiled.nothing")))
	// A prefix that is not a whole field name does not match.
	_, err = Why(o, "spec.tiled.im")
	g.Expect(err).To(HaveOccurred())
}
