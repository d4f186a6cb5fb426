package crdcompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// Finding is one difference between an old and a new CRD that Compare reports.
type Finding struct {
	// CRD is the CRD's metadata.name (plural.group).
	CRD string
	// Version is the CRD version the finding is about; empty for the CRD as a whole.
	Version string
	// Path is the schema path within the version (see the package documentation); empty for the
	// version or the CRD as a whole.
	Path string
	// Message says what changed, old value before new: "type string -> integer".
	Message string
}

// String formats the finding as "CRD VERSION: PATH: MESSAGE", leaving out what is empty.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.CRD)
	if f.Version != "" {
		b.WriteString(" " + f.Version)
	}
	b.WriteString(": ")
	if f.Path != "" {
		b.WriteString(f.Path + ": ")
	}
	b.WriteString(f.Message)
	return b.String()
}

// Result is what Compare found.
type Result struct {
	// Problems are changes that break stored objects or their clients: a release must not ship
	// them without a new API version and a conversion.
	Problems []Finding
	// Warnings are changes that may refuse the next update of some stored objects (new CEL rules,
	// tightened bounds): to be looked at, not refused.
	Warnings []Finding
}

// Compare reports every change from the CRDs previous to the CRDs current that can disturb objects
// stored under previous (see the package documentation for the list). The CRDs are matched by
// metadata.name; CRDs only in current are new and allowed. The findings come in a stable order:
// CRDs by name, versions in their order in previous, paths depth first with properties by name.
func Compare(previous, current []apiextensionsv1.CustomResourceDefinition) Result {
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for i := range current {
		byName[current[i].Name] = &current[i]
	}
	olds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(previous))
	for i := range previous {
		olds = append(olds, &previous[i])
	}
	sort.SliceStable(olds, func(i, j int) bool { return olds[i].Name < olds[j].Name })

	r := &Result{}
	for _, o := range olds {
		n, ok := byName[o.Name]
		if !ok {
			r.problem(Finding{CRD: o.Name, Message: "CRD missing in the new set"})
			continue
		}
		compareCRD(r, o, n)
	}
	return *r
}

func (r *Result) problem(f Finding) { r.Problems = append(r.Problems, f) }
func (r *Result) warning(f Finding) { r.Warnings = append(r.Warnings, f) }

// compareCRD compares one CRD present in both sets.
func compareCRD(r *Result, o, n *apiextensionsv1.CustomResourceDefinition) {
	crd := func(msg string, args ...any) Finding { return Finding{CRD: o.Name, Message: fmt.Sprintf(msg, args...)} }
	if o.Spec.Scope != n.Spec.Scope {
		r.problem(crd("scope %s -> %s", o.Spec.Scope, n.Spec.Scope))
	}
	if o.Spec.Names.Kind != n.Spec.Names.Kind {
		r.problem(crd("kind %s -> %s", o.Spec.Names.Kind, n.Spec.Names.Kind))
	}

	// The storage version: the objects in etcd are encoded in it, so it must stay readable.
	oldStorage, newStorage := storageVersion(o), storageVersion(n)
	if oldStorage != "" && newStorage != oldStorage {
		if v := findVersion(n, oldStorage); v == nil || !v.Served {
			r.problem(crd("storage version %s -> %s while %s is no longer served", oldStorage, newStorage, oldStorage))
		}
	}

	for i := range o.Spec.Versions {
		ov := &o.Spec.Versions[i]
		if !ov.Served {
			continue
		}
		at := func(path, msg string, args ...any) Finding {
			return Finding{CRD: o.Name, Version: ov.Name, Path: path, Message: fmt.Sprintf(msg, args...)}
		}
		nv := findVersion(n, ov.Name)
		switch {
		case nv == nil:
			r.problem(at("", "served version missing in the new CRD"))
			continue
		case !nv.Served:
			r.problem(at("", "version no longer served"))
			continue
		}
		compareSubresources(r, at, ov.Subresources, nv.Subresources)
		oldSchema, newSchema := rootSchema(ov), rootSchema(nv)
		switch {
		case oldSchema == nil:
			// No schema before: anything was accepted (and nothing pruned); a schema now is a
			// change of everything.
			if newSchema != nil {
				r.problem(at(".", "openAPIV3Schema added where there was none"))
			}
		case newSchema == nil:
			r.problem(at(".", "openAPIV3Schema removed"))
		default:
			w := walker{r: r, at: at}
			w.schema("", oldSchema, newSchema)
		}
	}
}

