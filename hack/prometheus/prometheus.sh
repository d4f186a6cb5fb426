#!/usr/bin/env bash
# prometheus.sh prints the path of the Prometheus server binary, building it first when it is not in
# the cache:
#
#   ${TILED_OPERATOR_CACHE:-~/.cache/tiled-operator}/prometheus/<PROMETHEUS_VERSION>/prometheus
#
# beside promtool (hack/prometheus/promtool.sh, same module version). The one definition of the
# server's version and build: hack/images/build.sh sources this file for the node image
# docker.io/local/prometheus:<version>, which the e2e case 14 (test/e2e/prometheus_test.go) deploys to
# check config/components/prometheus against a real server.
#
# The module github.com/prometheus/prometheus numbers Prometheus 3.x.y as v0.3xx.y (v0.316.0 is
# Prometheus 3.16.0). It is built in a throwaway module (go get + go build, as promtool.sh: the
# module's go.mod is not `go install`-able as a main module), static (CGO off), with the build tags
# remove_all_sd,enable_kubernetes_sd (only Kubernetes service discovery: the cloud SDKs are left
# out) and the version stamped in (`prometheus --version`). Without the builtinassets tag the web UI
# is not embedded: the HTTP API (/api/v1/...) works, the UI pages answer an error, which the e2e does
# not need. A cold build is a few minutes on two cores (nice 10); later calls print the path at once.
# Concurrent callers wait on a lock beside the binary, and the binary appears atomically. No root.
#
#   hack/prometheus/prometheus.sh        build if needed, print the path
#   source hack/prometheus/prometheus.sh PROMETHEUS_VERSION, prometheus_bin, prometheus_build

# Pinned; promtool.sh pins the same module version (its tests and this server must agree).
PROMETHEUS_MODULE_VERSION=v0.316.0
# v0.MMM.P is Prometheus 3.(MMM-300).P
PROMETHEUS_VERSION=3.16.0

# prometheus_bin prints the cached binary's path (it may not exist yet).
prometheus_bin() {
	echo "${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tiled-operator}/prometheus/$PROMETHEUS_VERSION/prometheus"
}

# prometheus_build builds the binary into the cache unless it is there, and prints its path.
# Progress and errors go to stderr.
prometheus_build() (
	set -euo pipefail
	local bin dir tmp
	bin=$(prometheus_bin)
	dir=$(dirname "$bin")
	[[ -x $bin ]] && { echo "$bin"; exit 0; }
	command -v go >/dev/null 2>&1 || {
		echo "prometheus.sh: the go command is not on PATH; install Go 1.26 or newer and retry" >&2
		exit 1
	}
	mkdir -p "$dir"
	exec 8>"$dir/.prometheus.lock"
	if ! flock -n 8; then
		echo "prometheus.sh: another build of prometheus is running; waiting for it" >&2
		flock 8
	fi
	[[ -x $bin ]] && { echo "$bin"; exit 0; }
	# Builds a killed caller left behind (the lock is ours: none is running).
	rm -rf "$dir"/.prometheus-build.*
	tmp=$(mktemp -d "$dir/.prometheus-build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "prometheus.sh: building prometheus (github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION, Prometheus $PROMETHEUS_VERSION) from the Go module proxy (a few minutes, once)" >&2
	# The go commands do not inherit the lock's descriptor: a go process orphaned by a killed caller
	# must not hold the lock. Each step must succeed.
	(
		cd "$tmp"
		export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
		go mod init prometheus-build >/dev/null 2>&1
		nice -n 10 go get "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION"
		nice -n 10 go build -trimpath -tags remove_all_sd,enable_kubernetes_sd \
			-ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION -X github.com/prometheus/common/version.Branch=HEAD -X github.com/prometheus/common/version.Revision=$PROMETHEUS_MODULE_VERSION" \
			-o "$tmp/prometheus" github.com/prometheus/prometheus/cmd/prometheus
	) 8>&- >&2 || {
		echo "prometheus.sh: building prometheus failed (see the go output above)." >&2
		echo "  Check that the Go module proxy is reachable (GOPROXY=$(go env GOPROXY)), then run hack/prometheus/prometheus.sh again." >&2
		exit 1
	}
	mv "$tmp/prometheus" "$bin"
	echo "$bin"
)

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	prometheus_build
fi
