package profiles

import (
	"cmp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Compare orders profiles by (priority, name): the order in which the expansion engine applies
// them, lowest first, so that a profile of higher priority wins.
func Compare(a, b *v1alpha1.TiledProfile) int {
	if c := cmp.Compare(a.Spec.Priority, b.Spec.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Sort sorts profiles in place by (priority, name).
func Sort(ps []*v1alpha1.TiledProfile) { slices.SortFunc(ps, Compare) }

// Selection is the outcome of selecting the profiles of a TiledCluster.
type Selection struct {
	// Cluster holds the profiles the cluster's profileSelector selects, by (priority, name).
	Cluster []*v1alpha1.TiledProfile
	// Instances holds the profiles of each instance, keyed by instance name: the cluster's profiles
	// together with those its own profileSelector selects (a union, without duplicates), by
	// (priority, name).
	Instances map[string][]*v1alpha1.TiledProfile
	// All holds every profile some instance uses, by (priority, name): the set a cluster's status
	// records and whose changes must re-expand the cluster.
	All []*v1alpha1.TiledProfile
}

// ParseSelector converts a label selector into a labels.Selector. A nil selector is a
// *SelectorError (object and field name it in the message); `{}` selects everything.
func ParseSelector(sel *metav1.LabelSelector, object, field string) (labels.Selector, error) {
	if sel == nil {
		return nil, &SelectorError{Object: object, Field: field, Reason: "a selector is required; {} selects every profile in the namespace"}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, &SelectorError{Object: object, Field: field, Reason: err.Error()}
	}
	return s, nil
}

// Select returns the candidates in namespace whose labels sel matches, by (priority, name). A
// selector that matches nothing is a *NoProfilesError. Candidates from other namespaces are
// ignored: profiles are namespaced and only select into their own namespace.
func Select(sel *metav1.LabelSelector, namespace string, candidates []v1alpha1.TiledProfile, object, field string) ([]*v1alpha1.TiledProfile, error) {
	s, err := ParseSelector(sel, object, field)
	if err != nil {
		return nil, err
	}
	var out []*v1alpha1.TiledProfile
	for i := range candidates {
		p := &candidates[i]
		if p.Namespace == namespace && s.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, &NoProfilesError{Object: object, Field: field, Selector: s.String(), Namespace: namespace}
	}
	Sort(out)
	return out, nil
}

// ForCluster selects the profiles of a TiledCluster and of each of its instances among candidates
// (usually every TiledProfile of the cluster's namespace, in any order).
//
// The cluster's spec.profileSelector is required (nil is a *SelectorError) and selects the profiles
// of every instance. An instance's optional spec.instances[].profileSelector adds profiles for that
// instance alone: its profiles are the union of the two selections. Either selector matching no
// profile at all is a *NoProfilesError.
func ForCluster(cluster *v1alpha1.TiledCluster, candidates []v1alpha1.TiledProfile) (*Selection, error) {
	object := "cluster/" + cluster.Name
	base, err := Select(cluster.Spec.ProfileSelector, cluster.Namespace, candidates, object, "spec.profileSelector")
	if err != nil {
		return nil, err
	}
	sel := &Selection{Cluster: base, Instances: make(map[string][]*v1alpha1.TiledProfile, len(cluster.Spec.Instances))}
	all := map[*v1alpha1.TiledProfile]bool{}
	for _, p := range base {
		all[p] = true
	}
	for _, inst := range cluster.Spec.Instances {
		if inst.ProfileSelector == nil {
			sel.Instances[inst.Name] = base
			continue
		}
		extra, err := Select(inst.ProfileSelector, cluster.Namespace, candidates, object,
			"spec.instances[name="+inst.Name+"].profileSelector")
		if err != nil {
			return nil, err
		}
		sel.Instances[inst.Name] = union(base, extra)
		for _, p := range extra {
			all[p] = true
		}
	}
	for p := range all {
		sel.All = append(sel.All, p)
	}
	Sort(sel.All)
	return sel, nil
}

// ForInstance selects the profiles of a standalone TiledInstance: those its spec.profileSelector
// selects, by (priority, name). An instance without a selector takes no profiles (only the built-in
// defaults and its own fields), which is not an error; a selector matching nothing is a
// *NoProfilesError.
func ForInstance(instance *v1alpha1.TiledInstance, candidates []v1alpha1.TiledProfile) ([]*v1alpha1.TiledProfile, error) {
	if instance.Spec.ProfileSelector == nil {
		return nil, nil
	}
	return Select(instance.Spec.ProfileSelector, instance.Namespace, candidates, "instance/"+instance.Name, "spec.profileSelector")
}

// union merges two lists sorted by (priority, name), dropping duplicates (the same profile object,
// or two candidates with the same name).
func union(a, b []*v1alpha1.TiledProfile) []*v1alpha1.TiledProfile {
	out := make([]*v1alpha1.TiledProfile, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	Sort(out)
	return slices.CompactFunc(out, func(x, y *v1alpha1.TiledProfile) bool { return x.Name == y.Name })
}