// compareSubresources reports a status or scale subresource that was removed or changed, and warns
// about a status subresource that was added.
func compareSubresources(r *Result, at func(path, msg string, args ...any) Finding, o, n *apiextensionsv1.CustomResourceSubresources) {
	var oStatus, nStatus bool
	var oScale, nScale *apiextensionsv1.CustomResourceSubresourceScale
	if o != nil {
		oStatus, oScale = o.Status != nil, o.Scale
	}
	if n != nil {
		nStatus, nScale = n.Status != nil, n.Scale
	}
	switch {
	case oStatus && !nStatus:
		r.problem(at("", "status subresource removed"))
	case !oStatus && nStatus:
		r.warning(at("", "status subresource added: status written through the main resource is now ignored"))
	}
	switch {
	case oScale != nil && nScale == nil:
		r.problem(at("", "scale subresource removed"))
	case oScale != nil && !reflect.DeepEqual(oScale, nScale):
		r.problem(at("", "scale subresource paths changed"))
	}
}

// walker compares one served version's schemas.
type walker struct {
	r  *Result
	at func(path, msg string, args ...any) Finding
}

// schema compares the old schema o at path with the new schema n at the same path, then their
// children. Both are non-nil.
func (w walker) schema(path string, o, n *apiextensionsv1.JSONSchemaProps) {
	p := display(path)
	problem := func(msg string, args ...any) { w.r.problem(w.at(p, msg, args...)) }
	warning := func(msg string, args ...any) { w.r.warning(w.at(p, msg, args...)) }

	if o.Type != n.Type {
		problem("type %s -> %s", orNone(o.Type), orNone(n.Type))
	}
	if o.Format != n.Format {
		problem("format %s -> %s", orNone(o.Format), orNone(n.Format))
	}
	if o.XIntOrString != n.XIntOrString {
		problem("x-kubernetes-int-or-string %t -> %t", o.XIntOrString, n.XIntOrString)
	}
	if o.XEmbeddedResource != n.XEmbeddedResource {
		problem("x-kubernetes-embedded-resource %t -> %t", o.XEmbeddedResource, n.XEmbeddedResource)
	}
	if a, b := isTrue(o.XPreserveUnknownFields), isTrue(n.XPreserveUnknownFields); a != b {
		problem("x-kubernetes-preserve-unknown-fields %t -> %t", a, b)
	}
	if o.Type == "array" || n.Type == "array" {
		if a, b := orDefault(o.XListType, "atomic"), orDefault(n.XListType, "atomic"); a != b {
			problem("x-kubernetes-list-type %s -> %s", a, b)
		}
		if !slices.Equal(o.XListMapKeys, n.XListMapKeys) {
			problem("x-kubernetes-list-map-keys %v -> %v", o.XListMapKeys, n.XListMapKeys)
		}
	}
	if o.Type == "object" || n.Type == "object" {
		if a, b := orDefault(o.XMapType, "granular"), orDefault(n.XMapType, "granular"); a != b {
			problem("x-kubernetes-map-type %s -> %s", a, b)
		}
	}
	if o.Nullable && !n.Nullable {
		problem("nullable true -> false")
	}
	w.enum(p, o.Enum, n.Enum)
	w.required(path, o, n)
	w.rules(p, o.XValidations, n.XValidations)
	tightened(o, n, warning)

	// The children: properties by name, then array items, then map values.
	for _, name := range sortedKeys(o.Properties) {
		child := path + "." + name
		op := o.Properties[name]
		np, ok := n.Properties[name]
		if !ok {
			w.r.problem(w.at(child, "field removed"))
			continue
		}
		w.schema(child, &op, &np)
	}
	if oi := itemsSchema(o); oi != nil {
		if ni := itemsSchema(n); ni != nil {
			w.schema(path+"[*]", oi, ni)
		} else {
			w.r.problem(w.at(path+"[*]", "array items schema removed"))
		}
	}
	if oa := additionalSchema(o); oa != nil {
		if na := additionalSchema(n); na != nil {
			w.schema(path+".*", oa, na)
		} else {
			w.r.problem(w.at(path+".*", "map values schema (additionalProperties) removed"))
		}
	}
}

