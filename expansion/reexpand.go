package expansion

import "github.com/bluesky/tiled-operator/apis/v1alpha1"

// Reexpand expands a standalone TiledInstance over candidates (the TiledProfiles of its
// namespace), as the mutating webhook does; old is the stored object on an update, or nil. An
// instance already expanded (with provenance) is expanded again from the fields it sets itself, so
// that admitting it again changes nothing:
//
//   - leaves whose provenance is "instance" (or "instance (expression)");
//   - leaves without provenance (added since it was expanded);
//   - on an update, leaves whose value differs from old (edited since).
//
// A value that the instance's own expression computed is dropped when the expression is in the
// object again (kubectl apply of the terse file merges the two): the expression computes it anew.
// Every other leaf came from the built-in defaults or a profile and is taken from them again, so
// that it follows them. The engine's idempotence (expanding an expansion gives the same spec) makes
// the result equal to obj when nothing changed; a value computed by the instance's own expression
// keeps its " (expression)" mark. kubectl-tiled diff uses it to show what a profile change does to
// standalone instances.
func Reexpand(obj, old *v1alpha1.TiledInstance, candidates []v1alpha1.TiledProfile, builtins Builtins) (*v1alpha1.TiledInstance, error) {
	own := obj.DeepCopy()
	edited := map[string]bool{}
	if len(obj.Provenance) > 0 {
		oldValues := map[string]string{}
		if old != nil {
			if fields, err := Why(old, "spec"); err == nil {
				for _, f := range fields {
					oldValues[f.Path] = f.Value
				}
			}
		}
		leaves := map[string]bool{}
		if fields, err := Why(obj, "spec"); err == nil {
			for _, f := range fields {
				leaves[f.Path] = true
			}
		}
		spec, err := Restrict(obj, func(f FieldSource) bool {
			if f.Source == SourceInstance+ExpressionSuffix && leaves[f.Path+"Expression"] {
				return false
			}
			changed := old != nil && oldValues[f.Path] != f.Value
			if changed {
				edited[f.Path] = true
			}
			return changed || f.Source == "" || f.Source == SourceInstance ||
				f.Source == SourceInstance+ExpressionSuffix
		})
		if err != nil {
			return nil, err
		}
		own.Spec = *spec
		own.Spec.ProfileSelector = obj.Spec.ProfileSelector
		own.Provenance = nil
	}
	out, err := ExpandInstance(own, candidates, builtins)
	if err != nil {
		return nil, err
	}
	for path, src := range out.Provenance {
		if src == SourceInstance && obj.Provenance[path] == SourceInstance+ExpressionSuffix && !edited[path] {
			out.Provenance[path] = obj.Provenance[path]
		}
	}
	return out, nil
}
