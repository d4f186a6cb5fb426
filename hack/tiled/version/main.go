// Command version prints the Tiled version the operator deploys by default (expansion.TiledVersion),
// so that hack/tiled/conformance.sh installs exactly that release from PyPI.
package main

import (
	"fmt"

	"github.com/bluesky/tiled-operator/expansion"
)

func main() { fmt.Println(expansion.TiledVersion) }
