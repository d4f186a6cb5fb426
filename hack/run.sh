#!/usr/bin/env bash
# run.sh is `make run`: it runs the operator against the current kubeconfig when a cluster answers,
# and otherwise starts a local control plane (hack/runlocal) with the CRDs and samples installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p bin

if kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "Using the cluster of the current kubeconfig context: $(kubectl config current-context)"
  echo "Installing the CRDs with server-side apply..."
  kubectl apply --server-side --field-manager=tiled-operator -f config/crd/bases
  go build -o bin/manager ./cmd/manager
  exec bin/manager --metrics-bind-address="${METRICS_BIND_ADDRESS:-127.0.0.1:8080}" --metrics-secure=false \
    --health-probe-bind-address="${HEALTH_PROBE_BIND_ADDRESS:-127.0.0.1:8081}" "$@"
fi

echo "No cluster answers at the current kubeconfig; starting a local control plane (no node: no pod"
echo "starts there; 'make cluster' starts a real single-node cluster)."
# The control plane is built once per Kubernetes version into the user's cache (about 13 minutes the
# first time on 2 cores).
hack/controlplane.sh >/dev/null
go build -o bin/runlocal ./hack/runlocal
exec bin/runlocal "$@"
