package profiles

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Affected answers the controller's reverse question: a profile was created (old is nil), changed,
// or deleted (updated is nil); which TiledClusters and standalone TiledInstances must be expanded
// again?
//
// A cluster is affected when it is in the profile's namespace and its profileSelector, or the
// profileSelector of one of its instances, matches the profile's old labels or its new labels: old
// labels catch a profile that stops being selected, new labels one that starts. A cluster whose
// selector is missing or does not parse is returned as well, so that it reports its error again.
// A standalone TiledInstance (one with spec.profileSelector) is affected on the same terms.
// Instances stamped out by a cluster carry no selector and are re-expanded through their cluster.
//
// Both results are sorted by namespace and name, and contain no duplicates.
func Affected(old, updated *v1alpha1.TiledProfile, clusters []v1alpha1.TiledCluster, instances []v1alpha1.TiledInstance) (affectedClusters, affectedInstances []types.NamespacedName) {
	var sets []labels.Set
	namespace := ""
	for _, p := range []*v1alpha1.TiledProfile{old, updated} {
		if p != nil {
			sets = append(sets, labels.Set(p.Labels))
			namespace = p.Namespace
		}
	}
	if len(sets) == 0 {
		return nil, nil
	}
	matches := func(sel *metav1.LabelSelector) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return true
		}
		for _, set := range sets {
			if s.Matches(set) {
				return true
			}
		}
		return false
	}
	for i := range clusters {
		c := &clusters[i]
		if c.Namespace != namespace {
			continue
		}
		hit := c.Spec.ProfileSelector == nil || matches(c.Spec.ProfileSelector)
		for j := 0; !hit && j < len(c.Spec.Instances); j++ {
			if s := c.Spec.Instances[j].ProfileSelector; s != nil {
				hit = matches(s)
			}
		}
		if hit {
			affectedClusters = append(affectedClusters, types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
		}
	}
	for i := range instances {
		in := &instances[i]
		if in.Namespace == namespace && in.Spec.ProfileSelector != nil && matches(in.Spec.ProfileSelector) {
			affectedInstances = append(affectedInstances, types.NamespacedName{Namespace: in.Namespace, Name: in.Name})
		}
	}
	return sortNames(affectedClusters), sortNames(affectedInstances)
}

func sortNames(ns []types.NamespacedName) []types.NamespacedName {
	slices.SortFunc(ns, func(a, b types.NamespacedName) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return slices.Compact(ns)
}

// SelectedBy counts who selects a profile: the TiledClusters of its namespace whose
// spec.profileSelector, or the profileSelector of one of whose instances, matches the profile's
// labels (a cluster counts once), and the standalone TiledInstances of its namespace (those with
// spec.profileSelector) whose selector matches them. Unlike Affected, a selector that is missing or
// does not parse selects nothing, and a cluster whose own spec.profileSelector is missing or does
// not parse counts for no profile (it cannot be expanded): the counts say who takes the profile,
// not who must report an error. Objects of other namespaces are ignored.
func SelectedBy(p *v1alpha1.TiledProfile, clusters []v1alpha1.TiledCluster, instances []v1alpha1.TiledInstance) (byClusters, byInstances int) {
	set := labels.Set(p.Labels)
	matches := func(sel *metav1.LabelSelector) bool {
		if sel == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && s.Matches(set)
	}
	for i := range clusters {
		c := &clusters[i]
		if c.Namespace != p.Namespace {
			continue
		}
		if _, err := ParseSelector(c.Spec.ProfileSelector, "", ""); err != nil {
			continue // the cluster cannot be expanded at all
		}
		hit := matches(c.Spec.ProfileSelector)
		for j := 0; !hit && j < len(c.Spec.Instances); j++ {
			hit = matches(c.Spec.Instances[j].ProfileSelector)
		}
		if hit {
			byClusters++
		}
	}
	for i := range instances {
		if in := &instances[i]; in.Namespace == p.Namespace && matches(in.Spec.ProfileSelector) {
			byInstances++
		}
	}
	return byClusters, byInstances
}
