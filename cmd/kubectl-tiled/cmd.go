package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
)

// usageError is an error in how the command was called; it earns a hint to run -h.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string { return e.err.Error() }

func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd.CommandPath(), err: fmt.Errorf(format, args...)}
}

// exitError carries an exit status other than 1 (diff's, as kubectl diff's).
type exitError struct {
	code int
	err  error // nil: nothing to print
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// run executes the plugin with args and returns the exit status: 0, or 1 on an error, except for
// diff, which follows kubectl diff (0 no differences, 1 differences, 2 an error).
func run(args []string, streams genericiooptions.IOStreams) int {
	root := newRootCommand(streams)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	code := 1
	if cmd != nil && cmd.Name() == "diff" {
		code = 2
	}
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			return code
		}
	}
	fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(streams.ErrOut, "See '%s -h' for help and examples.\n", ue.cmd)
	}
	return code
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{streams: streams, config: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use: "tiled",
		// Run by kubectl as a plugin, the command is called "kubectl tiled" in messages.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl tiled"},
		Short:       "Audit tiled-operator fleets: expand clusters and trace where every field comes from",
		Long: `kubectl tiled expands TiledClusters and TiledProfiles read from files into the TiledInstances
the tiled-operator would create, with the same engine and the same admission checks, explains where
each field comes from, shows what a change would do to the instances of a live cluster, and turns
the values of the Tiled Helm chart into a profile and a cluster.

expand, why and import-helm work offline; diff reads the cluster of the current kubeconfig (and
stores nothing); backup takes a backup of a live instance's databases now (a Job from its backup
CronJob) and backups lists the backups it has; restore restores a serving instance's databases from
one of them, in place (--dry-run shows what it would replace); approve approves a change that waits for a
person (spec.maintenance.approval Manual); status shows how a live cluster or instance is
doing (conditions, rollout, instances, pods, Warning events). -n/--namespace means the same in every command:
the namespace of the objects that name none, and of the instance backup, backups and restore name
(default: the kubeconfig context's, else "default").`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf(cmd, "a command is required: expand, why, diff, import-helm, backup, backups, restore, approve, status, completion or version")
		},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetIn(streams.In)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd.CommandPath(), err: err} })
	root.CompletionOptions.DisableDefaultCmd = true
	o.config.AddFlags(root.PersistentFlags())
	root.AddCommand(newExpandCommand(o), newWhyCommand(o), newDiffCommand(o), newImportHelmCommand(o),
		newBackupCommand(o), newBackupsCommand(o), newRestoreCommand(o), newApproveCommand(o), newStatusCommand(o), newCompletionCommand(o), newVersionCommand(o))
	return root
}

// options are what every subcommand shares: kubectl's kubeconfig flags (-n and --kubeconfig above
// all), so that -n means the same everywhere.
type options struct {
	streams genericiooptions.IOStreams
	config  *genericclioptions.ConfigFlags
}

func newExpandCommand(o *options) *cobra.Command {
	in := &inputOptions{}
	printFlags := newPrintFlags()
	cmd := &cobra.Command{
		Use:   "expand (-f FILENAME | -k DIRECTORY)",
		Short: "Print the TiledInstances the operator would create",
		Long: `Print the TiledInstance objects the operator would create for the TiledClusters in the given
files, and the expansion of the standalone TiledInstances: metadata, the complete spec, and the
provenance of every field. No cluster is contacted: the kubeconfig is read only for the
namespace of objects that name none.

Every object read is checked as the API server would check it when applied: its metadata (name,
labels, annotations, with the API server's own validators), the CRD's OpenAPI schema and CEL
rules, then the operator's admission webhooks (run here, with the files standing in for the
cluster). An object the cluster would refuse makes the command fail, naming the object and
the field; the webhooks' warnings are printed on standard error. Documents of other kinds
(Namespaces, Secrets...) and kustomization files in directories are skipped with a note; -k builds
a kustomization as kubectl kustomize does, in the order its sortOptions give.`,
		Example: `  # Expand a cluster with the profiles of a directory
  kubectl tiled expand -f cluster.yaml -f profiles/

  # Expand what a kustomize overlay builds
  kubectl tiled expand -k overlays/production
  kubectl kustomize overlays/production | kubectl tiled expand -f -

  # Only the names
  kubectl tiled expand -f fleet/ -R -o name`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := in.validate(cmd); err != nil {
				return err
			}
			printer, err := printFlags.ToPrinter()
			if err != nil {
				return usageErrorf(cmd, "%v", err)
			}
			objs, err := o.expand(in)
			if err != nil {
				return err
			}
			return printInstances(o.streams.Out, printer, *printFlags.OutputFormat, objs)
		},
	}
	in.addFlags(cmd, "TiledClusters, TiledProfiles and TiledInstances")
	addPrintFlags(cmd, printFlags)
	return cmd
}

