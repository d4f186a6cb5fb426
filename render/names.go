package render

import (
	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// Names and NamesFor remain only for the suites under test/ that still call them (e2e, faults,
// packaging, integration/controllers); the product takes names from package names. New code uses
// names.Objects and names.For(ti.Namespace, ti.Name); this file goes when those suites do too. (Not
// marked Deprecated: staticcheck would fail make lint at each of their calls until then.)

// Names are the names of the objects of one instance: names.Objects.
type Names = names.Objects

// NamesFor returns the object names of an instance: names.For of its namespace and name.
func NamesFor(ti *v1alpha1.TiledInstance) names.Objects {
	return names.For(ti.Namespace, ti.Name)
}
