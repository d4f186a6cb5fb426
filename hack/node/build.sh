#!/usr/bin/env bash
# build.sh prepares everything hack/node/cluster.sh runs, once per pinned version, and prints the folder
# holding the node's binaries:
#
#   - the control plane (kube-apiserver, etcd, kube-controller-manager) through hack/controlplane.sh;
#   - kubelet, kube-scheduler, kube-proxy and kubectl at the k8s.io/kubernetes version of the
#     hack/controlplane module, built from the Go module proxy, and CoreDNS (hack/node/coredns.sh) into
#     $(tiled_cache_root)/node/<kubernetes version>-<inputs hash>/, the hash (node_inputs below) being
#     that of what shapes these binaries: the pins, hack/controlplane's go.mod and go.sum,
#     hack/controlplane/gobuild.sh and the build below (not the Debian pins, which shape the host);
#   - kube-router (the node's NetworkPolicy enforcer, its firewall controller only) through
#     hack/node/kube-router.sh, into $(tiled_cache_root)/tools/kube-router/<version>-<recipe hash>/;
#   - containerd, runc, the CNI plugins, iptables, iproute2, conntrack and ipset (which kube-router
#     runs) from Debian, at the versions pinned below (installed with apt-get when missing or different).
#
#   hack/node/build.sh          build or check everything, print the node's folder
#   hack/node/build.sh --dest   only print that folder (nothing installed, built or checked)
#
# Idempotent: with everything in place it only checks and prints (well under a second). Every clone on
# the machine shares the cache; a second caller waits on the lock and reuses the first one's build.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hack=$(dirname "$here")
module="$hack/controlplane"
# shellcheck source=hack/controlplane/gobuild.sh
. "$module/gobuild.sh"
version=$(kube_module_version "$module")
[ -n "$version" ] || { echo "build.sh: cannot read the k8s.io/kubernetes version from $module/go.mod" >&2; exit 1; }

# COREDNS_VERSION and coredns_build (hack/lib/gotool.sh's cache), shared with hack/images/build.sh.
# shellcheck source=hack/node/coredns.sh
. "$here/coredns.sh"
# Debian 12 (bookworm) packages, checked with `apt-cache policy` on this machine kind. A security update
# that replaces one of them makes apt-get refuse the old version: update the pin here (and in
# docs/real-node.md) after checking the new one runs the cluster.
debs=(
  containerd=1.6.20~ds1-1+deb12u3
  runc=1.1.5+ds1-1+deb12u1
  containernetworking-plugins=1.1.1+ds1-3+b5
  iptables=1.8.9-2
  iproute2=6.1.0-3
  conntrack=1:1.4.7-1+b2
  # kube-router's firewall keeps the pods each NetworkPolicy selects in ipsets (`ipset restore`).
  ipset=7.17-1
  libipset13=7.17-1
)

# shellcheck source=hack/lib/cache.sh
. "$hack/lib/cache.sh"
cache_root=$(tiled_cache_root)
bins=(kubelet kube-scheduler kube-proxy kubectl coredns)

# node_build builds what $dest lacks (step 3 below), in $tmp.
node_build() {
  kube_init "$module" "$version" "$tmp" "$dest" hack/node/build.sh
  mkdir -p "$dest"
  for b in kubelet kube-scheduler kube-proxy kubectl; do
    [ -x "$dest/$b" ] && continue
    kube_build "$b" "k8s.io/kubernetes/cmd/$b"
    mv "$tmp/$b" "$dest/$b"
  done
  if ! "$dest/coredns" -version 2>/dev/null | grep -qx "CoreDNS-${COREDNS_VERSION#v}"; then
    local cdns
    cdns=$(coredns_build) || { echo "build.sh: hack/node/coredns.sh failed (see above)" >&2; exit 1; }
    cp "$cdns" "$tmp/coredns"
    mv "$tmp/coredns" "$dest/coredns"
  fi
}

# node_inputs prints what shapes the node's binaries; their folder is keyed by its hash. Raise the
# first line's number when something outside it changes them.
node_inputs() {
  printf '%s\n' "node inputs 1" "kubernetes $version" "coredns $(coredns_recipe gotool_key)" "bins ${bins[*]}"
  declare -f node_build
  cat "$module/gobuild.sh" "$module/go.mod" "$module/go.sum"
}
node_key=$(node_inputs | sha256sum | cut -c1-12)
dest="$cache_root/node/$version-$node_key"
# --dest: print the folder and do nothing else (to find or warm the cache).
if [ "${1:-}" = --dest ]; then
  echo "$dest"
  exit 0
fi

# 1. Debian packages.
missing=()
for d in "${debs[@]}"; do
  pkg=${d%%=*} want=${d#*=}
  have=$(dpkg-query -W -f '${db:Status-Abbrev}${Version}' "$pkg" 2>/dev/null || true)
  [ "$have" = "ii $want" ] || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "build.sh: need root to install ${missing[*]} with apt-get" >&2; exit 1; }
  echo "build.sh: installing ${missing[*]} from Debian" >&2
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades "${missing[@]}" >&2; }
  if ! apt_install; then
    echo "build.sh: apt-get install failed; refreshing the package lists once and retrying" >&2
    apt-get update -q >&2
    apt_install || {
      echo "build.sh: cannot install ${missing[*]}. If Debian replaced one of these versions (apt-cache policy NAME)," >&2
      echo "  update the pin in hack/node/build.sh and docs/real-node.md." >&2
      exit 1
    }
  fi
fi
for c in containerd ctr runc iptables ip conntrack ipset nsenter setsid flock openssl; do
  command -v "$c" >/dev/null 2>&1 || { echo "build.sh: $c is not on PATH after installing the pinned packages" >&2; exit 1; }
done
[ -x /usr/lib/cni/bridge ] || { echo "build.sh: /usr/lib/cni/bridge is missing (containernetworking-plugins)" >&2; exit 1; }

# 2. The control plane (waits on its own lock when another build of it is running).
"$hack/controlplane.sh" >/dev/null

# 2b. kube-router, the NetworkPolicy enforcer (its own cache and lock; cluster.sh asks
#     hack/node/kube-router.sh for the path again, which is instant once built).
"$here/kube-router.sh" >/dev/null || { echo "build.sh: hack/node/kube-router.sh failed (see above)" >&2; exit 1; }

# 3. Node binaries.
complete() {
  for b in "${bins[@]}"; do [ -x "$dest/$b" ] || return 1; done
  "$dest/coredns" -version 2>/dev/null | grep -qx "CoreDNS-${COREDNS_VERSION#v}" || return 1
}

if complete; then
  echo "$dest"
  exit 0
fi

command -v go >/dev/null 2>&1 || {
  echo "build.sh: the go command is not on PATH; install Go $(awk '$1=="go"{print $2}' "$module/go.mod") or newer and retry" >&2
  exit 1
}

mkdir -p "$cache_root/node"
exec 9>"$cache_root/node/.lock"
if ! flock -n 9; then
  echo "build.sh: another build of the node binaries is running; waiting for it" >&2
  flock 9
fi
if complete; then
  echo "$dest"
  exit 0
fi

tmp=$(mktemp -d "$cache_root/node/.build-$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
node_build

complete || { echo "build.sh: $dest is still incomplete after the build" >&2; exit 1; }
echo "$dest"
