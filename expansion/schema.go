package expansion

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/config/crd"
)

// kinds of the schema the engine knows, by plural resource.
var crdPlurals = []string{"tiledclusters", "tiledinstances", "tiledprofiles"}

// schemaInfo is everything the engine derives, once per process, from the embedded CRDs.
type schemaInfo struct {
	// converter turns unstructured TiledClusters, TiledProfiles and TiledInstances into SMD typed
	// values with the CRDs' own list-map and map semantics.
	converter managedfields.TypeConverter
	// expressions are the places in an instance spec where a field <x>Expression computes <x>.
	expressions []exprSite
	// unions are the groups of mutually exclusive fields of an instance spec.
	unions []unionSite
	// listKeys maps the pattern of every keyed list of an instance spec (e.g. spec.tiled.env) to its
	// key fields.
	listKeys map[string][]string
}

// exprSite is an object in the instance spec with a field <target>Expression beside <target>.
type exprSite struct {
	// parent is the pattern of the object holding both fields, e.g. spec.storage.readOnlyMounts[].nfs
	// ("[]" stands for every item of a list).
	parent string
	// field is the expression field, e.g. pathExpression; target is the field it computes, e.g. path.
	field, target string
	// targetType is the OpenAPI type of the target field: string, integer, number or boolean.
	targetType string
}

// unionSite is an object in the instance spec whose CEL validation rules make some of its fields
// mutually exclusive.
type unionSite struct {
	parent  string
	members []string
}

var (
	schemaOnce sync.Once
	schemaVal  *schemaInfo
	schemaErr  error
)

// loadSchema builds (once) the SMD type converter and the expression and union tables from the
// CRDs embedded in config/crd. Building the converter walks every OpenAPI schema of the three CRDs
// and the Kubernetes types they reference; it costs tens of milliseconds, so it is never repeated.
func loadSchema() (*schemaInfo, error) {
	schemaOnce.Do(func() { schemaVal, schemaErr = buildSchema() })
	return schemaVal, schemaErr
}

func buildSchema() (*schemaInfo, error) {
	models := map[string]*spec.Schema{}
	var instanceCRD *apiextensionsv1.CustomResourceDefinition
	for _, plural := range crdPlurals {
		c, err := crd.Get(plural)
		if err != nil {
			return nil, err
		}
		if plural == "tiledinstances" {
			instanceCRD = c
		}
		name, model, err := openAPIModel(c, v1alpha1.GroupVersion.Version)
		if err != nil {
			return nil, fmt.Errorf("the OpenAPI schema of %s: %w", plural, err)
		}
		models[name] = model
	}
	tc, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		return nil, fmt.Errorf("building the type converter: %w", err)
	}
	info := &schemaInfo{converter: tc, listKeys: map[string][]string{}}
	var root *apiextensionsv1.JSONSchemaProps
	for _, v := range instanceCRD.Spec.Versions {
		if v.Name == v1alpha1.GroupVersion.Version && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			root = v.Schema.OpenAPIV3Schema
		}
	}
	if root == nil {
		return nil, fmt.Errorf("the TiledInstance CRD has no %s schema", v1alpha1.GroupVersion.Version)
	}
	specSchema, ok := root.Properties["spec"]
	if !ok {
		return nil, fmt.Errorf("the TiledInstance CRD has no spec")
	}
	if err := info.walk("spec", &specSchema, false); err != nil {
		return nil, err
	}
	sort.Slice(info.expressions, func(i, j int) bool {
		a, b := info.expressions[i], info.expressions[j]
		return a.parent+"."+a.field < b.parent+"."+b.field
	})
	sort.Slice(info.unions, func(i, j int) bool { return info.unions[i].parent < info.unions[j].parent })
	return info, nil
}

// openAPIModel returns the OpenAPI model of a CRD's version as managedfields.NewTypeConverter reads
// it: the version's schema, named like the API server names it (the group reversed, the version,
// the kind) and tagged with its group, version and kind. The type converter reads only the
// structure — types, properties, items, additionalProperties and the x-kubernetes list and map
// extensions — which the CRD's schema holds as it is; the JSON forms of apiextensions' and
// kube-openapi's schema types are the same OpenAPI v3 schema.
func openAPIModel(c *apiextensionsv1.CustomResourceDefinition, version string) (string, *spec.Schema, error) {
	for _, v := range c.Spec.Versions {
		if v.Name != version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		raw, err := json.Marshal(v.Schema.OpenAPIV3Schema)
		if err != nil {
			return "", nil, err
		}
		model := &spec.Schema{}
		if err := json.Unmarshal(raw, model); err != nil {
			return "", nil, err
		}
		model.AddExtension("x-kubernetes-group-version-kind", []any{
			map[string]any{"group": c.Spec.Group, "version": version, "kind": c.Spec.Names.Kind},
		})
		parts := strings.Split(c.Spec.Group, ".")
		slices.Reverse(parts)
		return strings.Join(parts, ".") + "." + version + "." + c.Spec.Names.Kind, model, nil
	}
	return "", nil, fmt.Errorf("no %s schema in the CRD %s", version, c.Name)
}

