package expansion

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/profiles"
)

// Result is the expansion of a TiledCluster.
type Result struct {
	// BuiltinsVersion is the version of the built-in defaults used.
	BuiltinsVersion string
	// Profiles are the profiles some instance used, by (priority, name), as the cluster's status
	// records them.
	Profiles []v1alpha1.SelectedProfile
	// Instances are the expanded instances, ordered by instance name.
	Instances []Instance
}

// Instance is one expanded instance of a cluster.
type Instance struct {
	// Name is the instance's short name, as listed in the cluster (e.g. the beamline, chx).
	Name string
	// Profiles are the names of the profiles applied to the instance, in the order applied.
	Profiles []string
	// Object is the TiledInstance: apiVersion and kind; metadata with name, namespace and labels
	// (nothing else: owner references and the like are the controller's); the complete spec; and the
	// provenance of every leaf field of the spec.
	Object *v1alpha1.TiledInstance
}

// Expand expands a TiledCluster into the complete spec of each of its instances.
//
// candidates are the TiledProfiles of the cluster's namespace, in any order (profiles of other
// namespaces are ignored); Expand selects among them with the cluster's profileSelector and each
// instance's own profileSelector (see profiles.ForCluster). The layers, lowest to highest, are
// builtins, the instance's profiles by (priority, name), the cluster's template and the instance's
// overrides.
//
// Expand is pure and deterministic: no client, no clock, no dependence on the order of candidates or
// of map iteration; the same input gives byte-identical Marshal output. On error it returns no
// result at all, and the error is one of *SelectorError, *NoProfilesError, *ConflictError,
// *ExpressionError, *UnknownFieldError, *InvalidFieldError (a value of an expanded instance that
// the API server would refuse on its objects or that cannot run, or two instances whose objects
// would share a name) or *NotAllowedError (an NFS export, uid or gid that the instance's profiles
// do not allow; see checkAllowed).
func Expand(cluster *v1alpha1.TiledCluster, candidates []v1alpha1.TiledProfile, builtins Builtins) (*Result, error) {
	return expand(cluster, candidates, builtins, (*engine).expandOne, keepAll)
}

// ExpandEach is Expand, with each instance handed to each as soon as it is expanded and checked
// (before the next is expanded), and what each returns kept in the result in its place. A caller
// that needs less than every whole instance at once (admission: the warnings of each and the names
// of all; the cluster controller: the instances with their equal parts shared) reads or trims each
// as it comes, so that a thousand instances' own copies (some 15 MB) never pile up at once on a
// manager whose memory is otherwise its caches. What each returns must keep what ObjectNames reads
// (Names does): the instances' names are checked against each other after the last one.
func ExpandEach(cluster *v1alpha1.TiledCluster, candidates []v1alpha1.TiledProfile, builtins Builtins, each func(*v1alpha1.TiledInstance) *v1alpha1.TiledInstance) (*Result, error) {
	return expand(cluster, candidates, builtins, (*engine).expandOne, each)
}

// Check is the error Expand would return, without the result: what admission asks of a profile
// edit for every cluster that selects the profile. Each instance's expansion is let go once
// checked (ExpandEach with Names), so that checking a cluster of a thousand instances holds one
// expanded instance at a time, not a thousand.
func Check(cluster *v1alpha1.TiledCluster, candidates []v1alpha1.TiledProfile, builtins Builtins) error {
	_, err := ExpandEach(cluster, candidates, builtins, Names)
	return err
}

// keepFunc gives what expand keeps of an expanded instance.
type keepFunc func(*v1alpha1.TiledInstance) *v1alpha1.TiledInstance

// keepAll keeps the whole expanded instance (Expand).
func keepAll(ti *v1alpha1.TiledInstance) *v1alpha1.TiledInstance { return ti }

// Names is the part of an expanded instance that the names of its objects come from (ObjectNames:
// its name, namespace and read-only mounts) and its labels (collision errors name the instance by
// them), without its spec's other parts or its provenance.
func Names(ti *v1alpha1.TiledInstance) *v1alpha1.TiledInstance {
	out := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: ti.Name, Namespace: ti.Namespace, Labels: ti.Labels}}
	if s := ti.Spec.Storage; s != nil && len(s.ReadOnlyMounts) > 0 {
		out.Spec.Storage = &v1alpha1.StorageSpec{ReadOnlyMounts: s.ReadOnlyMounts}
	}
	return out
}

