package profiles

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func prof(name, ns string, priority int32, labels map[string]string) v1alpha1.TiledProfile {
	p := v1alpha1.TiledProfile{}
	p.Name, p.Namespace, p.Labels, p.Spec.Priority = name, ns, labels, priority
	return p
}

func names(ps []*v1alpha1.TiledProfile) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func sel(matchLabels map[string]string, exprs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: matchLabels, MatchExpressions: exprs}
}

var candidates = []v1alpha1.TiledProfile{
	prof("zeta", "nsls2", 0, map[string]string{"facility": "nsls2"}),
	prof("mx", "nsls2", 10, map[string]string{"facility": "nsls2", "family": "mx"}),
	prof("alpha", "nsls2", 0, map[string]string{"facility": "nsls2", "tier": "gold"}),
	prof("monitoring", "nsls2", -5, map[string]string{"facility": "nsls2"}),
	prof("other-ns", "diamond", 0, map[string]string{"facility": "nsls2"}),
	prof("unlabelled", "nsls2", 0, nil),
}

func TestSelect(t *testing.T) {
	cases := []struct {
		name     string
		selector *metav1.LabelSelector
		want     []string
		err      any
	}{
		{name: "matchLabels, ordered by priority then name", selector: sel(map[string]string{"facility": "nsls2"}),
			want: []string{"monitoring", "alpha", "zeta", "mx"}},
		{name: "empty selects all of the namespace", selector: &metav1.LabelSelector{},
			want: []string{"monitoring", "alpha", "unlabelled", "zeta", "mx"}},
		{name: "DoesNotExist", selector: sel(map[string]string{"facility": "nsls2"}, metav1.LabelSelectorRequirement{Key: "family", Operator: metav1.LabelSelectorOpDoesNotExist}),
			want: []string{"monitoring", "alpha", "zeta"}},
		{name: "In", selector: sel(nil, metav1.LabelSelectorRequirement{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"gold", "silver"}}),
			want: []string{"alpha"}},
		{name: "NotIn", selector: sel(map[string]string{"facility": "nsls2"}, metav1.LabelSelectorRequirement{Key: "family", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"mx"}}),
			want: []string{"monitoring", "alpha", "zeta"}},
		{name: "Exists", selector: sel(nil, metav1.LabelSelectorRequirement{Key: "family", Operator: metav1.LabelSelectorOpExists}),
			want: []string{"mx"}},
		{name: "nil", selector: nil, err: &SelectorError{}},
		{name: "bad operator", selector: sel(nil, metav1.LabelSelectorRequirement{Key: "a", Operator: "Near"}), err: &SelectorError{}},
		{name: "bad label value", selector: sel(map[string]string{"facility": "not valid!"}), err: &SelectorError{}},
		{name: "matches nothing", selector: sel(map[string]string{"facility": "esrf"}), err: &NoProfilesError{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Select(tc.selector, "nsls2", candidates, "cluster/c", "spec.profileSelector")
			switch tc.err.(type) {
			case nil:
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(names(got)).To(Equal(tc.want))
			case *SelectorError:
				var se *SelectorError
				g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
				g.Expect(se.Object).To(Equal("cluster/c"))
				g.Expect(se.Field).To(Equal("spec.profileSelector"))
				g.Expect(got).To(BeNil())
			case *NoProfilesError:
				var ne *NoProfilesError
				g.Expect(errors.As(err, &ne)).To(BeTrue(), "%v", err)
				g.Expect(ne.Selector).To(Equal("facility=esrf"))
				g.Expect(ne.Namespace).To(Equal("nsls2"))
				g.Expect(err.Error()).To(ContainSubstring(`selector "facility=esrf" matches no TiledProfile in namespace "nsls2"`))
			}
		})
	}
}

func cluster(selector *metav1.LabelSelector, instances ...v1alpha1.ClusterInstance) *v1alpha1.TiledCluster {
	c := &v1alpha1.TiledCluster{}
	c.Name, c.Namespace = "nsls2", "nsls2"
	c.Spec.ProfileSelector = selector
	c.Spec.Instances = instances
	return c
}

