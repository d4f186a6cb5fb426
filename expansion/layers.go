package expansion

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Provenance sources of the layers that are not profiles.
const (
	SourceDefault         = "default"
	SourceClusterTemplate = "cluster/template"
	SourceInstance        = "instance"
	// ExpressionSuffix is appended to a source when a CEL expression of that layer computed the value.
	ExpressionSuffix = " (expression)"
)

// ProfileSource is the provenance source of a profile: profile/<name>@<generation>.
func ProfileSource(p *v1alpha1.TiledProfile) string {
	return "profile/" + p.Name + "@" + itoa(p.Generation)
}

// OverridesSource is the provenance source of an instance's overrides: instance/<name>/overrides.
func OverridesSource(instance string) string { return "instance/" + instance + "/overrides" }

func itoa(i int64) string { b, _ := json.Marshal(i); return string(b) }

// layer is one fragment of an instance spec: the built-in defaults, a profile, the cluster
// template, an instance's overrides or a standalone instance's own fields.
type layer struct {
	source string
	// profile is set for profile layers: equal priorities are checked for conflicts.
	profile  *v1alpha1.TiledProfile
	priority int32
	// obj is the layer as an unstructured TiledInstance ({apiVersion, kind, spec}).
	obj map[string]any
	// exprs are the expressions of the layer, in the order visit meets them.
	exprs []*exprUse
	// static is the layer's material when it has no expressions, computed once.
	static *material

	// For a layer with expressions: base is the layer without its expression fields; shape is its
	// material with placeholders for the computed values, whose field set, exclusive members and
	// computed paths are those of every instance; targets are the fields computed, aligned with exprs.
	base    *typed.TypedValue
	shape   *material
	targets []exprTarget
}

// exprTarget is a field that an expression of a layer computes.
type exprTarget struct {
	// path of the computed field, e.g. spec.storage.data.nfs.path, and of the expression field, rendered.
	path  fieldpath.Path
	field string
}

// typedBase is what the layer contributes to every instance before its expressions are evaluated.
func (l *layer) typedBase() *typed.TypedValue {
	if l.static != nil {
		return l.static.tv
	}
	return l.base
}

// layout is the structure of the layer as merged: field set, exclusive members, computed paths.
func (l *layer) layout() *material {
	if l.static != nil {
		return l.static
	}
	return l.shape
}

// choice is the member of an exclusive group that a layer sets.
type choice struct {
	parent fieldpath.Path
	member string
	group  []string
}

type exprUse struct {
	src  string
	prog *program
}

// material is a layer made concrete for one instance: expressions evaluated, converted to a typed
// value with the CRD's schema.
type material struct {
	source string
	obj    map[string]any
	tv     *typed.TypedValue
	fs     *fieldpath.Set
	// members maps the rendered path of each exclusive group the layer sets a member of to that
	// member.
	members map[string]choice
	// computed holds the rendered paths of the fields the layer's expressions computed.
	computed map[string]bool
	// sources give the provenance of some fields in place of source (Builtins.Sources).
	sources map[string]string
}

// engine holds what one Expand call shares across its instances.
type engine struct {
	info     *schemaInfo
	compiler *compiler
	// unions are info.unions without expression fields (which never reach a merge) and without
	// groups left with fewer than two members.
	unions []unionSite
	// conflicts caches the conflict check of two expression-free profiles.
	conflicts map[[2]string]error
	// bases caches the merge of the expression-free parts of a stack of shared layers, by their
	// sources.
	bases map[string]*typed.TypedValue
	// stacks caches what the instances of one stack of layers share, by the layers' sources.
	stacks map[string]*stackInfo
}

func newEngine() (*engine, error) {
	info, err := loadSchema()
	if err != nil {
		return nil, err
	}
	c, err := newCompiler()
	if err != nil {
		return nil, err
	}
	e := &engine{info: info, compiler: c, conflicts: map[[2]string]error{}, bases: map[string]*typed.TypedValue{},
		stacks: map[string]*stackInfo{}}
	exprFields := map[string]bool{}
	for _, s := range info.expressions {
		exprFields[s.parent+"."+s.field] = true
	}
	for _, u := range info.unions {
		var members []string
		for _, m := range u.members {
			if !exprFields[u.parent+"."+m] {
				members = append(members, m)
			}
		}
		if len(members) > 1 {
			e.unions = append(e.unions, unionSite{parent: u.parent, members: members})
		}
	}
	return e, nil
}

