// Command bundle writes the tiled-operator's OLM bundle (bundle/ and bundle.Dockerfile) from
// config/olm (config/default as OLM runs it), config/samples, config/manifests and the generated
// CRDs, RBAC and webhook configurations: `make bundle`.
// The release it describes is in release.go; flags override it for a release candidate.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	o := Options{}
	var out string
	flag.StringVar(&o.Root, "root", ".", "Root of the checkout.")
	flag.StringVar(&out, "output", "bundle", "Bundle folder, relative to the root.")
	flag.StringVar(&o.Version, "version", Version, "Operator version (semver, no v).")
	flag.StringVar(&o.CreatedAt, "created-at", CreatedAt, "The CSV's createdAt: the release date, fixed so that the bundle is reproducible.")
	flag.StringVar(&o.Replaces, "replaces", Replaces, "Version this release replaces in OLM's update graph (empty for none).")
	flag.StringVar(&o.Channel, "channel", Channel, "OLM channel (also the default channel).")
	flag.Parse()
	files, dockerfile, err := Generate(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
	if err := Write(filepath.Join(o.Root, out), files, filepath.Join(o.Root, "bundle.Dockerfile"), dockerfile); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
	fmt.Printf("bundle: wrote %d files to %s and bundle.Dockerfile\n", len(files), out)
}
