package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/profiles"
)

// Field managers of the dry runs: the operator's own for the instances (as its controller applies
// them), kubectl's for the changed files.
const (
	operatorFieldManager = v1alpha1.FieldOwner
	kubectlFieldManager  = "kubectl"
)

type diffOptions struct {
	*options
	input      inputOptions
	printFlags *genericclioptions.PrintFlags
}

func newDiffCommand(opts *options) *cobra.Command {
	o := &diffOptions{options: opts, printFlags: newPrintFlags()}
	*o.printFlags.OutputFormat = ""
	cmd := &cobra.Command{
		Use:   "diff (-f FILENAME | -k DIRECTORY)",
		Short: "Show what changed TiledProfiles or TiledClusters would do to every TiledInstance",
		Long: `Show, for TiledProfiles and TiledClusters changed in files, what would change on each TiledInstance
they affect, against the cluster of the current kubeconfig. Nothing is stored:

 1. each object of the files replaces the live one (or is created) in a server-side dry run: the
    API server's validation and the operator's webhooks run, and refuse it as they would;
 2. the clusters that select a changed profile (with its old or new labels) and the changed clusters
    are expanded with the live profiles, the changed ones in place, and so are the standalone
    instances that select a changed profile;
 3. each expanded instance is applied with a server-side dry run as the operator would apply it,
    and compared with the live one.

Each instance is listed with its changed fields (value and source before and after), "created" or
"deleted". A field whose source changed but not its value (a profile's generation) is counted.
Documents of other kinds are skipped with a note. With -o yaml, json or name, the instances that
would be created or changed are printed instead, as they would be stored (as by expand -o), and
those that would be deleted are named on standard error.

Exit status, as kubectl diff's: 0 when no instance would change, 1 when some would, 2 (more than
1) on an error, a refusal included.`,
		Example: `  # What would bumping the facility profile's image do to the beamlines?
  kubectl tiled diff -f profiles/facility.yaml

  # And adding a beamline to the cluster?
  kubectl tiled diff -f cluster.yaml -n nsls2

  # What a GitOps overlay would change
  kubectl tiled diff -k overlays/production`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.input.validate(cmd); err != nil {
				return err
			}
			if *o.printFlags.OutputFormat != "" {
				if _, err := o.printFlags.ToPrinter(); err != nil {
					return usageErrorf(cmd, "%v", err)
				}
			}
			changed, err := o.run(cmd.Context())
			if err != nil {
				return err
			}
			if changed {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	o.input.addFlags(cmd, "the changed TiledProfiles and TiledClusters")
	addPrintFlags(cmd, o.printFlags)
	cmd.Flag("output").Usage = "Print the instances that would be created or changed instead of the changes. One of: (yaml, json, name)."
	return cmd
}

// change is what a diff found for one instance.
type change struct {
	namespace, name, owner string
	after                  *v1alpha1.TiledInstance // as it would be stored; nil when deleted
	created, deleted       bool
	fields                 []fieldChange
	sourceOnly             int
}

type fieldChange struct {
	path                   string
	before, after          string
	sourceBefore, sourceAf string
}

// run prints the changes and reports whether there are any.
func (o *diffOptions) run(ctx context.Context) (bool, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	namespace, explicit, err := namespaceOf(o.config)
	if err != nil {
		return false, err
	}
	// The server-side dry run checks the schema.
	objs, err := o.input.read(readOptions{in: o.streams.In, notes: o.streams.ErrOut, namespace: namespace, enforce: explicit, unchecked: true})
	if err != nil {
		return false, err
	}
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return false, err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return false, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return false, err
	}

	// 1. The changed objects, as the API server would store them.
	var changedProfiles []*v1alpha1.TiledProfile
	var changedClusters []*v1alpha1.TiledCluster
	for _, obj := range objs {
		stored, err := dryRunReplace(ctx, c, obj, namespace)
		if err != nil {
			return false, err
		}
		switch s := stored.(type) {
		case *v1alpha1.TiledProfile:
			changedProfiles = append(changedProfiles, s)
		case *v1alpha1.TiledCluster:
			changedClusters = append(changedClusters, s)
		default:
			return false, fmt.Errorf("%s %s/%s: diff takes TiledProfiles and TiledClusters", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName())
		}
	}
	if len(changedProfiles)+len(changedClusters) == 0 {
		return false, fmt.Errorf("no TiledProfile or TiledCluster in %s", o.input.describe())
	}

	// 2. Expand what they affect, namespace by namespace.
	namespaces := map[string]bool{}
	for _, p := range changedProfiles {
		namespaces[p.Namespace] = true
	}
	for _, cl := range changedClusters {
		namespaces[cl.Namespace] = true
	}
	var changes []change
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		cs, err := o.diffNamespace(ctx, c, ns, changedProfiles, changedClusters)
		if err != nil {
			return false, err
		}
		changes = append(changes, cs...)
	}
	if err := o.print(changes); err != nil {
		return false, err
	}
	for _, ch := range changes {
		if ch.created || ch.deleted || len(ch.fields) > 0 || ch.sourceOnly > 0 {
			return true, nil
		}
	}
	return false, nil
}