// newLayer converts a template (InstanceTemplate, or TiledInstanceSpec for a standalone instance)
// to an unstructured layer, checks its exclusive groups, compiles its expressions and, when it has
// none, materializes it once.
func (e *engine) newLayer(source string, template any) (*layer, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(template)
	if err != nil {
		return nil, &InvalidFieldError{Layer: source, Field: "spec", Reason: err.Error()}
	}
	return e.newLayerFromMap(source, spec)
}

// builtinsLayer is the lowest layer: the built-in defaults, with their own provenance for the fields
// the operator's configuration set (Builtins.Sources).
func (e *engine) builtinsLayer(b *Builtins) (*layer, error) {
	l, err := e.newLayer(SourceDefault, &b.Defaults)
	if err != nil || len(b.Sources) == 0 {
		return l, err
	}
	if l.static == nil {
		return nil, &InvalidFieldError{Layer: SourceDefault, Field: "spec", Reason: "the built-in defaults hold an expression"}
	}
	l.static.sources = b.Sources
	return l, nil
}

func (e *engine) newLayerFromMap(source string, spec map[string]any) (*layer, error) {
	l := &layer{source: source, obj: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "TiledInstance",
		"spec":       spec,
	}}
	// Exclusive groups, expressions included, must hold within one layer: the CRD's rules reject
	// such an object, and a file read offline has not been through them.
	var err error
	for _, u := range e.info.unions {
		visit(l.obj, u.parent, e.info.listKeys, func(s site) {
			var present []string
			for _, m := range u.members {
				if _, ok := s.obj[m]; ok {
					present = append(present, m)
				}
			}
			if len(present) > 1 && err == nil {
				err = &InvalidFieldError{Layer: source, Field: renderPath(s.path),
					Reason: strings.Join(present, " and ") + " are mutually exclusive"}
			}
		})
	}
	if err != nil {
		return nil, err
	}
	for _, x := range e.info.expressions {
		visit(l.obj, x.parent, e.info.listKeys, func(s site) {
			raw, ok := s.obj[x.field]
			if !ok || err != nil {
				return
			}
			src, _ := raw.(string)
			prog, cerr := e.compiler.compile(src, x.targetType)
			if cerr != nil {
				var xe *ExpressionError
				if errors.As(cerr, &xe) {
					xe := *xe
					xe.Layer, xe.Field = source, renderPath(childPath(s.path, x.field))
					err = &xe
				} else {
					err = cerr
				}
				return
			}
			l.exprs = append(l.exprs, &exprUse{src: src, prog: prog})
			l.targets = append(l.targets, exprTarget{path: childPath(s.path, x.target), field: renderPath(childPath(s.path, x.field))})
		})
	}
	if err != nil {
		return nil, err
	}
	if len(l.exprs) == 0 {
		if l.static, err = e.materialize(l, l.obj, nil); err != nil {
			return nil, err
		}
		return l, nil
	}
	// The layer without its expressions, and with placeholders in their stead.
	base, shape := runtime.DeepCopyJSON(l.obj), runtime.DeepCopyJSON(l.obj)
	computed := make(map[string]bool, len(l.exprs))
	for _, x := range e.info.expressions {
		placeholder := zeroOf(x.targetType)
		visit(base, x.parent, e.info.listKeys, func(s site) { delete(s.obj, x.field) })
		visit(shape, x.parent, e.info.listKeys, func(s site) {
			if _, ok := s.obj[x.field]; ok {
				delete(s.obj, x.field)
				s.obj[x.target] = placeholder
				computed[renderPath(childPath(s.path, x.target))] = true
			}
		})
	}
	bm, err := e.materialize(l, base, nil)
	if err != nil {
		return nil, err
	}
	l.base = bm.tv
	if l.shape, err = e.materialize(l, shape, computed); err != nil {
		return nil, err
	}
	return l, nil
}

func zeroOf(openAPIType string) any {
	switch openAPIType {
	case "integer":
		return int64(0)
	case "number":
		return float64(0)
	case "boolean":
		return false
	}
	return ""
}

