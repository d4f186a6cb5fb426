package expansion

import (
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// CheckLayer checks one layer on its own, as the admission webhooks do before anything is expanded:
// its fields against the CRD's schema (*UnknownFieldError, *InvalidFieldError), its mutually
// exclusive groups, every CEL expression it holds, compiled and type-checked against the field it
// computes (*ExpressionError with Reason compile or type), and the values it sets, which must be
// ones the API server accepts on the objects made from them and that can run (*InvalidFieldError:
// image references, quantities, labels, tolerations, affinity, names, paths, NFS servers, Tiled
// config keys...). Expressions are not evaluated: that depends on the instance; Expand checks the
// values they compute. source names the layer in errors, e.g. ProfileSource(p) or
// SourceClusterTemplate; template is a *v1alpha1.InstanceTemplate or *v1alpha1.TiledInstanceSpec.
func CheckLayer(source string, template any) error {
	e, err := newEngine()
	if err != nil {
		return err
	}
	if _, err = e.newLayer(source, template); err != nil {
		return err
	}
	return checkValues(source, template)
}

// Restrict returns the spec of obj with only the leaf fields that keep accepts; keep sees each leaf
// as Why reports it (path in the provenance format, value as JSON, and obj's provenance source).
// Keyed-list items keep their keys. The mutating webhook uses it to recover the fields a standalone
// instance sets itself from an instance that was already expanded.
func Restrict(obj *v1alpha1.TiledInstance, keep func(FieldSource) bool) (*v1alpha1.TiledInstanceSpec, error) {
	u, tv, fs, err := specFieldSet(obj)
	if err != nil {
		return nil, err
	}
	kept := fieldpath.NewSet()
	fs.Leaves().Iterate(func(p fieldpath.Path) {
		if len(p) == 0 || p[0].FieldName == nil || *p[0].FieldName != "spec" {
			return
		}
		r := renderPath(p)
		v := lookup(u, p)
		if keep(FieldSource{Path: r, Value: jsonString(v), Source: obj.Provenance[r]}) {
			kept.Insert(p)
		}
	})
	return toSpec(tv.ExtractItems(kept), []*material{{source: SourceInstance}})
}
