package expansion

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// TestCheckIsExpandsError: Check gives the error Expand gives (none, a conflict); ExpandEach with
// Names keeps of each instance only what the collision check reads — its name, namespace, labels and
// read-only mounts, so that the names of its objects are the same — not its spec or provenance.
func TestCheckIsExpandsError(t *testing.T) {
	g := NewWithT(t)
	cluster, profiles := loadFleet(t)
	g.Expect(Check(cluster, profiles, DefaultBuiltins())).To(Succeed())

	conflicting := []v1alpha1.TiledProfile{P(t, "b", 0, "tiled: {image: 'x:2'}"), P(t, "a", 0, "tiled: {image: 'x:1'}")}
	_, want := Expand(C("", I("x", nil)), conflicting, DefaultBuiltins())
	g.Expect(want).To(HaveOccurred())
	g.Expect(Check(C("", I("x", nil)), conflicting, DefaultBuiltins())).To(MatchError(want.Error()))

	mounts := []v1alpha1.TiledProfile{P(t, "m", 0, "storage: {readOnlyMounts: [{name: det, mountPath: /det, nfs: {server: nfs.example.org, path: /det}}]}")}
	full, err := Expand(C("", I("x", nil), I("y", nil)), mounts, DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	slim, err := ExpandEach(C("", I("x", nil), I("y", nil)), mounts, DefaultBuiltins(), Names)
	g.Expect(err).NotTo(HaveOccurred())
	for i := range full.Instances {
		kept := slim.Instances[i].Object
		g.Expect(ObjectNames(kept)).To(Equal(ObjectNames(full.Instances[i].Object)))
		g.Expect(len(ObjectNames(kept))).To(BeNumerically(">", len(ObjectNames(&v1alpha1.TiledInstance{}))), "the mount's claim and volume are named")
		g.Expect(kept.Spec.Tiled).To(BeNil(), "no spec kept")
		g.Expect(kept.Provenance).To(BeNil(), "no provenance kept")
		g.Expect(kept.Labels).To(Equal(full.Instances[i].Object.Labels))
	}
}