// expandFunc merges a stack of layers for one instance; the first shared layers are common to
// many instances.
type expandFunc func(e *engine, instance string, stack []*layer, shared int, ctx *exprContext) (*v1alpha1.TiledInstanceSpec, map[string]string, error)

func expand(cluster *v1alpha1.TiledCluster, candidates []v1alpha1.TiledProfile, builtins Builtins, one expandFunc, keep keepFunc) (*Result, error) {
	if cluster == nil {
		return nil, fmt.Errorf("expand: nil TiledCluster")
	}
	sel, err := profiles.ForCluster(cluster, candidates)
	if err != nil {
		return nil, err
	}
	e, err := newEngine()
	if err != nil {
		return nil, err
	}
	base, err := e.builtinsLayer(&builtins)
	if err != nil {
		return nil, err
	}
	profileLayers := make(map[string]*layer, len(sel.All))
	for _, p := range sel.All {
		if profileLayers[p.Name], err = e.newLayer(ProfileSource(p), &p.Spec.InstanceTemplate); err != nil {
			return nil, err
		}
		profileLayers[p.Name].profile = p
		profileLayers[p.Name].priority = p.Spec.Priority
	}
	var template *layer
	if cluster.Spec.Template != nil {
		if template, err = e.newLayer(SourceClusterTemplate, cluster.Spec.Template); err != nil {
			return nil, err
		}
	}

	res := &Result{BuiltinsVersion: builtins.Version}
	for _, p := range sel.All {
		res.Profiles = append(res.Profiles, v1alpha1.SelectedProfile{Name: p.Name, UID: p.UID, Generation: p.Generation, Priority: p.Spec.Priority})
	}
	items := slices.Clone(cluster.Spec.Instances)
	slices.SortStableFunc(items, func(a, b v1alpha1.ClusterInstance) int { return strings.Compare(a.Name, b.Name) })
	for i, item := range items {
		if i > 0 && items[i-1].Name == item.Name {
			return nil, &InvalidFieldError{Layer: "cluster/" + cluster.Name, Field: "spec.instances[name=" + item.Name + "]",
				Reason: "instance names must be unique"}
		}
	}
	res.Instances = make([]Instance, 0, len(items))
	for _, item := range items {
		name := names.Instance(cluster.Name, item.Name)
		lbls := make(map[string]string, len(item.Labels)+3)
		maps.Copy(lbls, item.Labels)
		lbls[v1alpha1.LabelCluster] = names.LabelValue(cluster.Name)
		lbls[v1alpha1.LabelInstance] = item.Name
		lbls[v1alpha1.LabelManagedBy] = v1alpha1.ManagedByValue
		ctx := newExprContext(item.Name, lbls, cluster.Name, cluster.Labels, cluster.Namespace)

		chosen := sel.Instances[item.Name]
		stack := make([]*layer, 0, len(chosen)+3)
		stack = append(stack, base)
		applied := make([]string, 0, len(chosen))
		for _, p := range chosen {
			stack = append(stack, profileLayers[p.Name])
			applied = append(applied, p.Name)
		}
		if template != nil {
			stack = append(stack, template)
		}
		if item.Overrides != nil {
			ov, err := e.newLayer(OverridesSource(item.Name), item.Overrides)
			if err != nil {
				return nil, err
			}
			stack = append(stack, ov)
		}
		shared := len(stack)
		if item.Overrides != nil {
			shared--
		}
		spec, prov, err := one(e, item.Name, stack, shared, ctx)
		if err != nil {
			return nil, err
		}
		if err := e.checkExpanded(item.Name, spec, prov, stack, ctx); err != nil {
			return nil, err
		}
		res.Instances = append(res.Instances, Instance{
			Name:     item.Name,
			Profiles: applied,
			Object: keep(&v1alpha1.TiledInstance{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledInstance"},
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster.Namespace, Labels: lbls},
				Spec:       *spec,
				Provenance: prov,
			}),
		})
	}
	if err := clusterCollision(cluster, res); err != nil {
		return nil, err
	}
	return res, nil
}

