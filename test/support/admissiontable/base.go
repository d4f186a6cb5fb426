package admissiontable

import (
	"os"
	"path/filepath"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
)

// Namespace is the namespace of the handler cases: their refusals name it.
const Namespace = "beamlines"

// Base are the objects of webhooks/testdata that the handler cases are tried beside: the profiles,
// the cluster and the terse standalone instance.
type Base struct {
	Profiles []v1alpha1.TiledProfile
	Cluster  *v1alpha1.TiledCluster
	Terse    *v1alpha1.TiledInstance
}

// Testdata is the path of a file of webhooks/testdata of this checkout.
func Testdata(name string) string {
	return filepath.Join(Dir(), "..", name)
}

// LoadBase reads the objects of Base into namespace, each profile at generation 1 (as the API server
// stores a new one).
func LoadBase(namespace string) (*Base, error) {
	b := &Base{}
	for _, name := range []string{"profiles.yaml", "cluster.yaml", "terse-instance.yaml"} {
		r, err := os.Open(Testdata(name))
		if err != nil {
			return nil, err
		}
		objs, err := expansion.DecodeAll(name, r)
		r.Close()
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *v1alpha1.TiledProfile:
				o.Namespace, o.Generation = namespace, 1
				b.Profiles = append(b.Profiles, *o)
			case *v1alpha1.TiledCluster:
				o.Namespace = namespace
				b.Cluster = o
			case *v1alpha1.TiledInstance:
				o.Namespace = namespace
				b.Terse = o
			}
		}
	}
	return b, nil
}
