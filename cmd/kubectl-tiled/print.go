package main

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
)

// newPrintFlags are kubectl's -o flags, limited to yaml (the default), json and name.
func newPrintFlags() *genericclioptions.PrintFlags {
	output := "yaml"
	return &genericclioptions.PrintFlags{
		JSONYamlPrintFlags: genericclioptions.NewJSONYamlPrintFlags(),
		NamePrintFlags:     genericclioptions.NewNamePrintFlags(""),
		OutputFormat:       &output,
	}
}

// addPrintFlags adds -o to cmd. --show-managed-fields, which the yaml and json printers bring, is
// hidden: the instances printed hold no managed fields.
func addPrintFlags(cmd *cobra.Command, f *genericclioptions.PrintFlags) {
	f.AddFlags(cmd)
	_ = cmd.Flags().MarkHidden("show-managed-fields")
}

// printInstances prints expanded instances with a cli-runtime printer. Each is the document
// expansion.Marshal renders (apiVersion, kind, metadata, spec, provenance), so that -o yaml gives
// its bytes exactly; -o json prints one List, as kubectl get does.
func printInstances(w io.Writer, printer printers.ResourcePrinter, format string, objs []*v1alpha1.TiledInstance) error {
	items := make([]unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		b, err := expansion.Marshal(o)
		if err != nil {
			return err
		}
		u := unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			return err
		}
		items = append(items, u)
	}
	if format == "json" {
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}}
		list.Items = items
		return printer.PrintObj(list, w)
	}
	for i := range items {
		if err := printer.PrintObj(&items[i], w); err != nil {
			return err
		}
	}
	return nil
}

// printDocument prints v as JSON (indented, a final newline) or YAML when output is "json" or
// "yaml", and says whether it did: any other output is the command's own text.
func printDocument(w io.Writer, output string, v any) (bool, error) {
	var b []byte
	var err error
	switch output {
	case "json":
		if b, err = json.MarshalIndent(v, "", "    "); err == nil {
			b = append(b, '\n')
		}
	case "yaml":
		b, err = yaml.Marshal(v)
	default:
		return false, nil
	}
	if err != nil {
		return true, err
	}
	_, err = w.Write(b)
	return true, err
}
