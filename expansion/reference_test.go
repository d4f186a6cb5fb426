package expansion

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// referenceExpandOne is the plain definition of an expansion that expandOne computes faster:
// every layer evaluated for the instance and merged in order, then the losers of exclusive groups
// dropped. Tests and the fuzz target check that the two agree.
func (e *engine) referenceExpandOne(instance string, stack []*layer, _ int, ctx *exprContext) (*v1alpha1.TiledInstanceSpec, map[string]string, error) {
	if err := e.checkConflicts(instance, stack, ctx); err != nil {
		return nil, nil, err
	}
	mats := make([]*material, len(stack))
	for i, l := range stack {
		m, err := e.instantiate(l, ctx)
		if err != nil {
			return nil, nil, err
		}
		mats[i] = m
	}
	acc := mats[0].tv
	for _, m := range mats[1:] {
		merged, err := acc.Merge(m.tv)
		if err != nil {
			return nil, nil, schemaError(m.source, err)
		}
		acc = merged
	}
	if drop := exclusiveLosers(mats); drop != nil {
		acc = acc.RemoveItems(drop)
	}
	return e.finish(acc, mats)
}

// referenceExpand is Expand with referenceExpandOne.
func referenceExpand(c *v1alpha1.TiledCluster, p []v1alpha1.TiledProfile) (*Result, error) {
	return expand(c, p, DefaultBuiltins(), (*engine).referenceExpandOne, keepAll)
}

// sameExpansion checks that two expansions hold the same instances, leaves, values and
// provenance. The order of keyed list items may differ: it is not part of the contract.
func sameExpansion(g Gomega, t testing.TB, fast, ref *Result) {
	g.Expect(fast.Instances).To(HaveLen(len(ref.Instances)))
	for i := range fast.Instances {
		a, b := fast.Instances[i].Object, ref.Instances[i].Object
		g.Expect(a.ObjectMeta).To(Equal(b.ObjectMeta))
		g.Expect(leaves(t, a)).To(Equal(leaves(t, b)), a.Name)
		g.Expect(a.Provenance).To(Equal(b.Provenance), a.Name)
	}
}

// The fast expansion agrees with the plain definition on the sample and the benchmark fleet.
func TestFastMatchesReference(t *testing.T) {
	g := NewWithT(t)
	cluster, profs := loadFleet(t)
	ref, err := referenceExpand(cluster, profs)
	g.Expect(err).NotTo(HaveOccurred())
	fast := mustExpand(t, cluster, profs)
	sameExpansion(g, t, fast, ref)
	// Here even the bytes agree.
	g.Expect(string(mustMarshal(t, fast))).To(Equal(string(mustMarshal(t, ref))))

	big, bigProfs := benchFleetT(t, 40)
	ref, err = referenceExpand(big, bigProfs)
	g.Expect(err).NotTo(HaveOccurred())
	sameExpansion(g, t, mustExpand(t, big, bigProfs), ref)
}
