// Package conformance checks the render package against real Tiled and a real PostgreSQL: the
// rendered config.yml, Secret and init commands must start `tiled serve` and serve data. Its tests
// build only with the tiledconformance tag and are run by hack/tiled/conformance.sh, which prepares
// Tiled (from PyPI, at expansion.TiledVersion) and PostgreSQL; run without them, they fail rather than
// skip. See docs/tiled-conformance.md.
package conformance