// enum reports old values the new enum lacks, or an enum where there was none.
func (w walker) enum(p string, o, n []apiextensionsv1.JSON) {
	if len(n) == 0 {
		return // no enum now: every value is allowed
	}
	if len(o) == 0 {
		w.r.problem(w.at(p, "enum added: only %s allowed", strings.Join(enumValues(n), ", ")))
		return
	}
	now := map[string]bool{}
	for _, v := range enumValues(n) {
		now[v] = true
	}
	var lost []string
	for _, v := range enumValues(o) {
		if !now[v] {
			lost = append(lost, v)
		}
	}
	if len(lost) > 0 {
		w.r.problem(w.at(p, "enum lost %s", strings.Join(lost, ", ")))
	}
}

// required reports every property of n.Required that o.Required lacks.
func (w walker) required(path string, o, n *apiextensionsv1.JSONSchemaProps) {
	for _, name := range n.Required {
		if slices.Contains(o.Required, name) {
			continue
		}
		if _, existed := o.Properties[name]; existed {
			w.r.problem(w.at(path+"."+name, "became required"))
		} else {
			w.r.problem(w.at(path+"."+name, "new field is required"))
		}
	}
}

// rules warns about every x-kubernetes-validations rule of n whose text o lacks.
func (w walker) rules(p string, o, n apiextensionsv1.ValidationRules) {
	for _, rule := range n {
		if !slices.ContainsFunc(o, func(r apiextensionsv1.ValidationRule) bool { return r.Rule == rule.Rule }) {
			w.r.warning(w.at(p, "new x-kubernetes-validations rule: %s", rule.Rule))
		}
	}
}

// tightened warns about value validations that accept less than before.
func tightened(o, n *apiextensionsv1.JSONSchemaProps, warning func(msg string, args ...any)) {
	if n.Pattern != "" && n.Pattern != o.Pattern {
		warning("pattern %s -> %s", orNone(o.Pattern), n.Pattern)
	}
	upper := func(name string, a, b *int64) {
		if b != nil && (a == nil || *b < *a) {
			warning("%s %s -> %d", name, intOrNone(a), *b)
		}
	}
	lower := func(name string, a, b *int64) {
		if b != nil && (a == nil || *b > *a) {
			warning("%s %s -> %d", name, intOrNone(a), *b)
		}
	}
	upper("maxLength", o.MaxLength, n.MaxLength)
	upper("maxItems", o.MaxItems, n.MaxItems)
	upper("maxProperties", o.MaxProperties, n.MaxProperties)
	lower("minLength", o.MinLength, n.MinLength)
	lower("minItems", o.MinItems, n.MinItems)
	lower("minProperties", o.MinProperties, n.MinProperties)
	if n.Maximum != nil && (o.Maximum == nil || *n.Maximum < *o.Maximum) {
		warning("maximum %s -> %g", floatOrNone(o.Maximum), *n.Maximum)
	}
	if n.Minimum != nil && (o.Minimum == nil || *n.Minimum > *o.Minimum) {
		warning("minimum %s -> %g", floatOrNone(o.Minimum), *n.Minimum)
	}
	if n.ExclusiveMaximum && !o.ExclusiveMaximum {
		warning("exclusiveMaximum false -> true")
	}
	if n.ExclusiveMinimum && !o.ExclusiveMinimum {
		warning("exclusiveMinimum false -> true")
	}
	if n.MultipleOf != nil && (o.MultipleOf == nil || *n.MultipleOf != *o.MultipleOf) {
		warning("multipleOf %s -> %g", floatOrNone(o.MultipleOf), *n.MultipleOf)
	}
	for _, c := range []struct {
		name string
		a, b any
	}{{"allOf", o.AllOf, n.AllOf}, {"anyOf", o.AnyOf, n.AnyOf}, {"oneOf", o.OneOf, n.OneOf}, {"not", o.Not, n.Not}} {
		// Removed altogether accepts more; added or changed may accept less. Descriptions may
		// change freely.
		if b := withoutDescriptions(c.b); b != nil && !reflect.DeepEqual(withoutDescriptions(c.a), b) {
			warning("%s changed", c.name)
		}
	}
}