var (
	// !(has(self.a) && has(self.b))
	pairRule = regexp.MustCompile(`^!\(has\(self\.(\w+)\) && has\(self\.(\w+)\)\)$`)
	// [has(self.a), has(self.b), ...].filter(x, x).size() <= 1
	listRule = regexp.MustCompile(`^\[((?:has\(self\.\w+\)(?:, )?)+)\]\.filter\((\w+), (\w+)\)\.size\(\) <= 1$`)
	// (has(self.a) ? 1 : 0) + (has(self.b) ? 1 : 0) + ... <= 1
	sumRule  = regexp.MustCompile(`^\(has\(self\.\w+\) \? 1 : 0\)(?: \+ \(has\(self\.\w+\) \? 1 : 0\))+ <= 1$`)
	hasField = regexp.MustCompile(`has\(self\.(\w+)\)`)
)

// exclusiveMembers recognises the two spellings of "these fields are mutually exclusive" that the
// API's validation rules use, and returns the fields; other rules return nil.
func exclusiveMembers(rule string) []string {
	rule = strings.Join(strings.Fields(rule), " ")
	if m := pairRule.FindStringSubmatch(rule); m != nil {
		return []string{m[1], m[2]}
	}
	if m := listRule.FindStringSubmatch(rule); m != nil && m[2] == m[3] {
		var out []string
		for _, f := range hasField.FindAllStringSubmatch(m[1], -1) {
			out = append(out, f[1])
		}
		return out
	}
	if sumRule.MatchString(rule) {
		var out []string
		for _, f := range hasField.FindAllStringSubmatch(rule, -1) {
			out = append(out, f[1])
		}
		return out
	}
	return nil
}

// walk records the expression sites, exclusive groups and list keys beneath s. atomic says that
// s lies within an atomic list or map, where the engine cannot place a computed value on its own:
// an expression there is refused when the schema is loaded.
func (info *schemaInfo) walk(pattern string, s *apiextensionsv1.JSONSchemaProps, atomic bool) error {
	switch s.Type {
	case "array":
		if s.XListType != nil && *s.XListType == "map" {
			info.listKeys[pattern] = append([]string(nil), s.XListMapKeys...)
		} else {
			atomic = true
		}
		if s.Items != nil && s.Items.Schema != nil {
			return info.walk(pattern+"[]", s.Items.Schema, atomic)
		}
		return nil
	case "object":
		if s.XMapType != nil && *s.XMapType == "atomic" {
			atomic = true
		}
	default:
		return nil
	}
	for _, v := range s.XValidations {
		if members := exclusiveMembers(v.Rule); members != nil {
			for _, m := range members {
				if _, ok := s.Properties[m]; !ok {
					return fmt.Errorf("%s: validation rule %q names unknown field %q", pattern, v.Rule, m)
				}
			}
			info.unions = append(info.unions, unionSite{parent: pattern, members: members})
		} else if strings.Contains(v.Message, "mutually exclusive") {
			// A new spelling of a union rule: teach exclusiveMembers, or merged results could
			// violate it.
			return fmt.Errorf("%s: validation rule %q says fields are mutually exclusive in a form the expansion engine does not recognise", pattern, v.Rule)
		}
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prop := s.Properties[name]
		if target, ok := strings.CutSuffix(name, "Expression"); ok && target != "" {
			if t, ok := s.Properties[target]; ok {
				if atomic {
					return fmt.Errorf("%s.%s: expressions within atomic lists or maps are not supported", pattern, name)
				}
				info.expressions = append(info.expressions, exprSite{parent: pattern, field: name, target: target, targetType: t.Type})
			}
		}
		if err := info.walk(pattern+"."+name, &prop, atomic); err != nil {
			return err
		}
	}
	return nil
}