func TestForCluster(t *testing.T) {
	g := NewWithT(t)
	c := cluster(sel(map[string]string{"facility": "nsls2"}, metav1.LabelSelectorRequirement{Key: "family", Operator: metav1.LabelSelectorOpDoesNotExist}),
		v1alpha1.ClusterInstance{Name: "amx", ProfileSelector: sel(map[string]string{"family": "mx"})},
		v1alpha1.ClusterInstance{Name: "chx"},
		// Selecting profiles the cluster already selects adds nothing twice.
		v1alpha1.ClusterInstance{Name: "csx", ProfileSelector: sel(map[string]string{"tier": "gold"})},
	)
	s, err := ForCluster(c, candidates)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(s.Cluster)).To(Equal([]string{"monitoring", "alpha", "zeta"}))
	g.Expect(names(s.Instances["amx"])).To(Equal([]string{"monitoring", "alpha", "zeta", "mx"}))
	g.Expect(names(s.Instances["chx"])).To(Equal([]string{"monitoring", "alpha", "zeta"}))
	g.Expect(names(s.Instances["csx"])).To(Equal([]string{"monitoring", "alpha", "zeta"}))
	g.Expect(names(s.All)).To(Equal([]string{"monitoring", "alpha", "zeta", "mx"}))

	// The order of the candidates does not matter.
	reversed := make([]v1alpha1.TiledProfile, len(candidates))
	for i := range candidates {
		reversed[len(candidates)-1-i] = candidates[i]
	}
	s2, err := ForCluster(c, reversed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(s2.All)).To(Equal(names(s.All)))

	// An instance selector that matches nothing names the instance.
	c.Spec.Instances[1].ProfileSelector = sel(map[string]string{"family": "saxs"})
	_, err = ForCluster(c, candidates)
	var ne *NoProfilesError
	g.Expect(errors.As(err, &ne)).To(BeTrue())
	g.Expect(ne.Field).To(Equal("spec.instances[name=chx].profileSelector"))

	// A cluster without a selector is refused.
	_, err = ForCluster(cluster(nil), candidates)
	var se *SelectorError
	g.Expect(errors.As(err, &se)).To(BeTrue())
	g.Expect(se.Error()).To(Equal("cluster/nsls2: spec.profileSelector: a selector is required; {} selects every profile in the namespace"))
}

func TestForInstance(t *testing.T) {
	g := NewWithT(t)
	in := &v1alpha1.TiledInstance{}
	in.Name, in.Namespace = "demo", "nsls2"
	got, err := ForInstance(in, candidates)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
	in.Spec.ProfileSelector = sel(map[string]string{"family": "mx"})
	got, err = ForInstance(in, candidates)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(got)).To(Equal([]string{"mx"}))
	in.Spec.ProfileSelector = sel(map[string]string{"family": "none"})
	_, err = ForInstance(in, candidates)
	var ne *NoProfilesError
	g.Expect(errors.As(err, &ne)).To(BeTrue())
	g.Expect(ne.Object).To(Equal("instance/demo"))
}

func TestAffected(t *testing.T) {
	mkCluster := func(name, ns string, selector *metav1.LabelSelector, instanceSel *metav1.LabelSelector) v1alpha1.TiledCluster {
		c := v1alpha1.TiledCluster{}
		c.Name, c.Namespace, c.Spec.ProfileSelector = name, ns, selector
		c.Spec.Instances = []v1alpha1.ClusterInstance{{Name: "a"}, {Name: "b", ProfileSelector: instanceSel}}
		return c
	}
	clusters := []v1alpha1.TiledCluster{
		mkCluster("nsls2", "nsls2", sel(map[string]string{"facility": "nsls2"}), nil),
		mkCluster("mx-only", "nsls2", sel(map[string]string{"team": "x"}), sel(map[string]string{"family": "mx"})),
		mkCluster("all", "nsls2", &metav1.LabelSelector{}, nil),
		mkCluster("broken", "nsls2", nil, nil),
		mkCluster("elsewhere", "diamond", &metav1.LabelSelector{}, nil),
	}
	standalone := v1alpha1.TiledInstance{}
	standalone.Name, standalone.Namespace = "demo", "nsls2"
	standalone.Spec.ProfileSelector = sel(map[string]string{"family": "mx"})
	child := v1alpha1.TiledInstance{}
	child.Name, child.Namespace = "nsls2-a", "nsls2"
	instances := []v1alpha1.TiledInstance{standalone, child}

	p := func(labels map[string]string) *v1alpha1.TiledProfile {
		x := prof("p", "nsls2", 0, labels)
		return &x
	}
	nn := func(names ...string) []types.NamespacedName {
		var out []types.NamespacedName
		for _, n := range names {
			out = append(out, types.NamespacedName{Namespace: "nsls2", Name: n})
		}
		return out
	}
	cases := []struct {
		name              string
		old, updated      *v1alpha1.TiledProfile
		clusters, instanc []types.NamespacedName
	}{
		{name: "created", updated: p(map[string]string{"facility": "nsls2"}), clusters: nn("all", "broken", "nsls2")},
		{name: "deleted", old: p(map[string]string{"family": "mx"}), clusters: nn("all", "broken", "mx-only"), instanc: nn("demo")},
		{name: "labels changed: old and new selectors both count", old: p(map[string]string{"facility": "nsls2"}), updated: p(map[string]string{"family": "mx"}),
			clusters: nn("all", "broken", "mx-only", "nsls2"), instanc: nn("demo")},
		{name: "unrelated labels", updated: p(map[string]string{"facility": "esrf"}), clusters: nn("all", "broken")},
		{name: "nothing", clusters: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, i := Affected(tc.old, tc.updated, clusters, instances)
			g.Expect(c).To(Equal(tc.clusters))
			g.Expect(i).To(Equal(tc.instanc))
		})
	}
}