// withoutDescriptions returns v as generic JSON (nil when empty) without its descriptions.
func withoutDescriptions(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return v
	}
	if l, ok := out.([]any); ok && len(l) == 0 {
		return nil
	}
	var strip func(any) any
	strip = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			delete(t, "description")
			for k, c := range t {
				t[k] = strip(c)
			}
		case []any:
			for i, c := range t {
				t[i] = strip(c)
			}
		}
		return x
	}
	return strip(out)
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

func findVersion(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return &crd.Spec.Versions[i]
		}
	}
	return nil
}

func rootSchema(v *apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.JSONSchemaProps {
	if v.Schema == nil {
		return nil
	}
	return v.Schema.OpenAPIV3Schema
}

func itemsSchema(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s.Items == nil {
		return nil
	}
	return s.Items.Schema
}

func additionalSchema(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s.AdditionalProperties == nil {
		return nil
	}
	return s.AdditionalProperties.Schema
}

// enumValues returns the values of an enum as compact JSON ("\"Retain\"", "3").
func enumValues(vs []apiextensionsv1.JSON) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		var x any
		if err := json.Unmarshal(v.Raw, &x); err != nil {
			out = append(out, string(v.Raw))
			continue
		}
		b, _ := json.Marshal(x)
		out = append(out, string(b))
	}
	return out
}

func sortedKeys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func display(path string) string {
	if path == "" {
		return "."
	}
	return path
}

func isTrue(b *bool) bool { return b != nil && *b }

func orDefault(s *string, def string) string {
	if s == nil || *s == "" {
		return def
	}
	return *s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func intOrNone(i *int64) string {
	if i == nil {
		return "(none)"
	}
	return fmt.Sprint(*i)
}

func floatOrNone(f *float64) string {
	if f == nil {
		return "(none)"
	}
	return fmt.Sprintf("%g", *f)
}

// LoadDir reads every CRD of the *.yaml files of dir (one or more YAML documents each), in file
// name order. A document of another kind, or two CRDs of the same name, is an error.
func LoadDir(dir string) ([]apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *.yaml file in %s", dir)
	}
	sort.Strings(paths)
	var out []apiextensionsv1.CustomResourceDefinition
	seen := map[string]string{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		crds, err := Load(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, c := range crds {
			if first, dup := seen[c.Name]; dup {
				return nil, fmt.Errorf("%s: CRD %s already in %s", p, c.Name, first)
			}
			seen[c.Name] = p
		}
		out = append(out, crds...)
	}
	return out, nil
}

// Load reads the CRDs of a YAML (or JSON) stream of one or more documents; empty documents are
// skipped, a document of another kind is an error.
func Load(r io.Reader) ([]apiextensionsv1.CustomResourceDefinition, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []apiextensionsv1.CustomResourceDefinition
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(raw) == 0 {
			continue
		}
		if raw["kind"] != "CustomResourceDefinition" {
			return nil, fmt.Errorf("a document of kind %v, not CustomResourceDefinition", raw["kind"])
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := json.Unmarshal(b, &crd); err != nil {
			return nil, fmt.Errorf("CRD %v: %w", raw["metadata"], err)
		}
		out = append(out, crd)
	}
}