func (o *diffOptions) diffNamespace(ctx context.Context, c client.Client, ns string, changedProfiles []*v1alpha1.TiledProfile, changedClusters []*v1alpha1.TiledCluster) ([]change, error) {
	var liveProfiles v1alpha1.TiledProfileList
	var liveClusters v1alpha1.TiledClusterList
	var liveInstances v1alpha1.TiledInstanceList
	for _, l := range []client.ObjectList{&liveProfiles, &liveClusters, &liveInstances} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
	}
	candidates := slices.Clone(liveProfiles.Items)
	clusters := slices.Clone(liveClusters.Items)
	affectedClusters := map[types.NamespacedName]bool{}
	affectedInstances := map[types.NamespacedName]bool{}
	for _, p := range changedProfiles {
		if p.Namespace != ns {
			continue
		}
		var old *v1alpha1.TiledProfile
		i := slices.IndexFunc(candidates, func(q v1alpha1.TiledProfile) bool { return q.Name == p.Name })
		if i >= 0 {
			old = candidates[i].DeepCopy()
			candidates[i] = *p
		} else {
			candidates = append(candidates, *p)
		}
		cs, is := profiles.Affected(old, p, clusters, liveInstances.Items)
		for _, k := range cs {
			affectedClusters[k] = true
		}
		for _, k := range is {
			affectedInstances[k] = true
		}
	}
	for _, cl := range changedClusters {
		if cl.Namespace != ns {
			continue
		}
		i := slices.IndexFunc(clusters, func(q v1alpha1.TiledCluster) bool { return q.Name == cl.Name })
		if i >= 0 {
			clusters[i] = *cl
		} else {
			clusters = append(clusters, *cl)
		}
		affectedClusters[types.NamespacedName{Namespace: ns, Name: cl.Name}] = true
	}

	var out []change
	for _, key := range slices.SortedFunc(maps.Keys(affectedClusters), func(a, b types.NamespacedName) int { return strings.Compare(a.Name, b.Name) }) {
		i := slices.IndexFunc(clusters, func(q v1alpha1.TiledCluster) bool { return q.Name == key.Name })
		if i < 0 {
			continue
		}
		cl := &clusters[i]
		res, err := expansion.Expand(cl, candidates, expansion.DefaultBuiltins())
		if err != nil {
			return nil, fmt.Errorf("TiledCluster %s/%s would not expand: %w", ns, cl.Name, err)
		}
		live := map[string]*v1alpha1.TiledInstance{}
		for j := range liveInstances.Items {
			in := &liveInstances.Items[j]
			if in.Labels[v1alpha1.LabelCluster] == names.LabelValue(cl.Name) {
				live[in.Name] = in
			}
		}
		for _, desired := range res.Objects() {
			after, err := dryRunApply(ctx, c, desired, ns, operatorFieldManager)
			if err != nil {
				return nil, err
			}
			ch := compare(live[desired.Name], after.(*v1alpha1.TiledInstance))
			ch.owner = "cluster " + cl.Name
			out = append(out, ch)
			delete(live, desired.Name)
		}
		for _, name := range slices.Sorted(maps.Keys(live)) {
			out = append(out, change{namespace: ns, name: name, owner: "cluster " + cl.Name, deleted: true})
		}
	}
	for _, key := range slices.SortedFunc(maps.Keys(affectedInstances), func(a, b types.NamespacedName) int { return strings.Compare(a.Name, b.Name) }) {
		i := slices.IndexFunc(liveInstances.Items, func(q v1alpha1.TiledInstance) bool { return q.Name == key.Name })
		live := &liveInstances.Items[i]
		desired, err := expansion.Reexpand(live, nil, candidates, expansion.DefaultBuiltins())
		if err != nil {
			return nil, fmt.Errorf("TiledInstance %s/%s would not expand: %w", ns, live.Name, err)
		}
		ch := compare(live, desired)
		ch.owner = "standalone"
		out = append(out, ch)
	}
	return out, nil
}