// setPath sets the value at path in an unstructured object, creating the objects and keyed list
// items on the way (a keyed list item is created with its key fields).
func setPath(root map[string]any, path fieldpath.Path, v any) {
	cur := root
	for i := 0; i < len(path); i++ {
		name := *path[i].FieldName
		if i == len(path)-1 {
			cur[name] = v
			return
		}
		if key := path[i+1].Key; key != nil {
			items, _ := cur[name].([]any)
			var item map[string]any
			for _, it := range items {
				if m, ok := it.(map[string]any); ok && keyMatches(m, *key) {
					item = m
					break
				}
			}
			if item == nil {
				item = make(map[string]any, len(*key)+1)
				for _, f := range *key {
					item[f.Name] = f.Value.Unstructured()
				}
				cur[name] = append(items, item)
			}
			cur = item
			i++
			continue
		}
		next, ok := cur[name].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[name] = next
		}
		cur = next
	}
}

func keyMatches(m map[string]any, key value.FieldList) bool {
	for _, f := range key {
		if !value.Equals(value.NewValueInterface(m[f.Name]), f.Value) {
			return false
		}
	}
	return true
}

// instantiate returns the layer's material for one instance, evaluating its expressions.
func (e *engine) instantiate(l *layer, ctx *exprContext) (*material, error) {
	if l.static != nil {
		return l.static, nil
	}
	obj := runtime.DeepCopyJSON(l.obj)
	computed := make(map[string]bool, len(l.exprs))
	k := 0
	var err error
	for _, x := range e.info.expressions {
		visit(obj, x.parent, e.info.listKeys, func(s site) {
			if _, ok := s.obj[x.field]; !ok || err != nil {
				return
			}
			use := l.exprs[k]
			k++
			v, eerr := use.prog.eval(use.src, ctx)
			if eerr != nil {
				var src *ExpressionError
				if !errors.As(eerr, &src) {
					err = eerr
					return
				}
				xe := *src
				xe.Layer, xe.Field = l.source, renderPath(childPath(s.path, x.field))
				err = &xe
				return
			}
			delete(s.obj, x.field)
			s.obj[x.target] = v
			computed[renderPath(childPath(s.path, x.target))] = true
		})
	}
	if err != nil {
		return nil, err
	}
	return e.materialize(l, obj, computed)
}

// materialize converts an evaluated layer to a typed value and derives its field set and the
// members of exclusive groups it sets.
func (e *engine) materialize(l *layer, obj map[string]any, computed map[string]bool) (*material, error) {
	tv, err := e.info.converter.ObjectToTyped(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return nil, schemaError(l.source, err)
	}
	fs, err := tv.ToFieldSet()
	if err != nil {
		return nil, schemaError(l.source, err)
	}
	m := &material{source: l.source, obj: obj, tv: tv, fs: fs, computed: computed}
	for _, u := range e.unions {
		visit(obj, u.parent, e.info.listKeys, func(s site) {
			for _, member := range u.members {
				if _, ok := s.obj[member]; ok {
					if m.members == nil {
						m.members = map[string]choice{}
					}
					m.members[renderPath(s.path)] = choice{parent: s.path, member: member, group: u.members}
					return
				}
			}
		})
	}
	return m, nil
}

// schemaError turns the validation errors of a conversion with the CRD's schema into an
// *UnknownFieldError or an *InvalidFieldError naming the layer and the first field, by path.
func schemaError(source string, err error) error {
	var verrs typed.ValidationErrors
	if !errors.As(err, &verrs) || len(verrs) == 0 {
		return &InvalidFieldError{Layer: source, Field: "spec", Reason: err.Error()}
	}
	sort.SliceStable(verrs, func(i, j int) bool { return verrs[i].Path < verrs[j].Path })
	v := verrs[0]
	field := smdPathToField(v.Path)
	if strings.Contains(v.ErrorMessage, "field not declared in schema") {
		return &UnknownFieldError{Layer: source, Field: field}
	}
	return &InvalidFieldError{Layer: source, Field: field, Reason: v.ErrorMessage}
}

// smdPathToField rewrites a path as SMD prints it (.spec.tiled.env[name="A"].value) in the
// provenance format (spec.tiled.env[name=A].value).
func smdPathToField(p string) string {
	p = strings.TrimPrefix(p, ".")
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '"' {
			// A quoted key value: drop the quotes when the value needs none.
			j := i + 1
			for j < len(p) && p[j] != '"' {
				if p[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(p) {
				b.WriteString(p[i:])
				break
			}
			q := p[i : j+1]
			var s string
			if json.Unmarshal([]byte(q), &s) == nil && !strings.ContainsAny(s, "[],=\"") {
				b.WriteString(s)
			} else {
				b.WriteString(q)
			}
			i = j
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