// ExpandInstance expands a standalone TiledInstance (one not stamped out by a TiledCluster), as the
// mutating webhook does at admission. Its own spec is the top layer (provenance source "instance"),
// over the profiles its spec.profileSelector selects among candidates (none without a selector) and
// builtins. Expressions see instance.name as the instance's tiled.blueskyproject.io/instance label,
// or its name without one; cluster.name as its tiled.blueskyproject.io/cluster label, or "";
// cluster.labels as {}.
//
// The returned object is a copy of instance with the expanded spec and provenance; status and
// metadata are kept as they were. Expanding the result again gives the same spec (idempotence).
func ExpandInstance(instance *v1alpha1.TiledInstance, candidates []v1alpha1.TiledProfile, builtins Builtins) (*v1alpha1.TiledInstance, error) {
	if instance == nil {
		return nil, fmt.Errorf("expand: nil TiledInstance")
	}
	chosen, err := profiles.ForInstance(instance, candidates)
	if err != nil {
		return nil, err
	}
	e, err := newEngine()
	if err != nil {
		return nil, err
	}
	stack := make([]*layer, 0, len(chosen)+2)
	base, err := e.builtinsLayer(&builtins)
	if err != nil {
		return nil, err
	}
	stack = append(stack, base)
	for _, p := range chosen {
		l, err := e.newLayer(ProfileSource(p), &p.Spec.InstanceTemplate)
		if err != nil {
			return nil, err
		}
		l.profile, l.priority = p, p.Spec.Priority
		stack = append(stack, l)
	}
	own, err := e.newLayer(SourceInstance, &instance.Spec)
	if err != nil {
		return nil, err
	}
	stack = append(stack, own)
	short := instance.Name
	if v := instance.Labels[v1alpha1.LabelInstance]; v != "" {
		short = v
	}
	ctx := newExprContext(short, instance.Labels, instance.Labels[v1alpha1.LabelCluster], nil, instance.Namespace)
	spec, prov, err := e.expandOne(short, stack, len(stack), ctx)
	if err != nil {
		return nil, err
	}
	if err := e.checkExpanded(short, spec, prov, stack, ctx); err != nil {
		return nil, err
	}
	out := instance.DeepCopy()
	out.Spec = *spec
	out.Provenance = prov
	return out, nil
}

// expandOne merges the stack of layers (lowest first) for one instance. The first shared layers
// are the same for many instances: their merge is computed once per Expand call.
//
// The result is that of merging every layer, expressions evaluated, in order; it is computed
// faster. Layers contribute their expression-free part (typedBase), merged in order; the values
// their expressions compute are then merged on top in one fragment, leaving out each value that a
// higher layer sets itself, so that precedence is the same. Field sets, exclusive members and
// computed paths do not depend on the instance and come from each layer's layout.
func (e *engine) expandOne(instance string, stack []*layer, shared int, ctx *exprContext) (*v1alpha1.TiledInstanceSpec, map[string]string, error) {
	layouts := make([]*material, len(stack))
	for i, l := range stack {
		layouts[i] = l.layout()
	}
	if err := e.checkConflicts(instance, stack, ctx); err != nil {
		return nil, nil, err
	}

	// The values of the expressions that no higher layer overrides, in one fragment.
	var frag map[string]any
	fragSource := ""
	for i, l := range stack {
		for k, tg := range l.targets {
			use := l.exprs[k]
			v, err := use.prog.eval(use.src, ctx)
			if err != nil {
				var src *ExpressionError
				if !errors.As(err, &src) {
					return nil, nil, err
				}
				xe := *src
				xe.Layer, xe.Field = l.source, tg.field
				return nil, nil, &xe
			}
			overridden := false
			for _, higher := range layouts[i+1:] {
				if higher.fs.Has(tg.path) {
					overridden = true
					break
				}
			}
			if overridden {
				continue
			}
			if frag == nil {
				frag = map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TiledInstance"}
			}
			setPath(frag, tg.path, v)
			fragSource = l.source
		}
	}

	acc, err := e.sharedBase(stack[:shared])
	if err != nil {
		return nil, nil, err
	}
	for _, l := range stack[shared:] {
		if acc, err = acc.Merge(l.typedBase()); err != nil {
			return nil, nil, schemaError(l.source, err)
		}
	}
	if frag != nil {
		tv, err := e.info.converter.ObjectToTyped(&unstructured.Unstructured{Object: frag})
		if err != nil {
			return nil, nil, schemaError(fragSource, err)
		}
		if acc, err = acc.Merge(tv); err != nil {
			return nil, nil, schemaError(fragSource, err)
		}
	}
	// The exclusive members to drop and the provenance depend on the structure of the layers only,
	// not on the values expressions compute: instances with the same stack share them.
	var key strings.Builder
	for _, l := range stack {
		key.WriteString(l.source)
		key.WriteByte(0)
	}
	st, ok := e.stacks[key.String()]
	if !ok {
		st = &stackInfo{drop: exclusiveLosers(layouts)}
	}
	if st.drop != nil {
		acc = acc.RemoveItems(st.drop)
	}
	if ok {
		spec, err := toSpec(acc, layouts)
		if err != nil {
			return nil, nil, err
		}
		return spec, maps.Clone(st.provenance), nil
	}
	spec, prov, err := e.finish(acc, layouts)
	if err != nil {
		return nil, nil, err
	}
	st.provenance = prov
	e.stacks[key.String()] = st
	return spec, maps.Clone(prov), nil
}

