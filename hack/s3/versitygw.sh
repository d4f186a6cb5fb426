#!/usr/bin/env bash
# versitygw.sh prints the path of the versitygw binary (https://github.com/versity/versitygw, an S3
# gateway with a posix backend, Apache-2.0), building it first when it is not in the cache:
#
#   $(tiled_cache_root)/tools/versitygw/<VERSITYGW_VERSION>-<recipe hash>/versitygw
#
# (the root is ${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tiled-operator}, hack/lib/cache.sh).
#
#   bin=$(hack/s3/versitygw.sh)
#   ROOT_ACCESS_KEY=ak ROOT_SECRET_KEY=sk "$bin" --port 127.0.0.1:7070 --region us-east-1 \
#       --health /health posix /some/dir
#
# The one definition of the version and the build: hack/images/build.sh sources this file for the
# versitygw image (docker.io/local/versitygw:<version without v>), and host-side tests run the binary
# directly (hack/s3/s3_test.sh). The build is hack/lib/gotool.sh's (Go module proxy only, static, the
# version stamped where the upstream Makefile puts it and checked with `versitygw --version`, a lock,
# the binary appearing atomically); a cold build is a few minutes on one core (GOMAXPROCS=1 as
# before: images/build.sh runs it beside other builds, nice 19); later calls print the path at once.
# No root.

# Pinned; the image tag and hack/images/images_test.go follow it.
VERSITYGW_VERSION=v1.8.0

# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"

# versitygw_recipe FN runs FN (gotool_build, gotool_path or gotool_key) with versitygw's recipe:
# cmd/versitygw, static, the version stamped where the upstream Makefile puts it and checked with
# `versitygw --version`; one job (GOMAXPROCS=1) at nice 19, as before the library.
versitygw_recipe() {
	"$1" versitygw "github.com/versity/versitygw@$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw \
		--ldflags "-X=main.Version=$VERSITYGW_VERSION -X=main.Build=$VERSITYGW_VERSION" \
		--check --version --expect "$VERSITYGW_VERSION" \
		--nice 19 --jobs 1 --about "a few minutes on one core"
}

# versitygw_bin prints the cached binary's path (it may not exist yet).
versitygw_bin() { versitygw_recipe gotool_path; }

# versitygw_build builds the binary into the cache unless it is there, and prints its path. Progress
# and errors go to stderr.
versitygw_build() { versitygw_recipe gotool_build; }

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	versitygw_build
fi
