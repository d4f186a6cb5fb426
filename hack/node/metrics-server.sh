#!/usr/bin/env bash
# metrics-server.sh prints the path of the metrics-server binary (sigs.k8s.io/metrics-server,
# Apache-2.0: the resource metrics API, metrics.k8s.io, that HorizontalPodAutoscalers read), building
# it first when it is not in the cache:
#
#   ${TILED_OPERATOR_CACHE:-~/.cache/tiled-operator}/images/bin/metrics-server-<METRICS_SERVER_VERSION>
#
# The one definition of the version and the build: hack/images/build.sh sources this file for the
# image (docker.io/local/metrics-server:<version>), hack/node/cluster.sh for the image it deploys, and
# hack/node/testimages.sh --standins for its stand-in. A cold build is `go install` from the Go module
# proxy (no other network), a few minutes on two cores (nice); later calls print the path at once.
# Concurrent callers wait on a lock beside the binary, and the binary appears atomically. No root.

# Pinned; the image tag, hack/images/images_test.go and hack/node/cluster.sh follow it. v0.8.0 is
# built on the Kubernetes 1.33 libraries; it reads the kubelet's /metrics/resource (stable since 1.29)
# and serves metrics.k8s.io/v1beta1 through the aggregation layer, both unchanged in 1.37.
METRICS_SERVER_VERSION=v0.8.0

# metrics_server_bin prints the cached binary's path (it may not exist yet).
metrics_server_bin() {
	echo "${TILED_OPERATOR_CACHE:-$HOME/.cache/tiled-operator}/images/bin/metrics-server-$METRICS_SERVER_VERSION"
}

# metrics_server_build builds the binary into the cache unless it is there, and prints its path.
# Progress and errors go to stderr.
metrics_server_build() (
	set -euo pipefail
	local bin bindir tmp
	bin=$(metrics_server_bin)
	bindir=$(dirname "$bin")
	[[ -x $bin ]] && { echo "$bin"; exit 0; }
	mkdir -p "$bindir"
	exec 8>"$bindir/.metrics-server-$METRICS_SERVER_VERSION.lock"
	flock 8
	if [[ ! -x $bin ]]; then
		tmp=$(mktemp -d "$bindir/.metrics-server.XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		echo "metrics-server: building $METRICS_SERVER_VERSION from the Go module proxy (a few minutes, once)" >&2
		# Outside any module (this checkout's go.mod plays no part); static; the version stamped where
		# the upstream Makefile puts it (`metrics-server --version`).
		(cd / && CGO_ENABLED=0 GOBIN=$tmp nice -n 10 go install -trimpath \
			-ldflags="-s -w -X=k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
			"sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION") >&2
		mv "$tmp/metrics-server" "$bin"
	fi
	echo "$bin"
)

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	metrics_server_build
fi
