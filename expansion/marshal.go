package expansion

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Marshal renders TiledInstances as YAML documents separated by "---": for each, apiVersion, kind,
// metadata (name, namespace, labels), spec and provenance, with keys sorted. It is the one
// rendering of an expansion: kubectl-tiled prints it and golden files hold it, so equal input
// gives equal bytes.
func Marshal(objs ...*v1alpha1.TiledInstance) ([]byte, error) {
	var buf bytes.Buffer
	for i, o := range objs {
		spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o.Spec)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", o.Name, err)
		}
		meta := map[string]any{"name": o.Name}
		if o.Namespace != "" {
			meta["namespace"] = o.Namespace
		}
		if len(o.Labels) > 0 {
			meta["labels"] = o.Labels
		}
		doc := map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(),
			"kind":       "TiledInstance",
			"metadata":   meta,
			"spec":       spec,
		}
		if len(o.Provenance) > 0 {
			doc["provenance"] = o.Provenance
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", o.Name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// Objects returns the TiledInstances of a result, in order.
func (r *Result) Objects() []*v1alpha1.TiledInstance {
	out := make([]*v1alpha1.TiledInstance, len(r.Instances))
	for i := range r.Instances {
		out[i] = r.Instances[i].Object
	}
	return out
}

// Decode decodes one YAML or JSON document holding a TiledCluster, TiledProfile or TiledInstance
// and checks it against the CRD's schema. A field the schema does not declare (a misspelt override,
// say) is an *UnknownFieldError naming the object, the layer and the field, e.g.
// "TiledCluster/nsls2: instance/chx/overrides: spec.storage.data.sise"; other schema violations are
// an *InvalidFieldError. The CRDs' CEL validation rules are not evaluated (the API server does
// that); exclusive groups are checked by Expand.
func Decode(doc []byte) (runtime.Object, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("empty document")
	}
	u := &unstructured.Unstructured{Object: m}
	gvk := u.GroupVersionKind()
	var obj runtime.Object
	switch {
	case gvk.GroupVersion() != v1alpha1.GroupVersion:
		return nil, fmt.Errorf("%s %q: not a %s object", gvk.Kind, u.GetName(), v1alpha1.GroupVersion)
	case gvk.Kind == "TiledCluster":
		obj = &v1alpha1.TiledCluster{}
	case gvk.Kind == "TiledProfile":
		obj = &v1alpha1.TiledProfile{}
	case gvk.Kind == "TiledInstance":
		obj = &v1alpha1.TiledInstance{}
	default:
		return nil, fmt.Errorf("kind %q is not one of TiledCluster, TiledProfile, TiledInstance", gvk.Kind)
	}
	info, err := loadSchema()
	if err != nil {
		return nil, err
	}
	object := gvk.Kind + "/" + u.GetName()
	if _, err := info.converter.ObjectToTyped(u); err != nil {
		return nil, decodeError(object, gvk.Kind, u, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, obj); err != nil {
		if bad := badQuantities(gvk.Kind, m); len(bad) > 0 {
			return nil, decodeError(object, gvk.Kind, u, bad)
		}
		return nil, &InvalidFieldError{Object: object, Field: "", Reason: err.Error()}
	}
	return obj, nil
}

var (
	overridesPath = regexp.MustCompile(`^\.spec\.instances\[name="((?:[^"\\]|\\.)*)"\]\.overrides(\..*)$`)
	templatePath  = regexp.MustCompile(`^\.spec\.template(\..*)$`)
	specPath      = regexp.MustCompile(`^\.spec(\..*)$`)
)

// decodeError names the layer of the first schema violation of a decoded object.
func decodeError(object, kind string, u *unstructured.Unstructured, err error) error {
	var verrs typed.ValidationErrors
	if !errors.As(err, &verrs) || len(verrs) == 0 {
		return &InvalidFieldError{Object: object, Reason: err.Error()}
	}
	slices.SortStableFunc(verrs, func(a, b typed.ValidationError) int { return strings.Compare(a.Path, b.Path) })
	v := verrs[0]
	layer, field := "", smdPathToField(v.Path)
	switch kind {
	case "TiledCluster":
		if m := overridesPath.FindStringSubmatch(v.Path); m != nil {
			name := m[1]
			if s, ok := unquote(`"` + m[1] + `"`); ok {
				name = s
			}
			layer, field = OverridesSource(name), "spec."+smdPathToField(m[2])
		} else if m := templatePath.FindStringSubmatch(v.Path); m != nil {
			layer, field = SourceClusterTemplate, "spec."+smdPathToField(m[1])
		}
	case "TiledProfile":
		if specPath.MatchString(v.Path) {
			layer = "profile/" + u.GetName() + "@" + itoa(u.GetGeneration())
		}
	case "TiledInstance":
		if specPath.MatchString(v.Path) {
			layer = SourceInstance
		}
	}
	if strings.Contains(v.ErrorMessage, "field not declared in schema") {
		return &UnknownFieldError{Object: object, Layer: layer, Field: field}
	}
	return &InvalidFieldError{Object: object, Layer: layer, Field: field, Reason: v.ErrorMessage}
}

func unquote(q string) (string, bool) {
	var s string
	if err := utiljson.Unmarshal([]byte(q), &s); err != nil {
		return "", false
	}
	return s, true
}

// DecodeAll decodes every document of a YAML (or JSON) stream with Decode, skipping empty
// documents and comments. name (e.g. a file name) prefixes errors.
func DecodeAll(name string, r io.Reader) ([]runtime.Object, error) {
	return decodeAll(name, r, Decode)
}

// DecodeAllWith is DecodeAll with another decoder of one document (schemacheck.DecodeChecked adds
// the API server's schema checks).
func DecodeAllWith(name string, r io.Reader, decode func([]byte) (runtime.Object, error)) ([]runtime.Object, error) {
	return decodeAll(name, r, decode)
}

func decodeAll(name string, r io.Reader, decode func([]byte) (runtime.Object, error)) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []runtime.Object
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if isEmptyDocument(doc) {
			continue
		}
		obj, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		out = append(out, obj)
	}
}

