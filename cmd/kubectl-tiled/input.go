package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/expansion/schemacheck"
)

// inputOptions are the flags that say which objects to read: kubectl's -f, -R and -k, read with
// cli-runtime's resource.Builder.
type inputOptions struct {
	filenames []string
	recursive bool
	kustomize string
}

func (o *inputOptions) addFlags(cmd *cobra.Command, what string) {
	cmd.Flags().StringSliceVarP(&o.filenames, "filename", "f", nil,
		"Files or directories holding "+what+"; - reads standard input. Other kinds are skipped with a note.")
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "R", false,
		"Process the directories given with -f recursively.")
	cmd.Flags().StringVarP(&o.kustomize, "kustomize", "k", "",
		"Build a kustomization directory (as kubectl kustomize) and read the objects it renders.")
	_ = cmd.MarkFlagDirname("kustomize")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
}

func (o *inputOptions) validate(cmd *cobra.Command) error {
	if len(o.filenames) == 0 && o.kustomize == "" {
		return usageErrorf(cmd, "must specify one of -f and -k")
	}
	if len(o.filenames) > 0 && o.kustomize != "" {
		return usageErrorf(cmd, "only one of -f or -k can be specified")
	}
	if o.kustomize != "" && o.recursive {
		return usageErrorf(cmd, "the -k flag can't be used with -f or -R")
	}
	return nil
}

// describe names the input in messages.
func (o *inputOptions) describe() string {
	if o.kustomize != "" {
		return o.kustomize
	}
	return strings.Join(o.filenames, ", ")
}

// namespaceOf returns the namespace of the kubeconfig flags, as kubectl takes it: -n, else the
// current context's, else "default" (also when there is no kubeconfig at all: expand and why work
// offline); and whether -n (or the context) named it explicitly.
func namespaceOf(config *genericclioptions.ConfigFlags) (string, bool, error) {
	if config.Namespace != nil && *config.Namespace != "" {
		return *config.Namespace, true, nil
	}
	ns, explicit, err := config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) || clientcmd.IsConfigurationInvalid(err) {
			return "default", false, nil
		}
		return "", false, err
	}
	if ns == "" {
		ns = "default"
	}
	return ns, explicit, nil
}

// kustomizationFiles are the file names kustomize reads as a kustomization: they describe how to
// build objects and are not objects themselves.
var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// fileExtensions are the extensions of the files of a directory that are read, as kubectl's.
var fileExtensions = []string{".json", ".yaml", ".yml"}

// readOptions say how to read objects.
type readOptions struct {
	in        io.Reader // standard input, for "-f -"
	notes     io.Writer // standard error: what was skipped
	namespace string    // for objects that name none
	// enforce refuses an object of another namespace (-n given), as kubectl apply does.
	enforce bool
	// unchecked skips the API server's schema checks (schemacheck.DecodeAllChecked): for diff, whose
	// server-side dry run makes them.
	unchecked bool
}

