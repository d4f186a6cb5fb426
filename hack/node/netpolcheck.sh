#!/usr/bin/env bash
# netpolcheck.sh proves that the running real node (hack/node/cluster.sh up) enforces NetworkPolicy,
# with pods, as the operator's NetworkPolicies will be enforced in the end-to-end suite:
#
#   1. in namespace netpol-check-a a server pod (nodecheck serve, app=server) and two client pods
#      (role=client and role=other); in namespace netpol-check-b a third client, also role=client;
#   2. no policy: both role=client pods reach the server's pod IP (HTTP);
#   3. a deny-all ingress policy on the server's namespace: the client is refused; the server stays
#      Ready and a GET from the node's namespace still answers (traffic from the node itself, kubelet's
#      probes among it, is always allowed by kube-router: only traffic between pods is filtered);
#   4. beside it, a policy allowing ingress to app=server from pods labelled role=client in the same
#      namespace: the client is allowed again; the role=other pod of the same namespace and the
#      role=client pod of the other namespace are still refused;
#   5. the namespaces are deleted (waiting up to a minute for them to go).
#
# Every step waits for the expected state (a policy takes kube-router's next sync, well under a second
# here) with a timeout, and a missing or non-enforcing kube-router is a failure, never a skip: the
# script first requires kube-router's process (cluster.sh status) and its synced FORWARD chain.
# hack/node/check.sh (make cluster-check) and hack/e2e/run.sh (make test-e2e, before the suite) run it.
#
#   hack/node/netpolcheck.sh [DIR]
#
# DIR, when given, holds what testimages.sh writes (nodecheck.tar, bin/nodecheck); otherwise it is
# built into a temporary folder. The image docker.io/local/nodecheck:v1 is imported when the node lacks it.
set -euo pipefail
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/cluster.sh
STATE=${TILED_E2E_STATE:-/tmp/tiled-e2e}
STATE=${STATE%/}
IMAGE=docker.io/local/nodecheck:v1
NS_A=netpol-check-a
NS_B=netpol-check-b
# shellcheck source=hack/node/kube-router.sh
source "$here/kube-router.sh"

log() { echo "netpolcheck.sh: $*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
k() { "$cluster" exec kubectl "$@"; }
failed=0
fail() { log "FAIL: $*"; failed=1; }

work=""
cleanup() {
  local rc=$?
  [ -z "$work" ] || rm -rf "$work"
  # Best effort (the cluster may already be gone), and waited for: the suite that may follow starts
  # on a node without these pods.
  k delete namespace "$NS_A" "$NS_B" --ignore-not-found --timeout=60s >/dev/null 2>&1 || true
  [ $failed -eq 0 ] || rc=1
  if [ $rc -eq 0 ]; then log "NetworkPolicy enforced (kube-router $KUBE_ROUTER_VERSION)"; else log "FAILED: the node does not enforce NetworkPolicy as it must"; fi
  exit $rc
}
trap cleanup EXIT

# 0. kube-router runs and has synced; the node has the client image.
[ -f "$STATE/env" ] || { log "no cluster is up for $STATE; run hack/node/cluster.sh up"; exit 1; }
status=$("$cluster" status 2>&1 || true)
grep -Eq '^kube-router +running' <<<"$status" || { log "kube-router is not running on the node:"; echo "$status" >&2; failed=1; exit 1; }
if ! "$cluster" exec iptables -w -S KUBE-ROUTER-FORWARD 2>/dev/null | grep -qF -- "--mark $KUBE_ROUTER_SYNC_MARK"; then
  log "kube-router has not synced its firewall: iptables -S KUBE-ROUTER-FORWARD in the node's namespace has no rule with mark $KUBE_ROUTER_SYNC_MARK"
  failed=1
  exit 1
fi
dir=${1:-}
if [ -z "$dir" ]; then
  work=$(mktemp -d /tmp/netpolcheck.XXXXXX)
  dir=$work
  "$here/testimages.sh" "$dir" 2>/dev/null
fi
[ -f "$dir/nodecheck.tar" ] && [ -x "$dir/bin/nodecheck" ] || { log "$dir lacks nodecheck.tar or bin/nodecheck (hack/node/testimages.sh DIR writes them)"; exit 1; }
# shellcheck disable=SC2016 # expanded inside the namespace, from the cluster's env
if ! "$cluster" exec sh -c 'ctr -a "$CONTAINERD_ADDRESS" -n k8s.io images ls -q' | grep -qxF "$IMAGE"; then
  "$cluster" import "$dir/nodecheck.tar"
fi

t0=$(now)
# pod NAMESPACE NAME LABELS ARGS: a restricted pod running the nodecheck image.
pod() {
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1, labels: $3}
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: $4
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
EOF
}
{
  for ns in $NS_A $NS_B; do
    cat <<EOF
---
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
EOF
  done
  # The server: its data folder on an emptyDir; ready through kubelet's probe (node-originated).
  pod $NS_A server '{app: server}' '[serve, -dir, /data, -addr, ":8080"]'
  cat <<EOF
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /healthz, port: http}
      periodSeconds: 1
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, emptyDir: {}}]
EOF
  pod $NS_A client '{role: client}' '[pause]'
  pod $NS_A other '{role: other}' '[pause]'
  pod $NS_B client '{role: client}' '[pause]'
} | k apply --server-side --field-manager netpol-check -f - >/dev/null