// stackInfo is what the instances of one stack of layers share.
type stackInfo struct {
	drop       *fieldpath.Set
	provenance map[string]string
}

// sharedBase merges the expression-free parts of the shared layers, once per stack.
func (e *engine) sharedBase(stack []*layer) (*typed.TypedValue, error) {
	var key strings.Builder
	for _, l := range stack {
		key.WriteString(l.source)
		key.WriteByte(0)
	}
	if tv, ok := e.bases[key.String()]; ok {
		return tv, nil
	}
	acc := stack[0].typedBase()
	for _, l := range stack[1:] {
		merged, err := acc.Merge(l.typedBase())
		if err != nil {
			return nil, schemaError(l.source, err)
		}
		acc = merged
	}
	e.bases[key.String()] = acc
	return acc, nil
}

// exclusiveLosers returns the members of exclusive groups to drop: the highest layer that sets a
// member of a group chooses it, and the other members are dropped, whichever layers set them. The
// chosen member keeps what every layer set in it, so switching back to a member restores its
// defaults. Only members some layer sets are returned; nil when there are none.
func exclusiveLosers(layouts []*material) *fieldpath.Set {
	var drop *fieldpath.Set
	decided := map[string]bool{}
	for i := len(layouts) - 1; i >= 0; i-- {
		for _, key := range slices.Sorted(maps.Keys(layouts[i].members)) {
			if decided[key] {
				continue
			}
			decided[key] = true
			c := layouts[i].members[key]
			for _, other := range c.group {
				if other != c.member && setByAny(layouts, childPath(c.parent, other)) {
					if drop == nil {
						drop = fieldpath.NewSet()
					}
					drop.Insert(childPath(c.parent, other))
				}
			}
		}
	}
	return drop
}

func setByAny(layouts []*material, path fieldpath.Path) bool {
	for _, l := range layouts {
		if l.fs.Has(path) || hasPrefix(l.fs, path) {
			return true
		}
	}
	return false
}

// finish derives the provenance of the merged value and converts it to a spec.
func (e *engine) finish(acc *typed.TypedValue, layouts []*material) (*v1alpha1.TiledInstanceSpec, map[string]string, error) {
	fs, err := acc.ToFieldSet()
	if err != nil {
		return nil, nil, schemaError(layouts[len(layouts)-1].source, err)
	}
	prov := provenance(fs.Leaves(), layouts)
	spec, err := toSpec(acc, layouts)
	if err != nil {
		return nil, nil, err
	}
	return spec, prov, nil
}

// toSpec converts the merged value to a TiledInstanceSpec.
func toSpec(acc *typed.TypedValue, layouts []*material) (*v1alpha1.TiledInstanceSpec, error) {
	obj, _ := acc.AsValue().Unstructured().(map[string]any)
	specMap, _ := obj["spec"].(map[string]any)
	spec := &v1alpha1.TiledInstanceSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(specMap, spec); err != nil {
		return nil, &InvalidFieldError{Layer: layouts[len(layouts)-1].source, Field: "spec", Reason: err.Error()}
	}
	return spec, nil
}

