#!/usr/bin/env bash
# promtool.sh builds Prometheus's promtool from the Go module proxy, once per pinned version and recipe,
# into $(tiled_cache_root)/tools/promtool/<module version>-<recipe hash>/ (hack/lib/gotool.sh), and
# prints the binary's path (the value for PROMTOOL, which hack/test.sh sets for the tests of
# config/components/prometheus).
#
#   hack/prometheus/promtool.sh            build if needed, print the path of promtool
#   TILED_OPERATOR_CACHE=/path ...         use another cache root (default: ${XDG_CACHE_HOME:-~/.cache}/tiled-operator)
#
# The version and the build are prometheus.sh's (one pin for promtool and the server the e2e runs):
# cmd/promtool of github.com/prometheus/prometheus, in a throwaway module, with the build tag
# remove_all_sd (promtool needs no service discovery; the tag leaves out the cloud SDKs) and the
# version stamped in, so that `promtool --version` reports the release (checked after the build).
# Every clone on the machine shares the cache and a lock, so only the first caller builds: 5m20s on 2
# cores from an empty module and build cache.
set -euo pipefail
# shellcheck source=hack/prometheus/prometheus.sh
source "$(dirname "${BASH_SOURCE[0]}")/prometheus.sh"
promtool_build
