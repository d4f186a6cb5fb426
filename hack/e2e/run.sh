#!/usr/bin/env bash
# run.sh is `make test-e2e`: the end-to-end suite on a real single node.
#   1. builds (or reuses from the cache) the control plane, the node's binaries and the images;
#   2. brings the cluster up inside its own network namespace (hack/node/cluster.sh up) and proves it
#      enforces NetworkPolicy (hack/node/netpolcheck.sh: the suite's policy cases rely on it; a node
#      that does not enforce them fails here, before the suite);
#   3. runs the compiled suite (test/e2e, build tag e2e) inside that namespace;
#   4. writes bench/e2e.json and tears the cluster down, failing if the host is not as it was.
# E2E_KEEP=1 leaves the cluster up afterwards (then `make cluster-down`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$(pwd)
export TILED_E2E_STATE=${TILED_E2E_STATE:-/tmp/tiled-e2e}
state=$TILED_E2E_STATE

step() { printf '\n=== e2e: %s (%ss)\n' "$*" "$SECONDS"; }

step "control plane"
hack/controlplane.sh >/dev/null
step "node binaries and Debian packages"
hack/node/build.sh >/dev/null
step "images"
hack/images/build.sh

step "compile the suite"
mkdir -p "$repo/bin"
CGO_ENABLED=0 go test -c -tags e2e -o "$repo/bin/e2e.test" ./test/e2e/
# The kubectl plugin the backup case runs as an admin would (kubectl tiled backup).
CGO_ENABLED=0 go build -o "$repo/bin/kubectl-tiled" ./cmd/kubectl-tiled

# failures prints what each failed case logged, from the suite's output: its cases run in parallel
# and interleave their lines for half an hour, so this comes last, where a reader looks first.
failures() {
  if [ "$1" != 0 ] && [ -s "$state/e2e.log" ]; then
    go run ./hack/testfailures -lines 60 "$state/e2e.log" || true
  fi
}

teardown() {
  rc=$?
  if [ "${E2E_KEEP:-}" = 1 ]; then
    echo "e2e: E2E_KEEP=1: the cluster stays up; hack/node/cluster.sh exec kubectl get pods -A; make cluster-down"
    failures "$rc"
    exit $rc
  fi
  step "teardown"
  if ! hack/node/cluster.sh down; then
    echo "e2e: teardown left the host changed (see above)" >&2
    rc=1
  fi
  failures "$rc"
  exit $rc
}
trap teardown EXIT

step "cluster up"
hack/node/cluster.sh down >/dev/null 2>&1 || true
hack/node/cluster.sh up

step "the node enforces NetworkPolicy (kube-router)"
hack/node/netpolcheck.sh

step "suite"
mkdir -p bench
# KUBECONFIG, KUBECTL, STATE, AUDIT_LOG, ... of the running cluster.
set -a; . "$state/env"; set +a
# The previous release's tree (its config/default), extracted by hack/images/build.sh.
# shellcheck source=hack/lib/cache.sh
previous=$(. hack/lib/cache.sh && tiled_cache_root)/releases/$(head -n1 hack/previous-release)
hack/node/cluster.sh exec env E2E_REPO="$repo" E2E_RESULTS="$repo/bench/e2e.json" E2E_PREVIOUS_RELEASE="$previous" \
  "$repo/bin/e2e.test" -test.v -test.timeout "${E2E_TIMEOUT:-50m}" ${E2E_RUN:+-test.run "$E2E_RUN"} 2>&1 | tee "$state/e2e.log"
