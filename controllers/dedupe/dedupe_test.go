package dedupe

import (
	"reflect"
	"testing"

	. "github.com/onsi/gomega"
)

type leaf struct {
	Name  string
	Count *int32
	Tags  map[string]string
}

type node struct {
	Leaf   *leaf
	Leaves []leaf
	ByName map[string]*leaf
	Bytes  []byte
	Any    any // what the table cannot tell the content of
	Own    string
}

func value(own string) *node {
	n := int32(3)
	return &node{
		Leaf:   &leaf{Name: "a", Count: &n, Tags: map[string]string{"k": "v"}},
		Leaves: []leaf{{Name: "b", Tags: map[string]string{}}},
		ByName: map[string]*leaf{"c": {Name: "c"}},
		Bytes:  []byte("raw"),
		Own:    own,
	}
}

func same(a, b any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestShare: two values share every equal pointer, map and slice (deepest first: a map's values,
// a slice's elements' parts), keep what differs, and read as before; a part holding what the table
// cannot compare (an interface) stays its own, its comparable parts still shared.
func TestShare(t *testing.T) {
	g := NewWithT(t)
	tb := New()
	a, b := value("a"), value("b")
	tb.Share(a)
	tb.Share(b)
	g.Expect(a).To(Equal(value("a")))
	g.Expect(b).To(Equal(value("b")))
	g.Expect(same(a.Leaf, b.Leaf)).To(BeTrue())
	g.Expect(same(a.Leaf.Count, b.Leaf.Count)).To(BeTrue())
	g.Expect(same(a.Leaves, b.Leaves)).To(BeTrue())
	g.Expect(same(a.ByName, b.ByName)).To(BeTrue())
	g.Expect(same(a.Bytes, b.Bytes)).To(BeTrue())

	c, d := value("c"), value("d")
	c.Any, d.Any = 1, 1
	c.Leaf.Tags["k"] = "other"
	tb.Share(c)
	tb.Share(d)
	g.Expect(same(c.Leaf, a.Leaf)).To(BeFalse(), "differs")
	g.Expect(same(c.Leaf.Count, a.Leaf.Count)).To(BeTrue(), "its equal part still shared")
	g.Expect(same(d.Leaf, a.Leaf)).To(BeTrue())
	g.Expect(c.Leaf.Tags).To(Equal(map[string]string{"k": "other"}))

	// A map whose values hold parts: the values are shared within it.
	m1 := &struct{ M map[string]*leaf }{M: map[string]*leaf{"c": {Name: "c"}}}
	tb.Share(m1)
	g.Expect(same(m1.M, a.ByName)).To(BeTrue(), "an equal map is the same map")
}

// TestTableStartsOver: a full table starts over instead of growing; values shared before keep
// their parts.
func TestTableStartsOver(t *testing.T) {
	g := NewWithT(t)
	tb := New()
	a := value("a")
	tb.Share(a)
	for i := range MaxParts {
		n := int32(i)
		tb.Share(&struct{ P *int32 }{P: &n})
	}
	g.Expect(len(tb.parts)).To(BeNumerically("<=", MaxParts))
	g.Expect(a).To(Equal(value("a")))
}
