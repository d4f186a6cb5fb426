// Package crd embeds the CustomResourceDefinitions that controller-gen generates into bases/, so that
// the expansion engine can merge with the CRDs' own schemas and tests can install them, without
// reading files at run time.
package crd

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed bases/*.yaml
var bases embed.FS

// CRDs returns the operator's CustomResourceDefinitions, ordered by name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		data, err := bases.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("embedded CRD %s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// Get returns the CustomResourceDefinition of the given plural resource, e.g. "tiledinstances".
func Get(plural string) (*apiextensionsv1.CustomResourceDefinition, error) {
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	for _, c := range crds {
		if c.Spec.Names.Plural == plural {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no embedded CRD for resource %q", plural)
}
