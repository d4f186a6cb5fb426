package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/bluesky/tiled-operator/expansion"
)

// version is set at link time (-ldflags "-X main.version=v0.3.0"); otherwise the module version or
// the VCS revision the binary was built from is reported.
var version = ""

// buildVersion returns the plugin's version and the commit it was built from.
func buildVersion() (string, string) {
	v, commit := version, ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	return v, commit
}

func newVersionCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the defaults it expands with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, commit := buildVersion()
			fmt.Fprintf(o.streams.Out, "kubectl-tiled %s\n", v)
			if commit != "" {
				fmt.Fprintf(o.streams.Out, "commit: %s\n", commit)
			}
			fmt.Fprintf(o.streams.Out, "default Tiled image: %s\n", expansion.TiledImage)
			return nil
		},
	}
}