func newWhyCommand(o *options) *cobra.Command {
	in := &inputOptions{}
	cmd := &cobra.Command{
		Use:   "why (-f FILENAME | -k DIRECTORY) INSTANCE FIELD",
		Short: "Print the value of a field of an instance and where it comes from",
		Long: `Print the value of a field of an expanded instance, and the layer it comes from: default,
profile/<name>@<generation>, cluster/template, instance/<name>/overrides or instance, with
" (expression)" when a CEL expression computed it. A field holding an object or a list prints
every field beneath it. INSTANCE is an instance's short name (chx) or its TiledInstance name
(nsls2-chx); FIELD is a path such as spec.storage.data.size or spec.tiled.env[name=FOO].value.
The files are read and checked as by expand. No cluster is contacted: the kubeconfig is read
only for the namespace of objects that name none.`,
		Example: `  # Where does chx's data volume size come from?
  kubectl tiled why -f cluster.yaml -f profiles/ chx spec.storage.data.size`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErrorf(cmd, "expected INSTANCE and FIELD, got %d argument(s)", len(args))
			}
			if err := in.validate(cmd); err != nil {
				return err
			}
			objs, err := o.expand(in)
			if err != nil {
				return err
			}
			obj, err := findInstance(objs, args[0])
			if err != nil {
				return err
			}
			fields, err := expansion.Why(obj, args[1])
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.streams.Out, 0, 8, 3, ' ', 0)
			fmt.Fprintln(w, "FIELD\tVALUE\tSOURCE")
			for _, f := range fields {
				fmt.Fprintf(w, "%s\t%s\t%s\n", f.Path, f.Value, f.Source)
			}
			return w.Flush()
		},
	}
	in.addFlags(cmd, "TiledClusters, TiledProfiles and TiledInstances")
	return cmd
}

// findInstance finds an expanded instance by TiledInstance name or by short name.
func findInstance(objs []*v1alpha1.TiledInstance, name string) (*v1alpha1.TiledInstance, error) {
	var byShort []*v1alpha1.TiledInstance
	for _, o := range objs {
		if o.Name == name {
			return o, nil
		}
		if o.Labels[v1alpha1.LabelInstance] == name {
			byShort = append(byShort, o)
		}
	}
	switch len(byShort) {
	case 1:
		return byShort[0], nil
	case 0:
		return nil, fmt.Errorf("instance %q not found in the expansion", name)
	}
	var names []string
	for _, o := range byShort {
		names = append(names, o.Name)
	}
	return nil, fmt.Errorf("instance %q is ambiguous: name one of %s", name, strings.Join(names, ", "))
}