for p in $NS_A/server $NS_A/client $NS_A/other $NS_B/client; do
  if ! k -n "${p%/*}" wait --for=condition=Ready "pod/${p#*/}" --timeout=120s >/dev/null; then
    k -n "${p%/*}" describe pod "${p#*/}" >&2 || true
    fail "pod $p not Ready within 120s"
    exit 1
  fi
done
server_ip=$(k -n $NS_A get pod server -o jsonpath='{.status.podIP}')
url=http://$server_ip:8080/
log "pods Ready $(secs "$t0" "$(now)")s after apply; server at $url"

# allowed FROM: the pod FROM (namespace/name) reaches the server; blocked FROM: it is refused.
allowed() {
  local out
  if out=$(k -n "${1%/*}" exec "${1#*/}" -- /nodecheck get -timeout 20s -expect "written by server" "$url" 2>&1); then
    log "  $1 -> server allowed: $out"
  else
    fail "$1 -> server: want allowed, got: $out"
  fi
}
blocked() {
  local out
  if out=$(k -n "${1%/*}" exec "${1#*/}" -- /nodecheck blocked -timeout 20s "$url" 2>&1); then
    log "  $1 -> server refused: $out"
  else
    fail "$1 -> server: want refused by the policy, got: $out"
  fi
}

log "1. no NetworkPolicy: everything is allowed"
allowed $NS_A/client
allowed $NS_B/client

log "2. deny-all ingress in $NS_A"
t=$(now)
k apply --server-side --field-manager netpol-check -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all-ingress, namespace: $NS_A}
spec:
  podSelector: {}
  policyTypes: [Ingress]
EOF
blocked $NS_A/client
log "  enforced $(secs "$t" "$(now)")s after apply (including the confirming attempts)"
# Node-originated traffic is not filtered: the server stays Ready through kubelet's probes, and a GET
# from the node's namespace answers.
if out=$("$cluster" exec "$dir/bin/nodecheck" get -timeout 10s -expect "written by server" "$url" 2>&1); then
  log "  node namespace -> server allowed (node-originated traffic is not filtered): $out"
else
  fail "node namespace -> server: want allowed (kube-router lets the node's own traffic through), got: $out"
fi
[ "$(k -n $NS_A get pod server -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ] ||
  fail "the server is no longer Ready under deny-all: kubelet's probes were filtered"

log "3. allow ingress to app=server from role=client pods of $NS_A"
t=$(now)
k apply --server-side --field-manager netpol-check -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-clients, namespace: $NS_A}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {role: client}}
    ports:
    - {protocol: TCP, port: 8080}
EOF
allowed $NS_A/client
log "  allowed again $(secs "$t" "$(now)")s after apply"
blocked $NS_A/other
blocked $NS_B/client

log "done in $(secs "$t0" "$(now)")s"
