package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
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

// run executes the plugin with args and returns the exit status.
func run(args []string, streams genericiooptions.IOStreams) int {
	root := newRootCommand(streams)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(streams.ErrOut, "See '%s -h' for help and examples.\n", ue.cmd)
	}
	return 1
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use: "tiled",
		// Run by kubectl as a plugin, the command is called "kubectl tiled" in messages.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl tiled"},
		Short:       "Audit tiled-operator fleets: expand clusters and trace where every field comes from",
		Long: `kubectl tiled expands TiledClusters and TiledProfiles read from files into the TiledInstances
the tiled-operator would create, with the same engine, and explains where each field comes from.
No cluster is contacted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf(cmd, "a command is required: expand or why")
		},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetIn(streams.In)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd.CommandPath(), err: err} })
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newExpandCommand(streams), newWhyCommand(streams))
	root.AddCommand(newDiffCommand(streams))
	root.AddCommand(newImportHelmCommand(streams))
	return root
}

// inputOptions are the flags that say which objects to read.
type inputOptions struct {
	filenames []string
	recursive bool
	namespace string
	// unchecked skips the API server's schema checks on the files (DecodeAllChecked): for diff,
	// whose server-side dry run makes them.
	unchecked bool
}

func (o *inputOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringSliceVarP(&o.filenames, "filename", "f", nil,
		"Files or directories holding TiledClusters, TiledProfiles and TiledInstances; - reads standard input.")
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "R", false,
		"Process the directories given with -f recursively.")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "default",
		"Namespace of the objects that do not name one.")
}

func newExpandCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &inputOptions{}
	cmd := &cobra.Command{
		Use:   "expand -f FILENAME [-f FILENAME...]",
		Short: "Print the TiledInstances the operator would create",
		Long: `Print, as YAML, the TiledInstance objects the operator would create for the TiledClusters in the
given files, and the expansion of the standalone TiledInstances: metadata, the complete spec, and
the provenance of every field.`,
		Example: `  # Expand a cluster with the profiles of a directory
  kubectl tiled expand -f cluster.yaml -f profiles/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(o.filenames) == 0 {
				return usageErrorf(cmd, "must specify one of -f and -R")
			}
			objs, err := o.expand(streams.In)
			if err != nil {
				return err
			}
			out, err := expansion.Marshal(objs...)
			if err != nil {
				return err
			}
			_, err = streams.Out.Write(out)
			return err
		},
	}
	o.addFlags(cmd)
	return cmd
}

func newWhyCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &inputOptions{}
	cmd := &cobra.Command{
		Use:   "why -f FILENAME [-f FILENAME...] INSTANCE FIELD",
		Short: "Print the value of a field of an instance and where it comes from",
		Long: `Print the value of a field of an expanded instance, and the layer it comes from: default,
profile/<name>@<generation>, cluster/template, instance/<name>/overrides or instance, with
" (expression)" when a CEL expression computed it. A field holding an object or a list prints
every field beneath it. INSTANCE is an instance's short name (chx) or its TiledInstance name
(nsls2-chx); FIELD is a path such as spec.storage.data.size or spec.tiled.env[name=FOO].value.`,
		Example: `  # Where does chx's data volume size come from?
  kubectl tiled why -f cluster.yaml -f profiles/ chx spec.storage.data.size`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErrorf(cmd, "expected INSTANCE and FIELD, got %d argument(s)", len(args))
			}
			if len(o.filenames) == 0 {
				return usageErrorf(cmd, "must specify one of -f and -R")
			}
			objs, err := o.expand(streams.In)
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
			w := tabwriter.NewWriter(streams.Out, 0, 8, 3, ' ', 0)
			fmt.Fprintln(w, "FIELD\tVALUE\tSOURCE")
			for _, f := range fields {
				fmt.Fprintf(w, "%s\t%s\t%s\n", f.Path, f.Value, f.Source)
			}
			return w.Flush()
		},
	}
	o.addFlags(cmd)
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

// expand reads the objects and expands every cluster (by namespace and name) and then every
// standalone instance (likewise).
func (o *inputOptions) expand(stdin io.Reader) ([]*v1alpha1.TiledInstance, error) {
	var clusters []*v1alpha1.TiledCluster
	var instances []*v1alpha1.TiledInstance
	var profiles []v1alpha1.TiledProfile
	for _, name := range o.filenames {
		objs, err := o.read(name, stdin)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			switch obj := obj.(type) {
			case *v1alpha1.TiledCluster:
				if obj.Namespace == "" {
					obj.Namespace = o.namespace
				}
				clusters = append(clusters, obj)
			case *v1alpha1.TiledProfile:
				if obj.Namespace == "" {
					obj.Namespace = o.namespace
				}
				profiles = append(profiles, *obj)
			case *v1alpha1.TiledInstance:
				if obj.Namespace == "" {
					obj.Namespace = o.namespace
				}
				instances = append(instances, obj)
			}
		}
	}
	if len(clusters) == 0 && len(instances) == 0 {
		return nil, fmt.Errorf("no TiledCluster or TiledInstance in %s", strings.Join(o.filenames, ", "))
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
	}
	return out, nil
}

var extensions = []string{".yaml", ".yml", ".json"}

// read decodes the objects of a file, of "-" (standard input), or of the files of a directory.
func (o *inputOptions) read(name string, stdin io.Reader) ([]runtime.Object, error) {
	if name == "-" {
		return o.decode("<stdin>", stdin)
	}
	info, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("the path %q does not exist", name)
	}
	if !info.IsDir() {
		return o.readFile(name)
	}
	var files []string
	err = filepath.WalkDir(name, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != name && !o.recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(extensions, filepath.Ext(path)) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var out []runtime.Object
	for _, f := range files {
		objs, err := o.readFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func (o *inputOptions) readFile(name string) ([]runtime.Object, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return o.decode(name, f)
}

func (o *inputOptions) decode(name string, r io.Reader) ([]runtime.Object, error) {
	if o.unchecked {
		return expansion.DecodeAll(name, r)
	}
	return expansion.DecodeAllChecked(name, r)
}