// expand reads the objects, checks them as the API server and the webhooks would, and expands every
// cluster (by namespace and name) and then every standalone instance (likewise). The webhooks'
// warnings go to standard error.
func (o *options) expand(in *inputOptions) ([]*v1alpha1.TiledInstance, error) {
	namespace, explicit, err := namespaceOf(o.config)
	if err != nil {
		return nil, err
	}
	objs, err := in.read(readOptions{in: o.streams.In, notes: o.streams.ErrOut, namespace: namespace, enforce: explicit})
	if err != nil {
		return nil, err
	}
	clusters, profiles, instances := split(objs)
	if len(clusters) == 0 && len(instances) == 0 {
		return nil, fmt.Errorf("no TiledCluster or TiledInstance in %s", in.describe())
	}
	key := func(ns, name string) string { return ns + "/" + name }
	slices.SortStableFunc(clusters, func(a, b *v1alpha1.TiledCluster) int {
		return strings.Compare(key(a.Namespace, a.Name), key(b.Namespace, b.Name))
	})
	slices.SortStableFunc(instances, func(a, b *v1alpha1.TiledInstance) int {
		return strings.Compare(key(a.Namespace, a.Name), key(b.Namespace, b.Name))
	})
	// The checks the admission webhooks make of each object on its own, then of what it expands to
	// beside the others: the same verdicts offline as on the API server.
	for i := range profiles {
		if err := expansion.CheckProfile(&profiles[i]); err != nil {
			return nil, fmt.Errorf("TiledProfile %s/%s: %w", profiles[i].Namespace, profiles[i].Name, err)
		}
	}
	var out []*v1alpha1.TiledInstance
	for _, c := range clusters {
		if err := expansion.CheckCluster(c); err != nil {
			return nil, fmt.Errorf("TiledCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		res, err := expansion.Expand(c, profiles, expansion.DefaultBuiltins())
		if err != nil {
			return nil, fmt.Errorf("TiledCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		mine := res.Objects()
		if err := expansion.NameCollision(out, mine, func(ti *v1alpha1.TiledInstance) string {
			return "spec.instances[name=" + ti.Labels[v1alpha1.LabelInstance] + "]"
		}); err != nil {
			return nil, fmt.Errorf("TiledCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		out = append(out, mine...)
	}
	var standalone []*v1alpha1.TiledInstance
	for _, in := range instances {
		if err := expansion.CheckInstance(in); err != nil {
			return nil, fmt.Errorf("TiledInstance %s/%s: %w", in.Namespace, in.Name, err)
		}
		exp, err := expansion.ExpandInstance(in, profiles, expansion.DefaultBuiltins())
		if err != nil {
			return nil, fmt.Errorf("TiledInstance %s/%s: %w", in.Namespace, in.Name, err)
		}
		if err := expansion.NameCollision(out, []*v1alpha1.TiledInstance{exp}, func(*v1alpha1.TiledInstance) string { return "metadata.name" }); err != nil {
			return nil, fmt.Errorf("TiledInstance %s/%s: %w", in.Namespace, in.Name, err)
		}
		out = append(out, exp)
		standalone = append(standalone, exp)
	}
	// Then the webhooks themselves, with the files as their cache: their warnings, and a refusal of
	// anything the checks above let through.
	f := &files{profiles: profiles}
	for _, c := range clusters {
		f.clusters = append(f.clusters, *c)
	}
	for _, ti := range out {
		// As the operator stores them: a cluster's instances controlled by it.
		stored := ti.DeepCopy()
		if c := ti.Labels[v1alpha1.LabelCluster]; c != "" && !slices.ContainsFunc(instances, func(s *v1alpha1.TiledInstance) bool { return s.Name == ti.Name && s.Namespace == ti.Namespace }) {
			if i := slices.IndexFunc(clusters, func(cl *v1alpha1.TiledCluster) bool {
				return cl.Namespace == ti.Namespace && names.LabelValue(cl.Name) == c
			}); i >= 0 {
				stored.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster",
					Name: clusters[i].Name, UID: clusters[i].UID, Controller: ptr.To(true)}}
			}
		}
		f.instances = append(f.instances, *stored)
	}
	warnings, err := admit(f, clusters, standalone)
	for _, w := range warnings {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", w)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
