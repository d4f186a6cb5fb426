#!/usr/bin/env bash
# coredns.sh prints the path of the CoreDNS binary (github.com/coredns/coredns, Apache-2.0), the
# node's cluster DNS, building it first when it is not in the cache:
#
#   $(tiled_cache_root)/tools/coredns/<COREDNS_VERSION>-<recipe hash>/coredns
#
# The one definition of its version and build: hack/images/build.sh sources this file for the image
# docker.io/local/coredns:<version> that the node runs, and hack/node/build.sh copies the binary into
# the node's folder (hack/node/testimages.sh --standins makes a stand-in image of it). The build is
# hack/lib/gotool.sh's (the Go module proxy only, static, trimmed, `coredns -version` checked, a lock,
# the binary appearing atomically); a few minutes on two cores cold, then the path at once. No root.
# hack/node/cluster.sh and hack/node/testimages.sh name the image docker.io/local/coredns:v1.15.0:
# change them with the pin.

# Pinned.
COREDNS_VERSION=v1.15.0

# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"

# coredns_recipe FN runs FN (gotool_build, gotool_path or gotool_key) with CoreDNS's recipe: the
# module's main package as upstream's `go install` builds it (its version is in its source).
coredns_recipe() {
	"$1" coredns "github.com/coredns/coredns@$COREDNS_VERSION" github.com/coredns/coredns \
		--check -version --expect "CoreDNS-${COREDNS_VERSION#v}" --about "a few minutes on two cores"
}

# coredns_bin prints the cached binary's path (it may not exist yet).
coredns_bin() { coredns_recipe gotool_path; }

# coredns_build builds the binary into the cache unless it is there, and prints its path. Progress and
# errors go to stderr.
coredns_build() { coredns_recipe gotool_build; }

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	coredns_build
fi