// dryRunReplace stores obj in place of the live object (or creates it) with a server-side dry run,
// and returns what the API server would store: the file is taken as the whole object, as a GitOps
// tool converges to it (kubectl replace; an apply differs only where other managers own fields).
func dryRunReplace(ctx context.Context, c client.Client, obj runtime.Object, namespace string) (runtime.Object, error) {
	u, err := toApplyable(obj, namespace)
	if err != nil {
		return nil, err
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	err = c.Get(ctx, client.ObjectKeyFromObject(u), live)
	switch {
	case apierrors.IsNotFound(err):
		err = c.Create(ctx, u, client.DryRunAll, client.FieldOwner(kubectlFieldManager))
	case err == nil:
		u.SetResourceVersion(live.GetResourceVersion())
		if st, ok := live.Object["status"]; ok {
			u.Object["status"] = st
		}
		err = c.Update(ctx, u, client.DryRunAll, client.FieldOwner(kubectlFieldManager))
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: server-side dry run: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return typedFrom(u)
}

func toApplyable(obj runtime.Object, namespace string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "metadata", "generation")
	unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(u.Object, "metadata", "uid")
	if u.GetNamespace() == "" {
		u.SetNamespace(namespace)
	}
	return u, nil
}

// dryRunApply applies obj with a server-side dry run under manager, forcing ownership, as the
// operator applies its instances, and returns what the API server would store.
func dryRunApply(ctx context.Context, c client.Client, obj runtime.Object, namespace, manager string) (runtime.Object, error) {
	u, err := toApplyable(obj, namespace)
	if err != nil {
		return nil, err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.DryRunAll, client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("%s %s/%s: server-side dry run: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return typedFrom(u)
}

func typedFrom(u *unstructured.Unstructured) (runtime.Object, error) {
	var typed runtime.Object
	switch u.GetKind() {
	case "TiledProfile":
		typed = &v1alpha1.TiledProfile{}
	case "TiledCluster":
		typed = &v1alpha1.TiledCluster{}
	case "TiledInstance":
		typed = &v1alpha1.TiledInstance{}
	default:
		return nil, fmt.Errorf("%s %s: not a kind of tiled-operator", u.GetKind(), u.GetName())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, err
	}
	return typed, nil
}

// print prints the changes: the report, or with -o the instances that would be created or changed.
func (o *diffOptions) print(changes []change) error {
	format := *o.printFlags.OutputFormat
	if format == "" {
		printChanges(o.streams.Out, changes)
		return nil
	}
	printer, err := o.printFlags.ToPrinter()
	if err != nil {
		return err
	}
	var objs []*v1alpha1.TiledInstance
	for _, ch := range changes {
		switch {
		case ch.deleted:
			fmt.Fprintf(o.streams.ErrOut, "TiledInstance %s/%s (%s): deleted\n", ch.namespace, ch.name, ch.owner)
		case ch.created || len(ch.fields) > 0 || ch.sourceOnly > 0:
			objs = append(objs, ch.after)
		}
	}
	return printInstances(o.streams.Out, printer, format, objs)
}

// compare lists the leaf fields of the spec that differ between the live instance (nil: none) and
// the one that would be stored.
func compare(live, after *v1alpha1.TiledInstance) change {
	ch := change{namespace: after.Namespace, name: after.Name, after: after}
	if live == nil {
		ch.created = true
		return ch
	}
	// An instance whose spec is empty has no leaves (Why reports that as an error).
	leaves := func(o *v1alpha1.TiledInstance) map[string]expansion.FieldSource {
		m := map[string]expansion.FieldSource{}
		fs, _ := expansion.Why(o, "spec")
		for _, f := range fs {
			m[f.Path] = f
		}
		return m
	}
	before, now := leaves(live), leaves(after)
	paths := slices.Sorted(maps.Keys(before))
	for p := range now {
		if _, ok := before[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		b, inBefore := before[p]
		a, inAfter := now[p]
		switch {
		case inBefore && inAfter && b.Value == a.Value:
			if b.Source != a.Source {
				ch.sourceOnly++
			}
		default:
			ch.fields = append(ch.fields, fieldChange{path: p, before: b.Value, after: a.Value,
				sourceBefore: b.Source, sourceAf: a.Source})
		}
	}
	return ch
}

func printChanges(w io.Writer, changes []change) {
	for _, ch := range changes {
		head := fmt.Sprintf("TiledInstance %s/%s (%s)", ch.namespace, ch.name, ch.owner)
		switch {
		case ch.created:
			fmt.Fprintf(w, "%s: created\n", head)
			continue
		case ch.deleted:
			fmt.Fprintf(w, "%s: deleted\n", head)
			continue
		case len(ch.fields) == 0 && ch.sourceOnly == 0:
			fmt.Fprintf(w, "%s: no change\n", head)
			continue
		}
		fmt.Fprintf(w, "%s: %d field(s) changed\n", head, len(ch.fields))
		for _, f := range ch.fields {
			switch {
			case f.before == "":
				fmt.Fprintf(w, "  + %s: %s  (%s)\n", f.path, f.after, f.sourceAf)
			case f.after == "":
				fmt.Fprintf(w, "  - %s: %s  (%s)\n", f.path, f.before, f.sourceBefore)
			default:
				src := f.sourceAf
				if f.sourceBefore != f.sourceAf {
					src = f.sourceBefore + " -> " + f.sourceAf
				}
				fmt.Fprintf(w, "  ~ %s: %s -> %s  (%s)\n", f.path, f.before, f.after, src)
			}
		}
		if ch.sourceOnly > 0 {
			fmt.Fprintf(w, "  (%d more field(s) keep their value but change source)\n", ch.sourceOnly)
		}
	}
}
