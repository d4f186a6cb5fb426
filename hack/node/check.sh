#!/usr/bin/env bash
# check.sh proves the real node works end to end, then takes it away and proves the host is as before:
#
#   1. cluster.sh up (timings printed by it);
#   2. a StatefulSet (restricted Pod Security) with a PVC on the hostPath pool becomes Ready, writing
#      its volume; the claim is Bound and the file is on the host under $STATE/pv;
#   3. a Job pod resolves the StatefulSet's Service DNS names with its own /etc/resolv.conf (kubelet's
#      clusterDNS) and reads the first pod's data through the ClusterIP Service;
#   4. from the namespace, as tests run: DNS at $DNS_IP through the service route, HTTP to the
#      ClusterIP, `kubectl logs` and `kubectl exec` (apiserver → kubelet);
#   5. the pod is deleted; its successor is Ready with the same claim and the same data;
#   6. the audit log holds the writes of this check;
#   7. NetworkPolicy is enforced between pods (hack/node/netpolcheck.sh: allowed without a policy,
#      refused under deny-all, allowed again for the labelled client only, never from another
#      namespace; a missing or non-enforcing kube-router fails);
#   8. cluster.sh down, whose exit status says whether the host differs from before up (ipsets too).
#
# Images: cluster.sh's image folder (TILED_E2E_IMAGES, default the images cache) must hold pause and
# CoreDNS; the check's own client image is built by testimages.sh and imported with cluster.sh import.
# CHECK_REUSE=1 uses a cluster already up instead of starting one; CHECK_KEEP=1 leaves the cluster up
# at the end (no host comparison then).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/cluster.sh
STATE=${TILED_E2E_STATE:-/tmp/tiled-e2e}
STATE=${STATE%/}

