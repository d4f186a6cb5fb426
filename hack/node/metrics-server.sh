#!/usr/bin/env bash
# metrics-server.sh prints the path of the metrics-server binary (sigs.k8s.io/metrics-server,
# Apache-2.0: the resource metrics API, metrics.k8s.io, that HorizontalPodAutoscalers read), building
# it first when it is not in the cache:
#
#   $(tiled_cache_root)/tools/metrics-server/<METRICS_SERVER_VERSION>-<recipe hash>/metrics-server
#
# The one definition of the version and the build: hack/images/build.sh sources this file for the
# image (docker.io/local/metrics-server:<version>), hack/node/cluster.sh for the image it deploys, and
# hack/node/testimages.sh --standins for its stand-in. The build is hack/lib/gotool.sh's (the Go module
# proxy only, static, version checked, a lock, the binary appearing atomically): a few minutes on two
# cores (nice 10) cold; later calls print the path at once. No root.

# Pinned; the image tag, hack/images/images_test.go and hack/node/cluster.sh follow it. v0.8.0 is
# built on the Kubernetes 1.33 libraries; it reads the kubelet's /metrics/resource (stable since 1.29)
# and serves metrics.k8s.io/v1beta1 through the aggregation layer, both unchanged in 1.37.
METRICS_SERVER_VERSION=v0.8.0

# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"

# metrics_server_recipe FN runs FN (gotool_build, gotool_path or gotool_key) with metrics-server's
# recipe: cmd/metrics-server, static, the version stamped where the upstream Makefile puts it and
# checked with `metrics-server --version`.
metrics_server_recipe() {
	"$1" metrics-server "sigs.k8s.io/metrics-server@$METRICS_SERVER_VERSION" sigs.k8s.io/metrics-server/cmd/metrics-server \
		--ldflags "-X=k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
		--check --version --expect "$METRICS_SERVER_VERSION" --about "a few minutes on two cores"
}

# metrics_server_bin prints the cached binary's path (it may not exist yet).
metrics_server_bin() { metrics_server_recipe gotool_path; }

# metrics_server_build builds the binary into the cache unless it is there, and prints its path.
# Progress and errors go to stderr.
metrics_server_build() { metrics_server_recipe gotool_build; }

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	metrics_server_build
fi
