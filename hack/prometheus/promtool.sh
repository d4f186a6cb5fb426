#!/usr/bin/env bash
# promtool.sh builds Prometheus's promtool from the Go module proxy, once per pinned version, into a
# cache folder outside the checkout, and prints the binary's path (the value for PROMTOOL, which
# hack/test.sh sets for the tests of config/components/prometheus).
#
#   hack/prometheus/promtool.sh            build if needed, print the path of promtool
#   TILED_OPERATOR_CACHE=/path ...         use another cache root (default: $XDG_CACHE_HOME or ~/.cache)
#
# The module github.com/prometheus/prometheus numbers Prometheus 3.x.y as v0.3xx.y (v0.316.0 is
# Prometheus 3.16.0). It is built in a throwaway module with the build tag remove_all_sd (promtool
# needs no service discovery; the tag leaves out the cloud SDKs) and the version stamped in, so that
# `promtool --version` reports the release. Every clone on the machine shares the cache and a lock,
# so only the first caller builds: 5m20s on 2 cores from an empty module and build cache.
set -euo pipefail

module_version=v0.316.0
# v0.MMM.P is Prometheus 3.(MMM-300).P
minor=${module_version#v0.}
patch=${minor#*.}
minor=${minor%%.*}
version="3.$((10#$minor - 300)).$patch"

cache_root=${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-${HOME:?promtool.sh: set HOME, XDG_CACHE_HOME or TILED_OPERATOR_CACHE}/.cache}/tiled-operator}
dest="$cache_root/prometheus/$version"
bin="$dest/promtool"

if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || {
  echo "promtool.sh: the go command is not on PATH; install Go 1.26 or newer and retry" >&2
  exit 1
}

mkdir -p "$cache_root/prometheus"
# One build at a time per cache: a second caller waits for the first instead of building twice.
exec 9>"$cache_root/prometheus/.lock"
if ! flock -n 9; then
  echo "promtool.sh: another build of promtool is running; waiting for it" >&2
  flock 9
fi
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

# Builds a killed caller left behind (the lock is ours: none is running).
rm -rf "$cache_root/prometheus"/.build-*
tmp=$(mktemp -d "$cache_root/prometheus/.build-$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "promtool.sh: building promtool (github.com/prometheus/prometheus $module_version, Prometheus $version) into $dest" >&2
fail() {
  echo "promtool.sh: building promtool failed (see the go output above)." >&2
  echo "  Check that the Go module proxy is reachable (GOPROXY=$(go env GOPROXY)), then run hack/prometheus/promtool.sh again." >&2
  exit 1
}
# Each step must succeed (a `( ... ) || fail` subshell would run on past a failed step), and the go
# commands do not inherit the lock's descriptor: a go process orphaned by a killed caller must not
# hold the lock.
build() {
  cd "$tmp" &&
    go mod init promtool-build >/dev/null 2>&1 &&
    go get "github.com/prometheus/prometheus@$module_version" &&
    go build -trimpath -tags remove_all_sd \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version -X github.com/prometheus/common/version.Branch=HEAD -X github.com/prometheus/common/version.Revision=$module_version" \
      -o "$tmp/promtool" github.com/prometheus/prometheus/cmd/promtool
}
(export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0; build) 9>&- || fail
mkdir -p "$dest"
mv "$tmp/promtool" "$bin"
echo "$bin"