log() { echo "check.sh: $*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
failed=0
fail() { log "FAIL: $*"; failed=1; }
k() { "$cluster" exec kubectl "$@"; }

work=$(mktemp -d /tmp/nodecheck.XXXXXX)
cleanup() {
  local rc=$?
  rm -rf "$work"
  if [ "${CHECK_KEEP:-}" = 1 ]; then
    log "CHECK_KEEP=1: the cluster stays up; hack/node/cluster.sh down removes it"
    exit $rc
  fi
  log "tearing down"
  if "$cluster" down; then
    log "teardown: host state identical to before up"
  else
    log "FAIL: teardown left the host different from before up (see above; $STATE/host-diff)"
    rc=1
  fi
  [ $failed -eq 0 ] || rc=1
  if [ $rc -eq 0 ]; then log "all checks passed"; else log "checks FAILED"; fi
  exit $rc
}
trap cleanup EXIT

"$here/testimages.sh" "$work" 2>/dev/null
if [ "${CHECK_REUSE:-}" = 1 ]; then
  "$cluster" status >/dev/null || { log "CHECK_REUSE=1 but the cluster is not fully up"; exit 1; }
  log "CHECK_REUSE=1: using the running cluster"
else
  "$cluster" up
fi
# shellcheck disable=SC1091
. "$STATE/env"
"$cluster" import "$work/nodecheck.tar"

ns=node-check
t_apply=$(now)
k apply --server-side --field-manager node-check -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $ns}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-svc, namespace: $ns}
spec:
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: $ns}
spec:
  serviceName: web
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: web
        image: docker.io/local/nodecheck:v1
        imagePullPolicy: IfNotPresent
        args: [serve, -dir, /data, -addr, ":8080"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 1
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      storageClassName: $STORAGE_CLASS
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
EOF

# wait_pod_ready POD TIMEOUT [OLD-UID]: the pod exists (with another UID than OLD-UID) and is Ready.
wait_pod_ready() {
  local deadline=$(($(date +%s) + $2)) uid
  while :; do
    uid=$(k -n $ns get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null || true)
    if [ -n "$uid" ] && [ "$uid" != "${3:-}" ] &&
      [ "$(k -n $ns get pod "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; then
      return 0
    fi
    [ "$(date +%s)" -lt "$deadline" ] || { k -n $ns describe pod "$1" >&2 || true; return 1; }
    sleep 0.2
  done
}

if wait_pod_ready web-0 120; then
  sts_s=$(secs "$t_apply" "$(now)")
  log "StatefulSet pod web-0 Ready ${sts_s}s after apply"
else
  fail "web-0 not Ready within 120s"
  exit 1
fi

pv=$(k -n $ns get pvc data-web-0 -o jsonpath='{.spec.volumeName}')
phase=$(k -n $ns get pvc data-web-0 -o jsonpath='{.status.phase}')
[ "$phase" = Bound ] || fail "claim data-web-0 is $phase (volume '$pv'), want Bound"
if [ -f "$STATE/pv/$pv/first" ] && grep -q 'written by web-0' "$STATE/pv/$pv/first"; then
  log "claim data-web-0 Bound to $pv; $STATE/pv/$pv/first: $(cat "$STATE/pv/$pv/first")"
else
  fail "web-0 did not write $STATE/pv/$pv/first"
fi
first=$(cat "$STATE/pv/$pv/first" 2>/dev/null || true)

# The pod turns Ready a moment before the EndpointSlice controller (which batches, about 1 s) marks its
# endpoint ready; until then CoreDNS answers NXDOMAIN for web-0.web and caches that answer for 30 s
# (the Corefile's ttl), so a client asking in between waits 30 s. Seen once: the Job below took
# 34.7 s, its first name resolved after 61 quick failures in 30.1 s, and the audit log showed the
# headless Service's EndpointSlice updated again 0.1 s after the Job's pod started. Wait for the
# ready endpoint first.
ready_endpoint() {
  k -n $ns get endpointslices -l kubernetes.io/service-name=web \
    -o 'jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.hostname}{"\n"}{end}' 2>/dev/null | grep -qx web-0
}
deadline=$(($(date +%s) + 30))
until ready_endpoint; do
  [ "$(date +%s)" -lt "$deadline" ] || { fail "the EndpointSlice of Service web has no ready endpoint for web-0 after 30s"; break; }
  sleep 0.2
done

# 3. A second pod resolves the Service names through CoreDNS with its own resolv.conf.
t_job=$(now)
k apply --server-side --field-manager node-check -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: dns-client, namespace: $ns}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: client
        image: docker.io/local/nodecheck:v1
        imagePullPolicy: IfNotPresent
        command: [/nodecheck, get, -timeout, 60s, -expect, "written by web-0", "http://web-svc.$ns.svc.$CLUSTER_DOMAIN:8080/"]
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
      initContainers:
      - name: resolve
        image: docker.io/local/nodecheck:v1
        imagePullPolicy: IfNotPresent
        command: [/nodecheck, resolve, -timeout, 60s, "web-0.web.$ns.svc.$CLUSTER_DOMAIN", web-svc, "kubernetes.default"]
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
EOF
if k -n $ns wait --for=condition=Complete job/dns-client --timeout=120s >/dev/null; then
  log "Job dns-client Complete $(secs "$t_job" "$(now)")s after apply:"
  k -n $ns logs job/dns-client --all-containers --prefix >"$work/job.log" 2>&1 || fail "kubectl logs job/dns-client: $(cat "$work/job.log")"
  sed 's/^/    /' "$work/job.log" >&2
else
  k -n $ns logs job/dns-client --all-containers --prefix >&2 || true
  fail "Job dns-client did not complete (DNS or Service from a pod)"
fi

# 4. From the namespace, as the e2e tests run.
svc_ip=$(k -n $ns get svc web-svc -o jsonpath='{.spec.clusterIP}')
nodecheck=$work/bin/nodecheck
"$cluster" exec "$nodecheck" resolve -timeout 20s -server "$DNS_IP:53" "web-svc.$ns.svc.$CLUSTER_DOMAIN" ||
  fail "DNS from the namespace at $DNS_IP"
"$cluster" exec "$nodecheck" get -timeout 20s -expect "written by web-0" "http://$svc_ip:8080/" ||
  fail "HTTP to the ClusterIP $svc_ip from the namespace"
if k -n $ns logs web-0 2>&1 | grep -q 'serving /data'; then log "kubectl logs web-0: ok"; else fail "kubectl logs web-0"; fi
if k -n $ns exec web-0 -- /nodecheck resolve -timeout 10s "kubernetes.default.svc.$CLUSTER_DOMAIN" >&2; then
  log "kubectl exec web-0: ok"
else
  fail "kubectl exec web-0"
fi

# 5. Data survives the pod.
old_uid=$(k -n $ns get pod web-0 -o jsonpath='{.metadata.uid}')
t_del=$(now)
k -n $ns delete pod web-0 --wait=false >/dev/null
if wait_pod_ready web-0 120 "$old_uid"; then
  log "web-0 deleted → successor Ready in $(secs "$t_del" "$(now)")s"
  pv2=$(k -n $ns get pvc data-web-0 -o jsonpath='{.spec.volumeName}')
  [ "$pv2" = "$pv" ] || fail "claim moved from $pv to $pv2"
  "$cluster" exec "$nodecheck" get -timeout 20s -expect "$first" "http://$svc_ip:8080/" >/dev/null ||
    fail "the successor does not serve the data the first pod wrote"
  [ "$(wc -l <"$STATE/pv/$pv/starts")" -eq 2 ] || fail "$STATE/pv/$pv/starts should list 2 starts: $(cat "$STATE/pv/$pv/starts")"
  log "data kept: $(cat "$STATE/pv/$pv/first")"
else
  fail "web-0's successor not Ready within 120s"
fi

# 6. The audit log records this check's writes: the server-side apply that created the Job is a patch
#    answered 201, by the admin user; the job controller's status updates follow.
n=$(grep -c '"verb":"patch","user":{"username":"kubernetes-admin".*"objectRef":{"resource":"jobs","namespace":"node-check","name":"dns-client".*"code":201' "$AUDIT_LOG" || true)
[ "$n" -eq 1 ] || fail "want exactly 1 creating apply of job dns-client in $AUDIT_LOG, found $n"
m=$(grep -c '"verb":"update",.*"username":"system:serviceaccount:kube-system:job-controller".*"resource":"jobs","namespace":"node-check","name":"dns-client".*"subresource":"status"' "$AUDIT_LOG" || true)
[ "$m" -ge 1 ] || fail "no status update of job dns-client by the job controller in $AUDIT_LOG"
log "audit log: $(wc -l <"$AUDIT_LOG") events; job dns-client: $n creating apply, $m status updates by the job controller"

# 7. NetworkPolicy enforcement (kube-router), with the image and binary built above.
"$here/netpolcheck.sh" "$work" || fail "the node does not enforce NetworkPolicy (netpolcheck.sh above)"
