#!/usr/bin/env bash
# versitygw.sh prints the path of the versitygw binary (https://github.com/versity/versitygw, an S3
# gateway with a posix backend, Apache-2.0), building it first when it is not in the cache:
#
#   ${TILED_OPERATOR_CACHE:-~/.cache/tiled-operator}/images/bin/versitygw-<VERSITYGW_VERSION>
#
#   bin=$(hack/s3/versitygw.sh)
#   ROOT_ACCESS_KEY=ak ROOT_SECRET_KEY=sk "$bin" --port 127.0.0.1:7070 --region us-east-1 \
#       --health /health posix /some/dir
#
# The one definition of the version and the build: hack/images/build.sh sources this file for the
# versitygw image (docker.io/local/versitygw:<version without v>), and host-side tests run the binary
# directly (hack/s3/s3_test.sh). A cold build is `go install` from the Go module proxy (no other
# network), about 3 minutes on one core (GOMAXPROCS=1, nice); later calls print the path at once.
# Concurrent callers wait on a lock beside the binary, and the binary appears atomically. No root.

# Pinned; the image tag and hack/images/images_test.go follow it.
VERSITYGW_VERSION=v1.8.0

# versitygw_bin prints the cached binary's path (it may not exist yet).
versitygw_bin() {
	echo "${TILED_OPERATOR_CACHE:-$HOME/.cache/tiled-operator}/images/bin/versitygw-$VERSITYGW_VERSION"
}

# versitygw_build builds the binary into the cache unless it is there, and prints its path. Progress
# and errors go to stderr.
versitygw_build() (
	set -euo pipefail
	local bin dir tmp
	bin=$(versitygw_bin)
	dir=$(dirname "$bin")
	[[ -x $bin ]] && { echo "$bin"; exit 0; }
	mkdir -p "$dir"
	exec 8>"$dir/.versitygw-$VERSITYGW_VERSION.lock"
	flock 8
	if [[ ! -x $bin ]]; then
		tmp=$(mktemp -d "$dir/.versitygw.XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		echo "versitygw: building $VERSITYGW_VERSION from the Go module proxy (a few minutes, once)" >&2
		# Outside any module (this checkout's go.mod plays no part); static; the version stamped where
		# the upstream Makefile puts it (`versitygw --version`).
		(cd / && CGO_ENABLED=0 GOMAXPROCS=1 GOBIN=$tmp nice -n 19 go install -trimpath \
			-ldflags="-s -w -X=main.Version=$VERSITYGW_VERSION -X=main.Build=$VERSITYGW_VERSION" \
			"github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION") >&2
		mv "$tmp/versitygw" "$bin"
	fi
	echo "$bin"
)

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	versitygw_build
fi