func isEmptyDocument(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && string(line) != "---" {
			return false
		}
	}
	return true
}

// FieldSource is one leaf field of an expanded instance, its value and where it came from.
type FieldSource struct {
	// Path is the field, in the provenance format, e.g. spec.storage.data.size.
	Path string
	// Value is the field's value as JSON, e.g. "2Ti".
	Value string
	// Source is the provenance source, e.g. instance/chx/overrides.
	Source string
}

// Why returns the value and source of a field of an expanded TiledInstance: the field itself when
// it is a leaf, or every leaf beneath it (sorted by path) when it is an object or a keyed list. The
// path is in the provenance format; a leading "." and the leading "spec." may be left out. A field
// the instance does not set is an error.
func Why(obj *v1alpha1.TiledInstance, field string) ([]FieldSource, error) {
	field = strings.TrimPrefix(field, ".")
	if field != "spec" && !strings.HasPrefix(field, "spec.") && !strings.HasPrefix(field, "spec[") {
		field = "spec." + field
	}
	u, _, fs, err := specFieldSet(obj)
	if err != nil {
		return nil, err
	}
	var out []FieldSource
	fs.Leaves().Iterate(func(p fieldpath.Path) {
		r := renderPath(p)
		if r != field && !strings.HasPrefix(r, field+".") && !strings.HasPrefix(r, field+"[") {
			return
		}
		v := lookup(u, p)
		out = append(out, FieldSource{Path: r, Value: jsonString(v), Source: obj.Provenance[r]})
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("%s does not set %s", obj.Name, field)
	}
	slices.SortFunc(out, func(a, b FieldSource) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// specFieldSet returns an instance's spec as the unstructured object the CRD's schema types (apiVersion,
// kind and spec) and the set of its fields.
func specFieldSet(obj *v1alpha1.TiledInstance) (map[string]any, *typed.TypedValue, *fieldpath.Set, error) {
	info, err := loadSchema()
	if err != nil {
		return nil, nil, nil, err
	}
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&obj.Spec)
	if err != nil {
		return nil, nil, nil, &InvalidFieldError{Layer: SourceInstance, Field: "spec", Reason: err.Error()}
	}
	u := map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TiledInstance", "spec": spec}
	tv, err := info.converter.ObjectToTyped(&unstructured.Unstructured{Object: u})
	if err != nil {
		return nil, nil, nil, schemaError(SourceInstance, err)
	}
	fs, err := tv.ToFieldSet()
	if err != nil {
		return nil, nil, nil, schemaError(SourceInstance, err)
	}
	return u, tv, fs, nil
}
