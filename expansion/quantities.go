package expansion

import (
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/config/crd"
)

// quantityPattern is the pattern controller-gen gives a resource.Quantity in a CRD's schema (beside
// x-kubernetes-int-or-string): it marks the fields that decode into quantities.
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// badQuantities finds the values of an object of kind that its typed decoding would refuse as
// quantities (resource requests and limits, a divisor): the typed decoding stops at the first with
// an error that names neither the field nor the value. Each is returned at its path in the
// notation of structured-merge-diff's validation errors, so that decodeError names its layer and
// field as for any other value the schema refuses; the message is apimachinery's, with the value.
func badQuantities(kind string, obj map[string]any) typed.ValidationErrors {
	root := schemaOf(kind)
	if root == nil {
		return nil
	}
	var out typed.ValidationErrors
	walkQuantities(root, obj, fieldpath.Path{}, &out)
	return out
}

// schemaOf returns the OpenAPI schema of kind's served version in the embedded CRDs, or nil.
func schemaOf(kind string) *apiextensionsv1.JSONSchemaProps {
	crds, err := crd.CRDs()
	if err != nil {
		return nil
	}
	for _, c := range crds {
		if c.Spec.Names.Kind != kind {
			continue
		}
		for _, v := range c.Spec.Versions {
			if v.Name == v1alpha1.GroupVersion.Version && v.Schema != nil {
				return v.Schema.OpenAPIV3Schema
			}
		}
	}
	return nil
}

func walkQuantities(s *apiextensionsv1.JSONSchemaProps, v any, path fieldpath.Path, out *typed.ValidationErrors) {
	if s == nil {
		return
	}
	if s.XIntOrString && s.Pattern == quantityPattern {
		// As resource.Quantity's UnmarshalJSON reads a string; a number always parses.
		if str, ok := v.(string); ok {
			if _, err := resource.ParseQuantity(strings.TrimSpace(str)); err != nil {
				*out = append(*out, typed.ValidationError{Path: path.String(), ErrorMessage: field.Invalid(nil, str, err.Error()).ErrorBody()})
			}
		}
		return
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			child := path.Copy()
			child = append(child, fieldpath.PathElement{FieldName: &k})
			if p, ok := s.Properties[k]; ok {
				walkQuantities(&p, v[k], child, out)
			} else if s.AdditionalProperties != nil {
				walkQuantities(s.AdditionalProperties.Schema, v[k], child, out)
			}
		}
	case []any:
		if s.Items == nil || s.Items.Schema == nil {
			return
		}
		for i, item := range v {
			child := path.Copy()
			child = append(child, listElement(s, item, i))
			walkQuantities(s.Items.Schema, item, child, out)
		}
	}
}

// listElement is the path element of item i of a list: by its keys in a list-map, as
// structured-merge-diff names it (e.g. [name="chx"]), else by index.
func listElement(s *apiextensionsv1.JSONSchemaProps, item any, i int) fieldpath.PathElement {
	m, isMap := item.(map[string]any)
	if s.XListType != nil && *s.XListType == "map" && len(s.XListMapKeys) > 0 && isMap {
		var kv []any
		for _, k := range s.XListMapKeys {
			if val, ok := m[k]; ok {
				kv = append(kv, k, val)
			}
		}
		if len(kv) > 0 {
			return fieldpath.PathElement{Key: fieldpath.KeyByFields(kv...)}
		}
	}
	return fieldpath.PathElement{Index: &i}
}
