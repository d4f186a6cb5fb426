#!/usr/bin/env bash
# prometheus.sh prints the path of the Prometheus server binary, building it first when it is not in
# the cache:
#
#   ${TILED_OPERATOR_CACHE:-~/.cache/tiled-operator}/prometheus/<PROMETHEUS_VERSION>/prometheus
#
# beside promtool (hack/prometheus/promtool.sh builds it with promtool_build below, the same pin). The one definition of the
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
#   source hack/prometheus/prometheus.sh PROMETHEUS_VERSION, prometheus_bin, prometheus_build, promtool_build

# Pinned, for the server and promtool alike (promtool.sh builds it with promtool_build).
PROMETHEUS_MODULE_VERSION=v0.316.0
# v0.MMM.P is Prometheus 3.(MMM-300).P
PROMETHEUS_VERSION=3.16.0

# prometheus_cmd_bin NAME prints the path of the cached binary of cmd/NAME (it may not exist yet).
prometheus_cmd_bin() {
	echo "${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-${HOME:?set HOME, XDG_CACHE_HOME or TILED_OPERATOR_CACHE}/.cache}/tiled-operator}/prometheus/$PROMETHEUS_VERSION/$1"
}

# prometheus_bin prints the cached server binary's path (it may not exist yet).
prometheus_bin() { prometheus_cmd_bin prometheus; }

# prometheus_cmd_build NAME TAGS builds cmd/NAME of the module with the build tags TAGS into the cache
# unless it is there, and prints its path. Progress and errors go to stderr.
prometheus_cmd_build() (
	set -euo pipefail
	local name=$1 tags=$2 bin dir tmp
	bin=$(prometheus_cmd_bin "$name")
	dir=$(dirname "$bin")
	[[ -x $bin ]] && { echo "$bin"; exit 0; }
	command -v go >/dev/null 2>&1 || {
		echo "prometheus.sh: the go command is not on PATH; install Go 1.26 or newer and retry" >&2
		exit 1
	}
	mkdir -p "$dir"
	exec 8>"$dir/.$name.lock"
	if ! flock -n 8; then
		echo "prometheus.sh: another build of $name is running; waiting for it" >&2
		flock 8
	fi
	[[ -x $bin ]] && { echo "$bin"; exit 0; }
	# Builds a killed caller left behind (the lock is ours: none is running).
	rm -rf "$dir/.$name-build."*
	tmp=$(mktemp -d "$dir/.$name-build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "prometheus.sh: building $name (github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION, Prometheus $PROMETHEUS_VERSION) from the Go module proxy (a few minutes, once)" >&2
	# The go commands do not inherit the lock's descriptor: a go process orphaned by a killed caller
	# must not hold the lock. Each step must succeed.
	(
		cd "$tmp" &&
			export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 &&
			{ go mod init "$name-build" >/dev/null 2>&1; } &&
			nice -n 10 go get "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION" &&
			nice -n 10 go build -trimpath -tags "$tags" \
				-ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION -X github.com/prometheus/common/version.Branch=HEAD -X github.com/prometheus/common/version.Revision=$PROMETHEUS_MODULE_VERSION" \
				-o "$tmp/$name" "github.com/prometheus/prometheus/cmd/$name"
	) 8>&- >&2 || {
		echo "prometheus.sh: building $name failed (see the go output above)." >&2
		echo "  Check that the Go module proxy is reachable (GOPROXY=$(go env GOPROXY)), then run it again." >&2
		exit 1
	}
	mv "$tmp/$name" "$bin"
	echo "$bin"
)

# prometheus_build builds the server (only Kubernetes service discovery) and prints its path.
prometheus_build() { prometheus_cmd_build prometheus remove_all_sd,enable_kubernetes_sd; }

# promtool_build builds promtool (no service discovery) and prints its path.
promtool_build() { prometheus_cmd_build promtool remove_all_sd; }

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	prometheus_build
fi
