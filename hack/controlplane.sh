#!/usr/bin/env bash
# controlplane.sh builds kube-apiserver, etcd and kube-controller-manager from the Go module proxy,
# once per pinned Kubernetes version, into a cache folder outside the checkout, and prints that
# folder (the value for KUBEBUILDER_ASSETS).
#
#   hack/controlplane.sh            build if needed, print the assets folder
#   TILED_OPERATOR_CACHE=/path ...  use another cache root (default: ${XDG_CACHE_HOME:-~/.cache}/tiled-operator)
#
# Every clone on the machine shares the cache, so only the first build pays (about 10 minutes for
# kube-apiserver and etcd, about 3 more for kube-controller-manager, on 2 cores from a cold cache).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/controlplane"
# shellcheck source=hack/controlplane/gobuild.sh
. "$module/gobuild.sh"
version=$(kube_module_version "$module")
[ -n "$version" ] || { echo "controlplane.sh: cannot read the k8s.io/kubernetes version from $module/go.mod" >&2; exit 1; }

# shellcheck source=hack/lib/cache.sh
. "$here/lib/cache.sh"
cache_root=$(tiled_cache_root)
dest="$cache_root/controlplane/$version"
bins=(kube-apiserver etcd kube-controller-manager)

complete() {
  for b in "${bins[@]}"; do [ -x "$dest/$b" ] || return 1; done
}

if complete; then
  echo "$dest"
  exit 0
fi

command -v go >/dev/null 2>&1 || {
  echo "controlplane.sh: the go command is not on PATH; install Go $(awk '$1=="go"{print $2}' "$module/go.mod") or newer and retry" >&2
  exit 1
}

mkdir -p "$cache_root/controlplane"
# One build at a time per cache: a second caller waits for the first instead of building twice.
exec 9>"$cache_root/controlplane/.lock"
if ! flock -n 9; then
  echo "controlplane.sh: another build of the control plane is running; waiting for it" >&2
  flock 9
fi
if complete; then
  echo "$dest"
  exit 0
fi

tmp=$(mktemp -d "$cache_root/controlplane/.build-$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
kube_init "$module" "$version" "$tmp" "$dest" hack/controlplane.sh
build() { kube_build "$@"; }

mkdir -p "$dest"
for b in "${bins[@]}"; do
  [ -x "$dest/$b" ] && continue
  case $b in
    kube-apiserver) build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver ;;
    etcd) build etcd ./cmd/etcd ;;
    kube-controller-manager) build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager ;;
  esac
  mv "$tmp/$b" "$dest/$b"
done
echo "$dest"
