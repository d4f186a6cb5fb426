#!/usr/bin/env bash
# prometheus.sh prints the path of the Prometheus server binary, building it first when it is not in
# the cache:
#
#   $(tiled_cache_root)/tools/prometheus/<PROMETHEUS_MODULE_VERSION>-<recipe hash>/prometheus
#
# beside promtool (tools/promtool/..., built by hack/prometheus/promtool.sh with promtool_build below,
# the same pin). The one definition of the server's version and build: hack/images/build.sh sources
# this file for the node image docker.io/local/prometheus:<version>, which the e2e case 14
# (test/e2e/prometheus_test.go) deploys to check config/components/prometheus against a real server.
#
# The module github.com/prometheus/prometheus numbers Prometheus 3.x.y as v0.3xx.y (v0.316.0 is
# Prometheus 3.16.0). It is built by hack/lib/gotool.sh, in a wrapper module (go get + go build: the
# module's go.mod is not `go install`-able as a main module), static (CGO off), with the build tags
# remove_all_sd,enable_kubernetes_sd (only Kubernetes service discovery: the cloud SDKs are left
# out) and the version stamped in and checked (`prometheus --version`). Without the builtinassets tag
# the web UI is not embedded: the HTTP API (/api/v1/...) works, the UI pages answer an error, which the
# e2e does not need. A cold build is a few minutes on two cores (nice 10); later calls print the path
# at once. Concurrent callers wait on a lock, and the binary appears atomically. No root.
#
#   hack/prometheus/prometheus.sh        build if needed, print the path
#   source hack/prometheus/prometheus.sh PROMETHEUS_VERSION, PROMETHEUS_MODULE_VERSION, prometheus_bin,
#     prometheus_build, promtool_bin, promtool_build

# Pinned, for the server and promtool alike (promtool.sh builds it with promtool_build).
PROMETHEUS_MODULE_VERSION=v0.316.0
# v0.MMM.P is Prometheus 3.(MMM-300).P
PROMETHEUS_VERSION=3.16.0

# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"

# prometheus_recipe FN NAME TAGS runs FN (gotool_build, gotool_path or gotool_key) with the recipe of
# cmd/NAME of the module, built with the build tags TAGS, the version stamped in and checked with
# `NAME --version` ("NAME, version 3.16.0 (branch: HEAD, revision: v0.316.0)").
prometheus_recipe() {
	"$1" "$2" "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION" "github.com/prometheus/prometheus/cmd/$2" \
		--tags "$3" \
		--ldflags "-X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION -X github.com/prometheus/common/version.Branch=HEAD -X github.com/prometheus/common/version.Revision=$PROMETHEUS_MODULE_VERSION" \
		--check --version --expect "$2, version $PROMETHEUS_VERSION " --about "a few minutes on two cores"
}

# The server: only Kubernetes service discovery.
PROMETHEUS_TAGS=remove_all_sd,enable_kubernetes_sd
# promtool: no service discovery.
PROMTOOL_TAGS=remove_all_sd

# prometheus_bin and promtool_bin print the cached binaries' paths (they may not exist yet).
prometheus_bin() { prometheus_recipe gotool_path prometheus "$PROMETHEUS_TAGS"; }
promtool_bin() { prometheus_recipe gotool_path promtool "$PROMTOOL_TAGS"; }

# prometheus_build and promtool_build build the server or promtool unless cached, and print its path.
# Progress and errors go to stderr.
prometheus_build() { prometheus_recipe gotool_build prometheus "$PROMETHEUS_TAGS"; }
promtool_build() { prometheus_recipe gotool_build promtool "$PROMTOOL_TAGS"; }

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	prometheus_build
fi
