package expansion

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Same input, byte-identical output, whatever the order of profiles or instances.
func TestDeterminism(t *testing.T) {
	g := NewWithT(t)
	cluster, profs := loadFleet(t)
	want := mustMarshal(t, mustExpand(t, cluster, profs))
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		p := slices.Clone(profs)
		r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		c := cluster.DeepCopy()
		r.Shuffle(len(c.Spec.Instances), func(i, j int) {
			c.Spec.Instances[i], c.Spec.Instances[j] = c.Spec.Instances[j], c.Spec.Instances[i]
		})
		got := mustMarshal(t, mustExpand(t, c, p))
		g.Expect(bytes.Equal(got, want)).To(BeTrue(), "expansion %d differs", i)
	}
}

// Expanding an expanded instance again, as a standalone instance with the same profiles, changes
// nothing in its spec.
func TestIdempotence(t *testing.T) {
	g := NewWithT(t)
	cluster, profs := loadFleet(t)
	res := mustExpand(t, cluster, profs)
	for _, in := range res.Instances {
		standalone := in.Object.DeepCopy()
		// A selector picking the same profiles the cluster gave the instance.
		standalone.Spec.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "nsls2"}}
		if !slices.Contains(in.Profiles, "nsls2-mx") {
			standalone.Spec.ProfileSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "family", Operator: metav1.LabelSelectorOpDoesNotExist}}
		}
		again, err := ExpandInstance(standalone, profs, DefaultBuiltins())
		g.Expect(err).NotTo(HaveOccurred())
		again.Spec.ProfileSelector = nil
		g.Expect(again.Spec).To(Equal(in.Object.Spec), in.Name)
		for k, v := range again.Provenance {
			if !strings.HasPrefix(k, "spec.profileSelector") {
				g.Expect(v).To(Equal(SourceInstance), k)
			}
		}

		// And the standalone expansion is itself a fixed point (with the same profiles: without
		// them, the NFS exports it names would be its own choice, which no profile allows).
		again.Spec.ProfileSelector = standalone.Spec.ProfileSelector
		twice, err := ExpandInstance(again, profs, DefaultBuiltins())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(twice.Spec).To(Equal(again.Spec))
		again.Spec.ProfileSelector = nil
		_, err = ExpandInstance(again, profs, DefaultBuiltins())
		var notAllowed *NotAllowedError
		g.Expect(errors.As(err, &notAllowed)).To(BeTrue(), "without profiles: %v", err)
		g.Expect(notAllowed.Field).To(HavePrefix("spec.storage.readOnlyMounts[name=proposals].nfs"))
	}
}
