#!/usr/bin/env bash
# testimages.sh DIR writes images only hack/node's own checks need, as docker-archive tars in DIR (and
# the binaries in DIR/bin):
#
#   nodecheck.tar  docker.io/local/nodecheck:v1 (hack/node/nodecheck, static, user 65532)
#   with --standins also:
#   pause.tar      docker.io/local/pause:3.10      (nodecheck pause: waits for SIGTERM)
#   coredns.tar    docker.io/local/coredns:v1.15.0 (the CoreDNS hack/node/build.sh built)
#   metrics-server.tar docker.io/local/metrics-server:<version> (hack/node/metrics-server.sh's binary,
#                  built into the images cache on first use, a few minutes)
#
# The stand-ins let the node be tried before hack/images/build.sh has produced the real pause,
# CoreDNS and metrics-server images: TILED_E2E_IMAGES=DIR hack/node/cluster.sh up. Never point DIR at the images cache
# (images/current belongs to hack/images).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

standins=false
[ "${1:-}" = --standins ] && { standins=true; shift; }
[ $# -eq 1 ] || { echo "usage: testimages.sh [--standins] DIR" >&2; exit 2; }
dir=$1
mkdir -p "$dir/bin"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/bin/nodecheck" ./hack/node/nodecheck &&
  go build -o "$dir/bin/testimage" ./hack/node/testimage)
mk() { "$dir/bin/testimage" "$@"; }
mk -o "$dir/nodecheck.tar" -name docker.io/local/nodecheck:v1 -entrypoint /nodecheck "$dir/bin/nodecheck:/nodecheck"
if $standins; then
  nodebin=$("$here/build.sh")
  mk -o "$dir/pause.tar" -name docker.io/local/pause:3.10 -entrypoint "/pause pause" "$dir/bin/nodecheck:/pause"
  mk -o "$dir/coredns.tar" -name docker.io/local/coredns:v1.15.0 -entrypoint /coredns "$nodebin/coredns:/coredns"
  # shellcheck source=hack/node/metrics-server.sh
  source "$here/metrics-server.sh"
  msbin=$(metrics_server_build)
  mk -o "$dir/metrics-server.tar" -name "docker.io/local/metrics-server:$METRICS_SERVER_VERSION" -entrypoint /metrics-server \
    "$msbin:/metrics-server"
fi
ls -l "$dir"/*.tar >&2