func TestSelectedBy(t *testing.T) {
	mkCluster := func(name, ns string, selector *metav1.LabelSelector, instanceSels ...*metav1.LabelSelector) v1alpha1.TiledCluster {
		c := v1alpha1.TiledCluster{}
		c.Name, c.Namespace, c.Spec.ProfileSelector = name, ns, selector
		for i, s := range instanceSels {
			c.Spec.Instances = append(c.Spec.Instances, v1alpha1.ClusterInstance{Name: string(rune('a' + i)), ProfileSelector: s})
		}
		return c
	}
	mkInstance := func(name, ns string, selector *metav1.LabelSelector) v1alpha1.TiledInstance {
		in := v1alpha1.TiledInstance{}
		in.Name, in.Namespace, in.Spec.ProfileSelector = name, ns, selector
		return in
	}
	mx := sel(map[string]string{"family": "mx"})
	badOp := sel(nil, metav1.LabelSelectorRequirement{Key: "family", Operator: "Near"})
	clusters := []v1alpha1.TiledCluster{
		mkCluster("facility", "nsls2", sel(map[string]string{"facility": "nsls2"})),
		// Selected by the cluster and by two instances: counts once.
		mkCluster("twice", "nsls2", mx, mx, mx),
		// Selected through one instance only.
		mkCluster("per-instance", "nsls2", sel(map[string]string{"team": "x"}), nil, mx),
		mkCluster("all", "nsls2", &metav1.LabelSelector{}),
		// A cluster without a selector cannot be expanded: it selects nothing, even per instance.
		mkCluster("no-selector", "nsls2", nil, mx),
		mkCluster("bad-selector", "nsls2", badOp),
		// A bad instance selector matches nothing; the cluster's own still counts.
		mkCluster("bad-instance", "nsls2", sel(map[string]string{"team": "x"}), badOp),
		mkCluster("elsewhere", "diamond", &metav1.LabelSelector{}),
	}
	instances := []v1alpha1.TiledInstance{
		mkInstance("standalone-mx", "nsls2", mx),
		mkInstance("standalone-all", "nsls2", &metav1.LabelSelector{}),
		mkInstance("stamped-out", "nsls2", nil), // a cluster's child carries no selector
		mkInstance("bad", "nsls2", badOp),
		mkInstance("elsewhere", "diamond", mx),
	}
	cases := []struct {
		name                string
		labels              map[string]string
		clusters, instances int
	}{
		{name: "mx", labels: map[string]string{"family": "mx", "facility": "nsls2"}, clusters: 4, instances: 2},
		{name: "facility only", labels: map[string]string{"facility": "nsls2"}, clusters: 2, instances: 1},
		{name: "unlabelled", labels: nil, clusters: 1, instances: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := prof("p", "nsls2", 0, tc.labels)
			c, i := SelectedBy(&p, clusters, instances)
			g.Expect(c).To(Equal(tc.clusters), "clusters")
			g.Expect(i).To(Equal(tc.instances), "instances")
		})
	}
}
