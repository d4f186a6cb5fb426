#!/usr/bin/env bash
# kube-router.sh prints the path of the kube-router binary the real node runs as its NetworkPolicy
# enforcer, building it first when it is not in the cache:
#
#   ${TILED_OPERATOR_CACHE:-~/.cache/tiled-operator}/kube-router/<KUBE_ROUTER_VERSION>/kube-router
#
# (like the other caches here, the default root is ${XDG_CACHE_HOME:-~/.cache}/tiled-operator).
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
# Built in a throwaway module (go get + go build, like hack/prometheus/prometheus.sh; `go install
# pkg@version` would build with v2.1.0's own go.mod and could not take the dependency raises), static
# (CGO off), trimmed, with
# the version stamped in (`kube-router --version`). A cold build is about 9 minutes on two cores (nice
# 10); later calls print the path at once. Concurrent callers wait on a lock beside the binary, and the
# binary appears atomically (built in a temporary folder, then moved). No root needed to build; running
# it needs the Debian packages ipset and iptables (hack/node/build.sh installs them).
#
#   hack/node/kube-router.sh        build if needed, print the path
#   source hack/node/kube-router.sh KUBE_ROUTER_VERSION, kube_router_bin, kube_router_build

# The one pin.
KUBE_ROUTER_MODULE=github.com/cloudnativelabs/kube-router/v2
KUBE_ROUTER_VERSION=v2.1.0
# Patch-level raises of v2.1.0's dependencies (module@version), applied with `go get` after the pin.
# A cached binary whose build information (`go version -m`) lacks one of these is rebuilt.
KUBE_ROUTER_DEP_PATCHES=(
	google.golang.org/grpc@v1.62.1
	github.com/docker/docker@v25.0.6+incompatible
)

# kube-router's first full sync of its firewall is done once its chain KUBE-ROUTER-FORWARD (in the
# node's network namespace) holds the rule accepting packets marked 0x20000, the mark its policy
# chains set on traffic a policy allows (`iptables -S KUBE-ROUTER-FORWARD` shows "--mark
# 0x20000/0x20000"). Until then no NetworkPolicy is enforced: cluster.sh up waits for it, and
# netpolcheck.sh requires it.
KUBE_ROUTER_SYNC_MARK=0x20000/0x20000

# kube_router_bin prints the cached binary's path (it may not exist yet).
kube_router_bin() {
	echo "${TILED_OPERATOR_CACHE:-${XDG_CACHE_HOME:-${HOME:?set HOME, XDG_CACHE_HOME or TILED_OPERATOR_CACHE}/.cache}/tiled-operator}/kube-router/$KUBE_ROUTER_VERSION/kube-router"
}

# kube_router_current BIN: BIN exists and was built with the pin and every dependency patch (checked
# with `go version -m` when go is on PATH; without go, an existing binary is taken as it is).
kube_router_current() {
	local bin=$1 info d
	[[ -x $bin ]] || return 1
	command -v go >/dev/null 2>&1 || return 0
	# Lines of `go version -m`: "<tab>mod<tab>PATH<tab>VERSION<tab>SUM", "<tab>dep<tab>PATH<tab>VERSION<tab>SUM";
	# compared as fields, not as patterns (versions hold dots and "+incompatible").
	info=$(go version -m "$bin" 2>/dev/null | awk '$1 == "mod" || $1 == "dep" {print $1, $2 "@" $3}') || return 1
	grep -qxF "mod $KUBE_ROUTER_MODULE@$KUBE_ROUTER_VERSION" <<<"$info" || return 1
	for d in "${KUBE_ROUTER_DEP_PATCHES[@]}"; do
		grep -qxF "dep $d" <<<"$info" || return 1
	done
}

# kube_router_build builds cmd/kube-router into the cache unless a current binary is there, and
# prints its path. Progress and errors go to stderr.
kube_router_build() (
	set -euo pipefail
	local bin dir tmp
	bin=$(kube_router_bin)
	dir=$(dirname "$bin")
	kube_router_current "$bin" && { echo "$bin"; exit 0; }
	command -v go >/dev/null 2>&1 || {
		echo "kube-router.sh: the go command is not on PATH; install Go 1.26 or newer and retry" >&2
		exit 1
	}
	mkdir -p "$dir"
	exec 8>"$dir/.kube-router.lock"
	if ! flock -n 8; then
		echo "kube-router.sh: another build of kube-router is running; waiting for it" >&2
		flock 8
	fi
	kube_router_current "$bin" && { echo "$bin"; exit 0; }
	# Builds a killed caller left behind (the lock is ours: none is running).
	rm -rf "$dir/.kube-router-build."*
	tmp=$(mktemp -d "$dir/.kube-router-build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "kube-router.sh: building kube-router ($KUBE_ROUTER_MODULE $KUBE_ROUTER_VERSION) from the Go module proxy (about 9 minutes on two cores, once)" >&2
	# The go commands do not inherit the lock's descriptor: a go process orphaned by a killed caller
	# must not hold the lock. Each step must succeed.
	(
		cd "$tmp" &&
			export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 &&
			{ go mod init kube-router-build >/dev/null 2>&1; } &&
			nice -n 10 go get "$KUBE_ROUTER_MODULE@$KUBE_ROUTER_VERSION" &&
			nice -n 10 go get "${KUBE_ROUTER_DEP_PATCHES[@]}" &&
			nice -n 10 go build -trimpath \
				-ldflags "-s -w -X $KUBE_ROUTER_MODULE/pkg/version.Version=$KUBE_ROUTER_VERSION -X $KUBE_ROUTER_MODULE/pkg/version.BuildDate=module-proxy" \
				-o "$tmp/kube-router" "$KUBE_ROUTER_MODULE/cmd/kube-router"
	) 8>&- >&2 || {
		echo "kube-router.sh: building kube-router failed (see the go output above)." >&2
		echo "  Check that the Go module proxy is reachable (GOPROXY=$(go env GOPROXY)) and still serves $KUBE_ROUTER_MODULE@$KUBE_ROUTER_VERSION" >&2
		echo "  and ${KUBE_ROUTER_DEP_PATCHES[*]}, then run it again." >&2
		exit 1
	}
	kube_router_current "$tmp/kube-router" || {
		echo "kube-router.sh: the built binary's module information does not show $KUBE_ROUTER_VERSION and ${KUBE_ROUTER_DEP_PATCHES[*]} (go version -m)" >&2
		exit 1
	}
	mv "$tmp/kube-router" "$bin"
	echo "$bin"
)

# Run, not sourced: print the path, building first when needed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	kube_router_build
fi
