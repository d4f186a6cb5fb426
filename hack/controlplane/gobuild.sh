# shellcheck shell=bash
# gobuild.sh is sourced by hack/controlplane.sh and hack/node/build.sh: the one way this project builds
# a Kubernetes command from the hack/controlplane wrapper module (static, trimmed, version-stamped so
# that `--version` and the apiserver's /version report the pinned release instead of v0.0.0-master).
#
# Usage: kube_init MODULE VERSION TMP DEST TOOL once, then kube_build OUT PKG per binary, where
#   MODULE  the hack/controlplane module directory
#   VERSION the k8s.io/kubernetes version of that module (kube_module_version prints it)
#   TMP     a scratch folder the binaries are written to first
#   DEST    the cache folder they end up in (named in messages only)
#   TOOL    the calling script's name, for messages

# kube_module_version prints the k8s.io/kubernetes version pinned in the module's go.mod.
kube_module_version() {
  awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$1/go.mod"
}

kube_init() {
  kube_module=$1 kube_version=$2 kube_tmp=$3 kube_dest=$4 kube_tool=$5
}

# kube_ldflags prints the linker flags stamping the version into component-base and client-go.
kube_ldflags() {
  local minor
  minor=$(echo "$kube_version" | cut -d. -f2)
  echo "-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"
}

# kube_build OUT PKG builds package PKG of the module into $kube_tmp/OUT, or exits with a message
# saying what to check.
kube_build() {
  local out=$1 pkg=$2
  echo "$kube_tool: building $out ($pkg at $kube_version) into $kube_dest" >&2
  if ! (cd "$kube_module" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$(kube_ldflags)" -o "$kube_tmp/$out" "$pkg"); then
    echo "$kube_tool: building $out failed (see the go output above)." >&2
    echo "  Check that the Go module proxy is reachable (GOPROXY=$(go env GOPROXY)) and that Go is at least $(awk '$1=="go"{print $2}' "$kube_module/go.mod")," >&2
    echo "  then run $kube_tool again; finished binaries in $kube_dest are kept." >&2
    exit 1
  fi
}
