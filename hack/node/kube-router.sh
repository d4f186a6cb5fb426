#!/usr/bin/env bash
# kube-router.sh prints the path of the kube-router binary the real node runs as its NetworkPolicy
# enforcer, building it first when it is not in the cache:
#
#   $(tiled_cache_root)/tools/kube-router/<KUBE_ROUTER_VERSION>-<recipe hash>/kube-router
#
# (the root is ${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tiled-operator}, hack/lib/cache.sh).
# hack/node/build.sh calls it, so `make node`, `make cluster`, `make test-e2e` and .ci/run build it once
# per machine; hack/node/cluster.sh starts it inside the node's network namespace with only its
# firewall (network policy) controller on. See docs/real-node.md, "NetworkPolicy: kube-router".
#
# Why kube-router, and why this version:
#   - the bridge CNI plugin enforces no NetworkPolicy, and the operator renders NetworkPolicies that the
#     end-to-end suite must see enforced. kube-router's firewall controller is plain iptables + ipset,
#     which this kernel has (kube-network-policies needs NFT_QUEUE, which this kernel lacks).
#   - github.com/cloudnativelabs/kube-router/v2 v2.1.0 is the only version the Go module proxy serves
#     on these machines (newer ones are refused). Security flaws are reported against v2.1.0 (mostly
#     through its dependencies). That is accepted here because the binary is a test harness only: it
#     runs inside the test node's private network namespace, which has no route off the machine,
#     talks only to the test node's own API server, and is never shipped, packaged or put in an image.
#     To narrow it anyway, the build raises the dependencies below to the newest patch release the
#     proxy serves for the same minor version (the build was checked to succeed with them). Others
#     (golang.org/x/net v0.21.0 has no patch release) stay as v2.1.0's go.mod has them.
#
# Built by hack/lib/gotool.sh: a wrapper module (go get + go build; `go install pkg@version` would
# build with v2.1.0's own go.mod and could not take the dependency raises), static (CGO off), trimmed,
# with the version stamped in and checked (`kube-router --version`), the raises checked in the
# binary's build information (`go version -m`). A cold build is about 9 minutes on two cores (nice
# 10); later calls print the path at once. Concurrent callers wait on a lock, and the binary appears
# atomically. A change of the pin or of a raise is a new recipe hash, so a new folder. No root needed
# to build; running it needs the Debian packages ipset and iptables (hack/node/build.sh installs them).
#
#   hack/node/kube-router.sh        build if needed, print the path
#   source hack/node/kube-router.sh KUBE_ROUTER_VERSION, KUBE_ROUTER_SYNC_MARK, kube_router_bin, kube_router_build

# The one pin.
KUBE_ROUTER_MODULE=github.com/cloudnativelabs/kube-router/v2
KUBE_ROUTER_VERSION=v2.1.0
# Patch-level raises of v2.1.0's dependencies (module@version), applied with `go get` after the pin
# (gotool_build --dep: part of the recipe hash, checked in the built binary with `go version -m`).
KUBE_ROUTER_DEP_PATCHES=(
	google.golang.org/grpc@v1.62.1
	github.com/docker/docker@v25.0.6+incompatible
)

# kube-router's first full sync of its firewall is done once its chain KUBE-ROUTER-FORWARD (in the
# node's network namespace) holds the rule accepting packets marked 0x20000, the mark its policy
# chains set on traffic a policy allows (`iptables -S KUBE-ROUTER-FORWARD` shows "--mark
# 0x20000/0x20000"). Until then no NetworkPolicy is enforced: cluster.sh up waits for it, and
# netpolcheck.sh requires it.
# shellcheck disable=SC2034 # read by the scripts that source this one
KUBE_ROUTER_SYNC_MARK=0x20000/0x20000

# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/gotool.sh"

# kube_router_recipe FN runs FN (gotool_build, gotool_path or gotool_key) with kube-router's recipe:
# cmd/kube-router with the dependency patches, static, the version stamped in and checked with
# `kube-router --version`.
kube_router_recipe() {
	local d deps=()
	for d in "${KUBE_ROUTER_DEP_PATCHES[@]}"; do deps+=(--dep "$d"); done
	"$1" kube-router "$KUBE_ROUTER_MODULE@$KUBE_ROUTER_VERSION" "$KUBE_ROUTER_MODULE/cmd/kube-router" "${deps[@]}" \
		--ldflags "-X $KUBE_ROUTER_MODULE/pkg/version.Version=$KUBE_ROUTER_VERSION -X $KUBE_ROUTER_MODULE/pkg/version.BuildDate=module-proxy" \
		--check --version --expect "version $KUBE_ROUTER_VERSION" --about "about 9 minutes on two cores"
}

# kube_router_bin prints the cached binary's path (it may not exist yet).
kube_router_bin() { kube_router_recipe gotool_path; }

# kube_router_build builds cmd/kube-router into the cache unless it is there, and prints its path.
# Progress and errors go to stderr.
kube_router_build() { kube_router_recipe gotool_build; }

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	kube_router_build
fi
