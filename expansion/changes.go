package expansion

import (
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// FieldProvenance stands, in ChangedFields, for a change of where values come from that changes no
// value of the spec.
const FieldProvenance = "provenance"

// ChangedFields lists what replacing the stored TiledInstance by the desired one would change,
// sorted: the leaf fields of the spec whose value differs, appears or disappears (in the provenance
// format, e.g. spec.tiled.podAnnotations.team or spec.tiled.nodeSelector["kubernetes.io/hostname"]),
// the labels that differ (metadata.labels.team), and FieldProvenance when the provenance of a field
// whose value is unchanged differs. Identical instances give none. It reads only its arguments.
func ChangedFields(stored, desired *v1alpha1.TiledInstance) ([]string, error) {
	before, err := specLeaves(stored)
	if err != nil {
		return nil, err
	}
	after, err := specLeaves(desired)
	if err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for p, v := range before {
		if w, ok := after[p]; !ok || w != v {
			changed[p] = true
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			changed[p] = true
		}
	}
	for _, k := range keysOfBoth(stored.Labels, desired.Labels) {
		a, inA := stored.Labels[k]
		b, inB := desired.Labels[k]
		if inA != inB || a != b {
			var sb strings.Builder
			sb.WriteString("metadata.labels")
			renderName(&sb, k)
			changed[sb.String()] = true
		}
	}
	for _, k := range keysOfBoth(stored.Provenance, desired.Provenance) {
		if stored.Provenance[k] != desired.Provenance[k] && !changed[k] {
			changed[FieldProvenance] = true
			break
		}
	}
	return slices.Sorted(maps.Keys(changed)), nil
}

// specLeaves maps every leaf field of an instance's spec (as the CRD's schema sees it) to its value
// as JSON.
func specLeaves(obj *v1alpha1.TiledInstance) (map[string]string, error) {
	u, _, fs, err := specFieldSet(obj)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	fs.Leaves().Iterate(func(p fieldpath.Path) {
		out[renderPath(p)] = jsonString(lookup(u, p))
	})
	return out, nil
}

func keysOfBoth(a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
