package render

import (
	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// Names are the names of the objects of one instance.
//
// Deprecated: use names.Objects.
type Names = names.Objects

// NamesFor returns the object names of an instance: names.For of its namespace and name.
//
// Deprecated: use names.For(ti.Namespace, ti.Name).
func NamesFor(ti *v1alpha1.TiledInstance) names.Objects {
	return names.For(ti.Namespace, ti.Name)
}