// provenance maps every leaf of the spec to the highest layer whose field set holds it.
func provenance(leaves *fieldpath.Set, mats []*material) map[string]string {
	prov := make(map[string]string, leaves.Size())
	leaves.Iterate(func(p fieldpath.Path) {
		if len(p) == 0 || p[0].FieldName == nil || *p[0].FieldName != "spec" {
			return
		}
		owner := -1
		for i := len(mats) - 1; i >= 0 && owner < 0; i-- {
			if mats[i].fs.Has(p) {
				owner = i
			}
		}
		// A leaf no layer names itself (an object emptied by the removal of an exclusive member)
		// belongs to the highest layer that set something beneath its parent.
		for q := p; owner < 0 && len(q) > 1; q = q[:len(q)-1] {
			for i := len(mats) - 1; i >= 0 && owner < 0; i-- {
				if hasPrefix(mats[i].fs, q[:len(q)-1]) {
					owner = i
				}
			}
		}
		if owner < 0 {
			owner = 0
		}
		rendered := renderPath(p)
		src := mats[owner].source
		if s, ok := mats[owner].sources[rendered]; ok {
			src = s
		}
		if mats[owner].computed[rendered] {
			src += ExpressionSuffix
		}
		prov[rendered] = src
	})
	return prov
}

func hasPrefix(s *fieldpath.Set, prefix fieldpath.Path) bool {
	for _, pe := range prefix {
		s = s.WithPrefix(pe)
		if s.Empty() {
			return false
		}
	}
	return true
}

// checkConflicts reports two profiles of equal priority that set one field differently, or pick
// different members of an exclusive group.
func (e *engine) checkConflicts(instance string, stack []*layer, ctx *exprContext) error {
	for i := range stack {
		if stack[i].profile == nil {
			continue
		}
		for j := i + 1; j < len(stack) && stack[j].profile != nil && stack[j].priority == stack[i].priority; j++ {
			static := stack[i].static != nil && stack[j].static != nil
			key := [2]string{stack[i].source, stack[j].source}
			if static {
				if err, ok := e.conflicts[key]; ok {
					var src *ConflictError
					if errors.As(err, &src) {
						c := *src
						c.Instance = instance
						return &c
					} else if err != nil {
						return err
					}
					continue
				}
			}
			a, err := e.instantiate(stack[i], ctx)
			if err != nil {
				return err
			}
			b, err := e.instantiate(stack[j], ctx)
			if err != nil {
				return err
			}
			cerr := conflict(a, b, stack[i].priority)
			if static {
				// A nil *ConflictError must be stored as a nil error, or the cache hit above
				// dereferences it.
				e.conflicts[key] = nil
				if cerr != nil {
					e.conflicts[key] = cerr
				}
			}
			if cerr != nil {
				cerr.Instance = instance
				return cerr
			}
		}
	}
	return nil
}

func conflict(a, b *material, priority int32) *ConflictError {
	mk := func(field, va, vb string) *ConflictError {
		return &ConflictError{Field: field, Profiles: [2]string{a.source, b.source}, Priority: priority, Values: [2]string{va, vb}}
	}
	var found []string
	values := map[string][2]string{}
	if both := a.fs.Intersection(b.fs); !both.Empty() {
		ea, eb := a.tv.ExtractItems(both), b.tv.ExtractItems(both)
		cmp, err := ea.Compare(eb)
		if err != nil {
			return mk("spec", err.Error(), "")
		}
		cmp.Modified.Intersection(both).Iterate(func(p fieldpath.Path) {
			r := renderPath(p)
			va := lookup(a.obj, p)
			vb := lookup(b.obj, p)
			found = append(found, r)
			values[r] = [2]string{jsonString(va), jsonString(vb)}
		})
	}
	for parent, ma := range a.members {
		if mb, ok := b.members[parent]; ok && ma.member != mb.member {
			found = append(found, parent)
			values[parent] = [2]string{ma.member, mb.member}
		}
	}
	if len(found) == 0 {
		return nil
	}
	slices.Sort(found)
	v := values[found[0]]
	return mk(found[0], v[0], v[1])
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