// read returns the tiled-operator objects of the input, in order (files as given, the files of a
// directory sorted, documents in order), with the namespace set. Documents of other kinds are
// skipped with a note, and so are kustomization files in directories.
func (o *inputOptions) read(ro readOptions) ([]client.Object, error) {
	b := resource.NewLocalBuilder().Unstructured().Flatten()
	stdin := false
	var missing []string
	for _, name := range o.filenames {
		if name == "-" {
			if stdin {
				return nil, resource.StdinMultiUseError
			}
			stdin = true
			b.Stream(ro.in, "STDIN")
			continue
		}
		files, kustomizations, err := o.expandPath(name)
		if err != nil {
			missing = append(missing, err.Error())
			continue
		}
		if len(files) == 0 && len(kustomizations) > 0 {
			missing = append(missing, fmt.Sprintf("%s holds only a kustomization: to read what it builds, use -k %s", name, filepath.Dir(kustomizations[0])))
			continue
		}
		for _, k := range kustomizations {
			fmt.Fprintf(ro.notes, "note: skipped %s: a kustomization (read what it builds with -k %s)\n", k, filepath.Dir(k))
		}
		if len(files) > 0 {
			b.FilenameParam(false, &resource.FilenameOptions{Filenames: files})
		}
	}
	if len(missing) > 0 {
		return nil, errors.New(strings.Join(missing, "\n"))
	}
	if o.kustomize != "" {
		built, err := kustomizeBuild(o.kustomize)
		if err != nil {
			return nil, err
		}
		b.Stream(bytes.NewReader(built), o.kustomize)
	}
	var out []client.Object
	documents := map[string]int{}
	err := b.Do().Visit(func(info *resource.Info, err error) error {
		if err != nil {
			return err
		}
		documents[info.Source]++
		where := fmt.Sprintf("%s: document %d", sourceName(info.Source), documents[info.Source])
		u, ok := info.Object.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("%s: not an object: %T", where, info.Object)
		}
		gvk := u.GroupVersionKind()
		if gvk.Group != v1alpha1.GroupVersion.Group {
			fmt.Fprintf(ro.notes, "note: skipped %s %q (%s): not a kind of %s\n", gvk.Kind, u.GetName(), where, v1alpha1.GroupVersion.Group)
			return nil
		}
		raw, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		decode := schemacheck.DecodeChecked
		if ro.unchecked {
			decode = expansion.Decode
		}
		obj, err := decode(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", where, clarify(err))
		}
		co := obj.(client.Object)
		switch {
		case co.GetNamespace() == "":
			co.SetNamespace(ro.namespace)
		case ro.enforce && co.GetNamespace() != ro.namespace:
			return fmt.Errorf("%s: the namespace from the provided object %q does not match the namespace %q. You must pass '--namespace=%s' to perform this operation",
				where, co.GetNamespace(), ro.namespace, co.GetNamespace())
		}
		out = append(out, co)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// kustomizeBuild builds a kustomization directory as kubectl kustomize does: kustomize's default
// options, the objects in the order the kustomization's sortOptions give, else in kustomize's legacy
// order (by kind). cli-runtime's -k asks for the legacy order explicitly, which overrides nothing
// but makes kustomize warn, on the process's log, whenever a kustomization sets sortOptions (as
// config/samples does, so that kubectl apply -k creates the profiles first).
func kustomizeBuild(dir string) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionUnspecified
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}

func sourceName(s string) string {
	if s == "STDIN" {
		return "<stdin>"
	}
	return s
}

// expandPath lists the files to read for one -f argument: the file itself, or the files of a
// directory with kubectl's extensions, sorted (subdirectories with -R), without the kustomization
// files, which are returned apart.
func (o *inputOptions) expandPath(name string) (files, kustomizations []string, err error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, nil, fmt.Errorf("the path %q does not exist", name)
	}
	if !info.IsDir() {
		return []string{name}, nil, nil
	}
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
		if slices.Contains(kustomizationFiles, d.Name()) {
			kustomizations = append(kustomizations, path)
			return nil
		}
		if slices.Contains(fileExtensions, filepath.Ext(path)) {
			files = append(files, path)
		}
		return nil
	})
	slices.Sort(files)
	return files, kustomizations, err
}

// valueUnstructured matches what structured-merge-diff prints for a value of the wrong type.
var valueUnstructured = regexp.MustCompile(`expected (\w+), got &value\.valueUnstructured\{Value:(.*)\}`)

// clarify rewrites the type errors of structured-merge-diff into words: "expected string, got
// boolean true", with a hint when YAML 1.1 made the boolean out of y, yes, on, n, no or off.
// (It belongs in expansion's decodeError; kept here while that package is not this change's.)
func clarify(err error) error {
	var ie *expansion.InvalidFieldError
	if !errors.As(err, &ie) || !valueUnstructured.MatchString(ie.Reason) {
		return err
	}
	c := *ie
	c.Reason = valueUnstructured.ReplaceAllStringFunc(ie.Reason, func(s string) string {
		m := valueUnstructured.FindStringSubmatch(s)
		want, got := m[1], m[2]
		switch got {
		case "true", "false":
			msg := fmt.Sprintf("expected %s, got boolean %s", want, got)
			if want == "string" {
				msg += ` (YAML reads unquoted y, yes, on, true, n, no, off and false as booleans: quote the value, e.g. "y")`
			}
			return msg
		case "<nil>":
			return fmt.Sprintf("expected %s, got null", want)
		}
		switch {
		case strings.HasPrefix(got, "map["):
			return fmt.Sprintf("expected %s, got an object", want)
		case strings.HasPrefix(got, "[]"):
			return fmt.Sprintf("expected %s, got a list", want)
		case regexp.MustCompile(`^-?[0-9.eE+-]+$`).MatchString(got):
			return fmt.Sprintf("expected %s, got number %s", want, got)
		}
		return fmt.Sprintf("expected %s, got %s", want, got)
	})
	return &c
}

// split sorts what was read into its kinds.
func split(objs []client.Object) (clusters []*v1alpha1.TiledCluster, profiles []v1alpha1.TiledProfile, instances []*v1alpha1.TiledInstance) {
	for _, obj := range objs {
		switch obj := obj.(type) {
		case *v1alpha1.TiledCluster:
			clusters = append(clusters, obj)
		case *v1alpha1.TiledProfile:
			profiles = append(profiles, *obj)
		case *v1alpha1.TiledInstance:
			instances = append(instances, obj)
		}
	}
	return clusters, profiles, instances
}
