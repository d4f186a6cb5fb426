#!/usr/bin/env bash
# cluster.sh runs a real single-node Kubernetes inside one network namespace on this machine and takes
# it away again, leaving the host as it found it. See docs/real-node.md.
#
#   hack/node/cluster.sh up          start everything; print timings; leave it running
#   hack/node/cluster.sh down        stop everything, clean up, compare the host with before `up`
#   hack/node/cluster.sh exec CMD... run CMD inside the namespace with KUBECONFIG and the built kubectl
#   hack/node/cluster.sh env         print $STATE/env (KEY=VALUE lines)
#   hack/node/cluster.sh status      which components run
#   hack/node/cluster.sh import F... import docker-archive tars into the running node's containerd
#
# Environment:
#   TILED_E2E_NETNS   network namespace name (default tiled-e2e); also the node's name
#   TILED_E2E_STATE   folder for everything at run time (default /tmp/tiled-e2e)
#   TILED_E2E_IMAGES  folder of docker-archive *.tar imported at `up`
#                     (default $(tiled_cache_root)/images/current, hack/lib/cache.sh)
#   TILED_E2E_TMPFS   auto (default): containerd's root on a tmpfs when memory allows; 1 always; 0 never
#   TILED_OPERATOR_CACHE  the cache root of every tool (default ${XDG_CACHE_HOME:-~/.cache}/tiled-operator)
#
# NetworkPolicy is enforced: kube-router's firewall controller (hack/node/kube-router.sh) runs in the
# namespace beside kube-proxy, and `up` waits for its first sync. It filters traffic between pods only;
# traffic from the node itself (processes in the namespace, kubelet's probes, the apiserver calling
# webhooks) is always allowed. docs/real-node.md, "NetworkPolicy: kube-router".
set -euo pipefail
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hack=$(dirname "$here")

NETNS=${TILED_E2E_NETNS:-tiled-e2e}
STATE=${TILED_E2E_STATE:-/tmp/tiled-e2e}
# shellcheck source=hack/lib/cache.sh
. "$hack/lib/cache.sh"
cache_root=$(tiled_cache_root)
IMAGES=${TILED_E2E_IMAGES:-$cache_root/images/current}

case $NETNS in
  *[!a-z0-9-]* | "" | -* | *- ) echo "cluster.sh: TILED_E2E_NETNS=$NETNS: use lower-case letters, digits and inner dashes (it is also the node's name)" >&2; exit 2 ;;
esac
case $STATE in
  /*/*) ;;
  *) echo "cluster.sh: TILED_E2E_STATE=$STATE: must be an absolute path below a top-level folder" >&2; exit 2 ;;
esac
case $STATE in *[[:space:]]*) echo "cluster.sh: TILED_E2E_STATE must not contain white space" >&2; exit 2 ;; esac
STATE=${STATE%/}

NETNS_PATH=/run/netns/$NETNS
NODE_NAME=$NETNS
NODE_IP=10.99.0.1
NODE_DEV=node0          # veth end carrying the node IP (the kernel has no dummy driver)
PEER_DEV=node0-peer     # its other end, also inside the namespace
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_IP=10.96.0.10
POD_CIDR=10.244.0.0/24
CLUSTER_DOMAIN=cluster.local
CGROUP_ROOT=$NETNS      # kubelet's cgroupRoot: pods live in /sys/fs/cgroup/*/$CGROUP_ROOT/kubepods
CNI_NETWORK=$NETNS      # CNI network name: prefix of our files in /var/lib/cni/results
STORAGE_CLASS=local-hostpath
PV_COUNT=96         # the suite binds one per claim and never reuses a released one (Retain); 65 were bound in the run of 2026-12-07
PAUSE_IMAGE=docker.io/local/pause:3.10
COREDNS_IMAGE=docker.io/local/coredns:v1.15.0
# METRICS_SERVER_VERSION: the one pin, shared with hack/images/build.sh, which builds the image.
# shellcheck source=hack/node/metrics-server.sh
source "$here/metrics-server.sh"
METRICS_SERVER_IMAGE=docker.io/local/metrics-server:$METRICS_SERVER_VERSION

SOCK=$STATE/containerd/containerd.sock
# Components in start order; `down` stops them in its own order.
components=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy kube-router)
# KUBE_ROUTER_VERSION, KUBE_ROUTER_SYNC_MARK and kube_router_build: the one pin, the sign of its first
# sync and the cached binary (built by build.sh; here only checked).
# shellcheck source=hack/node/kube-router.sh
source "$here/kube-router.sh"
# Host-global kernel settings kubelet writes (and two the namespace should keep away from the host).
host_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.netfilter.nf_conntrack_max
  net.bridge.bridge-nf-call-iptables)
# Host paths the runtime touches outside $STATE (containerd 1.6, libcni and kubelet hard-code them).
host_paths=(/run/containerd /run/containerd/s /run/containerd/runc /run/containerd/fifo /run/netns
  /var/lib/kubelet/device-plugins /var/lib/cni /var/lib/cni/results /var/lib/cni/networks /var/log/containers /var/log/pods
  /var/lib/kubelet /var/lib/containerd /opt/containerd /etc/cni/net.d /etc/kubernetes)

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }

nsx() { nsenter --net="$NETNS_PATH" -- "$@"; }

# ---------------------------------------------------------------------------------------------------
# Processes

# pid_of NAME prints the PID recorded for component NAME if that process still runs the recorded binary.
pid_of() {
  local f=$STATE/pids/$1 pid bin
  [ -f "$f" ] || return 1
  read -r pid bin <"$f" || return 1
  alive "$pid" || return 1
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ] || return 1
  echo "$pid"
}

# alive PID: the process exists and is not a zombie (PID 1 here reaps late).
alive() {
  local st
  st=$(awk '/^State:/{print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# start NAME BINARY ARGS...: run inside the namespace (nsenter execs, so $! is the component's PID),
# in its own session so that it outlives the caller, with its log in $STATE/logs/NAME.log.
start() {
  local name=$1 bin=$2
  shift 2
  [ -x "$bin" ] || die "$bin is missing; run hack/node/build.sh"
  setsid nsenter --net="$NETNS_PATH" -- "$bin" "$@" </dev/null >>"$STATE/logs/$name.log" 2>&1 &
  local pid=$!
  echo "$pid $(readlink -f "$bin")" >"$STATE/pids/$name"
}

tail_log() {
  local f=$STATE/logs/$1.log
  [ -f "$f" ] || return 0
  echo "----- last lines of $f -----" >&2
  tail -n "${2:-25}" "$f" >&2
}

# check_running: every component started so far still runs, or fail with the dead one's log.
check_running() {
  local c
  for c in "${components[@]}"; do
    [ -f "$STATE/pids/$c" ] || continue
    pid_of "$c" >/dev/null || { tail_log "$c" 40; fail_up "$c exited (log above)"; }
  done
}

fail_up() {
  log "up FAILED: $*"
  log "logs are in $STATE/logs; the cluster is left as it is for inspection; remove it with: hack/node/cluster.sh down"
  exit 1
}

# wait_until TIMEOUT WHAT LOGS CMD...: retry CMD every 0.25 s until it succeeds; on timeout print the
# tails of the named component logs (comma-separated) and fail.
wait_until() {
  local timeout=$1 what=$2 logs=$3
  shift 3
  local deadline
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    check_running
    if [ "$(date +%s)" -ge "$deadline" ]; then
      local c
      for c in ${logs//,/ }; do tail_log "$c"; done
      fail_up "timed out after ${timeout}s waiting for $what"
    fi
    sleep 0.25
  done
}

# wait_metrics_api TIMEOUT CMD...: wait_until for the metrics API, returning non-zero on timeout so
# that the caller can show metrics-server's own state first (its log is a pod's, not a component's).
wait_metrics_api() {
  local timeout=$1 deadline
  shift
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    check_running
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

# ---------------------------------------------------------------------------------------------------
# Host state

# snapshot DIR records what `down` must give back: links, routes, iptables rules, mounts, network
# namespaces, kubepods cgroups, the host-global sysctls and the host paths the runtime touches.
snapshot() {
  local d=$1 t p s
  rm -rf "$d"
  mkdir -p "$d"
  ip -o link show | sed -E 's/^[0-9]+: //; s/ +/ /g' | sort >"$d/ip-link"
  { ip -4 route show table all; ip -6 route show table all; } | sort >"$d/ip-route"
  for t in filter nat mangle raw; do
    iptables -w -t "$t" -S 2>&1 | sed "s/^/$t: /"
    ip6tables -w -t "$t" -S 2>&1 | sed "s/^/$t (ipv6): /"
  done >"$d/iptables"
  # Mounts where kubelet, containerd, runc, CNI and `ip netns` put theirs (others on this machine may
  # mount elsewhere meanwhile, e.g. an image build's chroot; they are not ours to judge).
  awk '{print $2, $3, $1, $4}' /proc/self/mounts | sort |
    awk -v s="$STATE" '$1 == s || index($1, s "/") == 1 || $1 ~ /^\/(run|var\/run)\/(netns|containerd)(\/|$)/ ||
      $1 ~ /^\/var\/lib\/(kubelet|containerd|cni)(\/|$)/ || $1 ~ /^\/var\/log\// || $1 ~ /^\/sys\/fs\/cgroup(\/|$)/' >"$d/mounts"
  ip netns list | sed -E 's/ \(id: [0-9]+\)//' | sort >"$d/netns"
  { find /sys/fs/cgroup -mindepth 1 -maxdepth 4 -type d -name 'kubepods*' -prune
    find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d -name "$CGROUP_ROOT"; } 2>/dev/null | sort >"$d/cgroups"
  for s in "${host_sysctls[@]}"; do
    printf '%s = %s\n' "$s" "$(sysctl -n "$s" 2>/dev/null || echo '(absent)')"
  done >"$d/sysctl"
  # The host's ipsets: kube-router's live in the node's namespace (ipsets are per network namespace
  # and go with it); this proves none leaked onto the host.
  if command -v ipset >/dev/null 2>&1; then
    ipset list -n 2>&1 | sort >"$d/ipset"
  else
    echo "(ipset not installed)" >"$d/ipset"
  fi
  for p in "${host_paths[@]}"; do
    if [ -e "$p" ] || [ -L "$p" ]; then
      printf '%s: present\n' "$p"
      [ -d "$p" ] && find "$p" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | sed "s|^|$p/|"
    else
      printf '%s: absent\n' "$p"
    fi
  done >"$d/paths"
}

# ---------------------------------------------------------------------------------------------------
# up

gen_pki() {
  local pki=$STATE/pki
  mkdir -p "$pki"
  (
    cd "$pki"
    umask 077
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -subj "/CN=tiled-e2e-ca" -days 3650 -sha256 -out ca.crt \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    # The aggregation layer's own CA: the apiserver proxies to metrics-server with a client
    # certificate of it and the user in X-Remote-* headers, which metrics-server trusts only from
    # this CA (never the cluster CA, whose every client could then claim any user).
    openssl ecparam -name prime256v1 -genkey -noout -out front-proxy-ca.key 2>/dev/null
    openssl req -x509 -new -key front-proxy-ca.key -subj "/CN=tiled-e2e-front-proxy-ca" -days 3650 -sha256 -out front-proxy-ca.crt \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    # cert NAME SUBJECT EXTENDED-KEY-USAGE [SANS] [CA]: signed by CA (default: the cluster CA, ca).
    cert() {
      local ca=${5:-ca}
      openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [ -z "${4:-}" ] || echo "subjectAltName=$4"
      } >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 3650 -sha256 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver "/CN=kube-apiserver" serverAuth \
      "IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
    cert controller-manager "/CN=system:kube-controller-manager" clientAuth
    cert scheduler "/CN=system:kube-scheduler" clientAuth
    cert kube-proxy "/CN=system:kube-proxy" clientAuth
    # kube-router's own identity, bound to the least-privilege ClusterRole tiled-e2e:kube-router
    # (bootstrap_manifests): it only reads.
    cert kube-router "/CN=tiled-e2e:kube-router" clientAuth
    cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    cert kubelet "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1"
    cert front-proxy-client "/CN=front-proxy-client" clientAuth "" front-proxy-ca
    # metrics-server's serving certificate, for the name the aggregator checks (<service>.<ns>.svc);
    # the APIService carries the cluster CA as its caBundle, so nothing skips TLS verification.
    cert metrics-server "/CN=metrics-server.kube-system.svc" serverAuth \
      "DNS:metrics-server.kube-system.svc,DNS:metrics-server.kube-system.svc.$CLUSTER_DOMAIN"
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ca.srl front-proxy-ca.srl
  )
}

# kubeconfig FILE CERT-NAME: a kubeconfig for the client certificate CERT-NAME, data embedded.
kubeconfig() {
  local pki=$STATE/pki
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NETNS
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: $NETNS
  context: {cluster: $NETNS, user: $2}
current-context: $NETNS
EOF
  chmod 600 "$1"
}

write_configs() {
  local c=$STATE/config
  mkdir -p "$c" "$STATE/cni/net.d" "$STATE/cni/networks" "$STATE/pod-logs" "$STATE/kubelet" "$STATE/containerd"
  kubeconfig "$STATE/kubeconfig" admin
  kubeconfig "$c/controller-manager.kubeconfig" controller-manager
  kubeconfig "$c/scheduler.kubeconfig" scheduler
  kubeconfig "$c/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$c/kube-router.kubeconfig" kube-router
  kubeconfig "$c/kubelet.kubeconfig" kubelet-client

  cat >"$c/audit-policy.yaml" <<EOF
# Every request at Metadata level (who, verb, resource, name, response code), one event per request:
# the RequestReceived stage is omitted so that counting events counts requests.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF

  : >"$c/resolv.conf" # kubelet's resolvConf: empty, so pods never learn the host's resolver

  cat >"$c/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # The VM lacks CAP_SYS_RESOURCE: nothing may lower oom_score_adj (runc otherwise fails with
  # "can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$STATE/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF

  cat >"$STATE/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/networks",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  cat >"$c/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $STATE/pki/kubelet.crt
tlsPrivateKeyFile: $STATE/pki/kubelet.key
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $c/resolv.conf
podLogsDir: $STATE/pod-logs
rotateCertificates: false
serverTLSBootstrap: false
# Local images cannot be pulled again: never garbage-collect or evict them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
EOF

  cat >"$c/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $c/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
# Zeros: leave the host-global conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

setup_netns() {
  ip netns add "$NETNS"
  nsx ip link set lo up
  nsx ip link add "$NODE_DEV" type veth peer name "$PEER_DEV"
  nsx ip addr add "$NODE_IP/32" dev "$NODE_DEV"
  nsx ip link set "$NODE_DEV" up
  nsx ip link set "$PEER_DEV" up
  # Processes in the namespace (apiserver → webhook Services, kubectl, tests) reach ClusterIPs through
  # this route; there is no default route, so nothing can leave the machine.
  nsx ip route add "$SERVICE_CIDR" dev "$NODE_DEV" src "$NODE_IP"
  nsx sysctl -qw net.ipv4.ip_forward=1
  nsx sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

bootstrap_manifests() {
  local i name
  cat <<EOF
# kube-router's firewall controller (user tiled-e2e:kube-router, a client certificate of gen_pki): its
# informers list and watch exactly these, and it gets its own Node at start (node IP); it writes
# nothing to the API.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "tiled-e2e:kube-router"}
rules:
- apiGroups: [""]
  resources: [pods, namespaces, nodes, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "tiled-e2e:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "tiled-e2e:kube-router"}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: "tiled-e2e:kube-router"}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $STORAGE_CLASS
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
  for i in $(seq 0 $((PV_COUNT - 1))); do
    name=$(printf 'e2e-pv-%02d' "$i")
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $name
  labels: {tiled-e2e/pool: hostpath}
spec:
  storageClassName: $STORAGE_CLASS
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $STATE/pv/$name, type: Directory}
EOF
  done
  cat <<EOF
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  # No forward: the host's resolver is outside this machine. Port 1053 so CoreDNS runs as non-root
  # with no capabilities; the Service maps 53 to it.
  Corefile: |
    .:1053 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: coredns
        image: $COREDNS_IMAGE
        imagePullPolicy: IfNotPresent
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 1053, protocol: UDP}
        - {name: dns-tcp, containerPort: 1053, protocol: TCP}
        - {name: health, containerPort: 8080, protocol: TCP}
        - {name: ready, containerPort: 8181, protocol: TCP}
        resources:
          requests: {cpu: 50m, memory: 50Mi}
          limits: {memory: 170Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        livenessProbe:
          httpGet: {path: /health, port: health}
          initialDelaySeconds: 30
          periodSeconds: 10
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: ready}
          periodSeconds: 1
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: $DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, targetPort: 1053, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 1053, protocol: TCP}
EOF
  metrics_server_manifests
}

# metrics_server_manifests: the resource metrics API (metrics.k8s.io/v1beta1) that
# HorizontalPodAutoscalers read, as upstream's manifests deploy it, with three changes: its serving
# certificate is signed by the cluster CA and the APIService verifies it (caBundle, not
# insecureSkipTLSVerify); it verifies the kubelet's serving certificate with the cluster CA of its
# service-account volume (not --kubelet-insecure-tls); it listens on 4443 and runs as 65532. It
# authenticates to the kubelet with its service-account token (kubelet's webhook authentication and
# authorization: nodes/metrics in system:metrics-server).
metrics_server_manifests() {
  local pki=$STATE/pki
  cat <<EOF
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: metrics-server, namespace: kube-system, labels: {k8s-app: metrics-server}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: "system:aggregated-metrics-reader"
  labels:
    k8s-app: metrics-server
    rbac.authorization.k8s.io/aggregate-to-view: "true"
    rbac.authorization.k8s.io/aggregate-to-edit: "true"
    rbac.authorization.k8s.io/aggregate-to-admin: "true"
rules:
- apiGroups: [metrics.k8s.io]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:metrics-server", labels: {k8s-app: metrics-server}}
rules:
- apiGroups: [""]
  resources: [nodes/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:metrics-server", labels: {k8s-app: metrics-server}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:metrics-server"}
subjects:
- {kind: ServiceAccount, name: metrics-server, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "metrics-server:system:auth-delegator", labels: {k8s-app: metrics-server}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects:
- {kind: ServiceAccount, name: metrics-server, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: metrics-server-auth-reader, namespace: kube-system, labels: {k8s-app: metrics-server}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects:
- {kind: ServiceAccount, name: metrics-server, namespace: kube-system}
---
apiVersion: v1
kind: Secret
metadata: {name: metrics-server-tls, namespace: kube-system, labels: {k8s-app: metrics-server}}
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 "$pki/metrics-server.crt")
  tls.key: $(base64 -w0 "$pki/metrics-server.key")
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: metrics-server
  namespace: kube-system
  labels: {k8s-app: metrics-server}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: metrics-server}}
  strategy: {rollingUpdate: {maxUnavailable: 0}}
  template:
    metadata:
      labels: {k8s-app: metrics-server}
    spec:
      serviceAccountName: metrics-server
      priorityClassName: system-cluster-critical
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: metrics-server
        image: $METRICS_SERVER_IMAGE
        imagePullPolicy: IfNotPresent
        args:
        - --secure-port=4443
        - --tls-cert-file=/etc/metrics-server/tls.crt
        - --tls-private-key-file=/etc/metrics-server/tls.key
        - --kubelet-preferred-address-types=InternalIP
        - --kubelet-use-node-status-port
        - --kubelet-certificate-authority=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt
        - --metric-resolution=15s
        - --profiling=false
        ports:
        - {name: https, containerPort: 4443, protocol: TCP}
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {memory: 256Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        readinessProbe:
          httpGet: {path: /readyz, port: https, scheme: HTTPS}
          periodSeconds: 2
          failureThreshold: 3
        livenessProbe:
          httpGet: {path: /livez, port: https, scheme: HTTPS}
          periodSeconds: 10
          failureThreshold: 3
        volumeMounts:
        - {name: tls, mountPath: /etc/metrics-server, readOnly: true}
        - {name: tmp, mountPath: /tmp}
      volumes:
      - name: tls
        secret: {secretName: metrics-server-tls}
      - name: tmp
        emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
  labels: {k8s-app: metrics-server}
spec:
  selector: {k8s-app: metrics-server}
  ports:
  - {name: https, port: 443, targetPort: https, protocol: TCP, appProtocol: https}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
  labels: {k8s-app: metrics-server}
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {name: metrics-server, namespace: kube-system, port: 443}
  caBundle: $(base64 -w0 "$pki/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
EOF
}

# import_tars TAR...: import docker-archive tars into the node's containerd (namespace k8s.io).
import_tars() {
  local f
  for f in "$@"; do
    ctr -a "$SOCK" -n k8s.io images import "$f" >>"$STATE/logs/import.log" 2>&1 ||
      { tail_log import; return 1; }
  done
}

images_present() {
  local have
  have=$(ctr -a "$SOCK" -n k8s.io images ls -q 2>/dev/null) || return 1
  local i
  for i in "$@"; do grep -qxF "$i" <<<"$have" || return 1; done
}

cmd_up() {
  set -E
  trap 'log "up FAILED at line $LINENO: $BASH_COMMAND"; log "logs are in $STATE/logs; remove what was started with: hack/node/cluster.sh down"' ERR
  [ "$(id -u)" = 0 ] || die "up needs root (network namespace, mounts, cgroups)"
  if [ -e "$NETNS_PATH" ] || any_component_running; then
    die "a cluster (or what is left of one) exists for $NETNS / $STATE; run hack/node/cluster.sh down first"
  fi

  local t0 nodebin cpbin
  t0=$(now)
  nodebin=$("$here/build.sh") || die "hack/node/build.sh failed"
  cpbin=$("$hack/controlplane.sh") || die "hack/controlplane.sh failed"
  # build.sh has built it; this only checks it and prints the path.
  local krbin
  krbin=$(kube_router_build) || die "hack/node/kube-router.sh failed"

  # The images to import: every docker-archive in $IMAGES, smallest first (pause, CoreDNS and
  # metrics-server are small and must be there before kubelet starts; big ones load while the node
  # comes up).
  local tars=()
  if [ -d "$IMAGES" ]; then
    mapfile -t tars < <(find -L "$IMAGES/" -maxdepth 1 -name '*.tar' -type f -printf '%s %p\n' 2>/dev/null | sort -n | cut -d' ' -f2-)
  fi
  [ ${#tars[@]} -gt 0 ] || die "no images in $IMAGES: build them with hack/images/build.sh (needed at least: $PAUSE_IMAGE, $COREDNS_IMAGE, $METRICS_SERVER_IMAGE)"

  # Fresh state; the record of the host comes first, before anything of ours exists.
  if [ -d "$STATE" ]; then
    [ -z "$(mounts_under "$STATE")" ] || die "mounts remain under $STATE; run hack/node/cluster.sh down first"
    rm -rf --one-file-system "$STATE"
  fi
  mkdir -p "$STATE/logs" "$STATE/pids" "$STATE/pv"
  snapshot "$STATE/host-before"
  log "host state recorded in $STATE/host-before"

  # containerd's root (the imported images and their unpacked layers, twice the tars' size) on a tmpfs
  # when memory allows: on this machine kind's disk, importing a 1.3 GB image and deleting it again
  # takes minutes; in memory, seconds. The tmpfs is ours below $STATE and goes with `down`.
  local tar_bytes=0 avail_kb f use_tmpfs=${TILED_E2E_TMPFS:-auto}
  for f in "${tars[@]}"; do tar_bytes=$((tar_bytes + $(stat -Lc %s "$f"))); done
  avail_kb=$(awk '/^MemAvailable:/{print $2}' /proc/meminfo)
  if [ "$use_tmpfs" = auto ]; then
    if [ $((avail_kb * 1024)) -ge $((2 * tar_bytes + 4 * 1024 * 1024 * 1024)) ]; then use_tmpfs=1; else use_tmpfs=0; fi
  fi
  mkdir -p "$STATE/containerd"
  if [ "$use_tmpfs" = 1 ]; then
    mount -t tmpfs -o "mode=0711,size=$((2 * tar_bytes / 1048576 + 4096))m" "tmpfs-$NETNS" "$STATE/containerd"
    log "containerd root on a tmpfs of $((2 * tar_bytes / 1048576 + 4096)) MiB (images: $((tar_bytes / 1048576)) MiB; TILED_E2E_TMPFS=0 keeps it on disk)"
  fi

  setup_netns
  make_cgroup_root
  gen_pki
  write_configs
  local i
  for i in $(seq 0 $((PV_COUNT - 1))); do
    mkdir -p "$STATE/pv/$(printf 'e2e-pv-%02d' "$i")"
  done
  chmod 0777 "$STATE"/pv/*
  local c=$STATE/config pki=$STATE/pki

  # Control plane.
  local t_api
  t_api=$(now)
  start etcd "$cpbin/etcd" --name "$NODE_NAME" --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE_NAME=http://127.0.0.1:2380" --unsafe-no-fsync --log-level warn
  start kube-apiserver "$cpbin/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$NODE_IP" --bind-address 0.0.0.0 --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --audit-policy-file "$c/audit-policy.yaml" --audit-log-path "$STATE/audit.log" --audit-log-format json \
    --audit-log-maxsize 0 --audit-log-maxbackup 0 \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    --profiling=false
  # Runtime, in parallel with the control plane coming up.
  start containerd /usr/bin/containerd --config "$c/containerd.toml"
  wait_until 30 "containerd to answer on $SOCK" containerd ctr -a "$SOCK" version
  local small=() big=() f
  for f in "${tars[@]}"; do
    if [ "$(stat -Lc %s "$f")" -lt $((100 * 1024 * 1024)) ]; then small+=("$f"); else big+=("$f"); fi
  done
  local t_imp
  t_imp=$(now)
  [ ${#small[@]} -eq 0 ] || import_tars "${small[@]}" || fail_up "importing images from $IMAGES failed (log above)"
  if ! images_present "$PAUSE_IMAGE" "$COREDNS_IMAGE" "$METRICS_SERVER_IMAGE"; then
    [ ${#big[@]} -eq 0 ] || import_tars "${big[@]}" || fail_up "importing images from $IMAGES failed (log above)"
    big=()
    local missing=() i
    for i in "$PAUSE_IMAGE" "$COREDNS_IMAGE" "$METRICS_SERVER_IMAGE"; do images_present "$i" || missing+=("$i"); done
    [ ${#missing[@]} -eq 0 ] ||
      fail_up "the images in $IMAGES lack ${missing[*]} (they hold: $(ctr -a "$SOCK" -n k8s.io images ls -q | grep -v '^sha256:' | tr '\n' ' ')); build them with hack/images/build.sh"
  fi
  log "imported ${#small[@]} small image(s) in $(secs "$t_imp" "$(now)")s"
  local import_pid=""
  if [ ${#big[@]} -gt 0 ]; then
    import_tars "${big[@]}" &
    import_pid=$!
  fi

  kc() { nsx "$nodebin/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }
  wait_until 90 "kube-apiserver /readyz" etcd,kube-apiserver kc get --raw /readyz
  local api_ready
  api_ready=$(secs "$t_api" "$(now)")
  log "apiserver ready ${api_ready}s after start"

  # Controller-manager and scheduler give up when the apiserver does not answer within ~10 s (their
  # delegated authentication reads a ConfigMap at start): start them once it is ready.
  start kube-controller-manager "$cpbin/kube-controller-manager" \
    --kubeconfig "$c/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$c/controller-manager.kubeconfig" --authorization-kubeconfig "$c/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --cluster-name "$NETNS" --controllers '*' \
    --profiling=false
  start kube-scheduler "$nodebin/kube-scheduler" \
    --kubeconfig "$c/scheduler.kubeconfig" \
    --authentication-kubeconfig "$c/scheduler.kubeconfig" --authorization-kubeconfig "$c/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false


  # Node.
  local t_node
  t_node=$(now)
  start kubelet "$nodebin/kubelet" --config "$c/kubelet.yaml" --kubeconfig "$c/kubelet.kubeconfig" \
    --root-dir "$STATE/kubelet" --node-ip "$NODE_IP" --hostname-override "$NODE_NAME"
  start kube-proxy "$nodebin/kube-proxy" --config "$c/kube-proxy.yaml"

  local t_dns
  t_dns=$(now)
  bootstrap_manifests | kc apply --server-side --field-manager tiled-e2e -f - >"$STATE/logs/bootstrap.log" 2>&1 ||
    { tail_log bootstrap; fail_up "applying the StorageClass, PersistentVolumes, kube-router's RBAC and CoreDNS failed"; }

  # NetworkPolicy enforcement: kube-router's firewall controller only (no routing, no service proxy:
  # the bridge plugin and kube-proxy do those), no health or metrics listener. --v=1 logs each full
  # sync's start and end, which the e2e suite waits on before a client pod runs
  # (test/e2e/netpolsettle_test.go). It reads its own Node
  # once at start (for the node IP) and exits when it is not there yet, so it starts once kubelet
  # has registered the node; its first sync is awaited further down, overlapping CoreDNS's start.
  node_registered() { kc get node "$NODE_NAME" -o name; }
  wait_until 60 "node $NODE_NAME to register" kubelet,containerd node_registered
  local t_kr
  t_kr=$(now)
  start kube-router "$krbin" --run-firewall=true --run-router=false --run-service-proxy=false \
    --health-port 0 --metrics-port 0 \
    --kubeconfig "$c/kube-router.kubeconfig" --hostname-override "$NODE_NAME" \
    --service-cluster-ip-range "$SERVICE_CIDR" --v=1

  node_ready() { [ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
  wait_until 120 "node $NODE_NAME Ready" kubelet,containerd node_ready
  local node_ready_s
  node_ready_s=$(secs "$t_node" "$(now)")
  log "node Ready ${node_ready_s}s after kubelet start"

  dns_available() { [ "$(kc -n kube-system get deploy coredns -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}')" = True ]; }
  wait_until 180 "CoreDNS Available" kubelet,containerd,kube-controller-manager,kube-scheduler dns_available
  local dns_s
  dns_s=$(secs "$t_dns" "$(now)")
  log "CoreDNS Available ${dns_s}s after apply"

  # The resource metrics API through the aggregation layer: the apiserver proxies to metrics-server,
  # which has scraped the kubelet twice (a CPU rate needs two samples, --metric-resolution apart).
  # Started with CoreDNS; its wait overlaps the big images' import.
  metrics_api() { kc get --raw "/apis/metrics.k8s.io/v1beta1/nodes/$NODE_NAME" | grep -q '"cpu"'; }
  if ! wait_metrics_api 150 metrics_api; then
    tail_log kube-apiserver 15
    { echo "----- metrics-server -----"
      kc -n kube-system get deploy,pods,endpointslices -l k8s-app=metrics-server -o wide
      kc get apiservice v1beta1.metrics.k8s.io -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}'
      kc -n kube-system logs deploy/metrics-server --tail=30
    } >&2 2>&1 || true
    fail_up "timed out after 150s waiting for the metrics API (kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes/$NODE_NAME): the HorizontalPodAutoscalers would have no metrics; metrics-server's state and log are above"
  fi
  local metrics_s
  metrics_s=$(secs "$t_dns" "$(now)")
  log "metrics API answering ${metrics_s}s after apply"

  # kube-router's first full sync: its chains and ipsets are in place and policies are enforced from
  # here on. It takes about 0.2 s after kube-router starts (measured by polling), so it is long done
  # by now and this only confirms it; kube_router_wait_s, the time spent waiting here, is what it
  # adds to `up` on top of its start (0.0 s in every run so far).
  local t_krwait kr_sync_s kr_wait_s
  t_krwait=$(now)
  kube_router_synced() { nsx iptables -w -S KUBE-ROUTER-FORWARD | grep -qF -- "--mark $KUBE_ROUTER_SYNC_MARK"; }
  wait_until 90 "kube-router's first firewall sync (iptables -S KUBE-ROUTER-FORWARD in $NETNS shows no rule with mark $KUBE_ROUTER_SYNC_MARK): NetworkPolicies would not be enforced" kube-router kube_router_synced
  kr_sync_s=$(secs "$t_kr" "$(now)")
  kr_wait_s=$(secs "$t_krwait" "$(now)")
  log "kube-router $KUBE_ROUTER_VERSION enforcing NetworkPolicies: first sync confirmed ${kr_sync_s}s after its start (waited ${kr_wait_s}s for it here)"

  if [ -n "$import_pid" ]; then
    wait "$import_pid" || fail_up "importing images from $IMAGES failed (log above)"
    log "all images imported ($(secs "$t_imp" "$(now)")s after the first)"
  fi

  cat >"$STATE/env" <<EOF
KUBECONFIG=$STATE/kubeconfig
NETNS=$NETNS
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
SERVICE_CIDR=$SERVICE_CIDR
POD_CIDR=$POD_CIDR
DNS_IP=$DNS_IP
CLUSTER_DOMAIN=$CLUSTER_DOMAIN
STORAGE_CLASS=$STORAGE_CLASS
AUDIT_LOG=$STATE/audit.log
KUBECTL=$nodebin/kubectl
CONTAINERD_ADDRESS=$SOCK
STATE=$STATE
EOF
  local total
  total=$(secs "$t0" "$(now)")
  cat >"$STATE/timings" <<EOF
apiserver_ready_s=$api_ready
node_ready_s=$node_ready_s
coredns_available_s=$dns_s
metrics_api_s=$metrics_s
kube_router_sync_s=$kr_sync_s
kube_router_wait_s=$kr_wait_s
up_total_s=$total
EOF
  log "up in ${total}s: apiserver ready ${api_ready}s after start, node Ready ${node_ready_s}s after kubelet start, CoreDNS Available ${dns_s}s and the metrics API ${metrics_s}s after apply, kube-router's first sync confirmed ${kr_sync_s}s after its start"
}

any_component_running() {
  local c
  for c in "${components[@]}"; do pid_of "$c" >/dev/null && return 0; done
  return 1
}

# ---------------------------------------------------------------------------------------------------
# down

# mounts_under DIR: mount points at or below DIR, deepest first.
mounts_under() {
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo |
    awk '{print gsub("/", "/"), $0}' | sort -rn | cut -d' ' -f2-
}

netns_inode() { stat -Lc %i "$NETNS_PATH" 2>/dev/null; }

# pids_in_netns INODE: every live process whose network namespace is ours.
pids_in_netns() {
  local p
  find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/net' -lname "net:\[$1\]" 2>/dev/null |
    while read -r p; do
      p=${p#/proc/}
      p=${p%%/*}
      if alive "$p"; then echo "$p"; fi
    done
  return 0
}

# our_cgroups: this cluster's cgroup root in every hierarchy.
our_cgroups() {
  find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d -name "$CGROUP_ROOT" 2>/dev/null
}

kubepods_pids() {
  local d
  our_cgroups | while read -r d; do
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done | sort -un
}

# make_cgroup_root: kubelet wants its cgroupRoot to exist in every hierarchy; cpuset needs its cpus
# and mems filled in before anything can join it.
make_cgroup_root() {
  local h
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [ -f "$h/cgroup.procs" ] || continue
    [ "${h##*/}" = unified ] && continue
    mkdir -p "$h/$CGROUP_ROOT"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h/$CGROUP_ROOT/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

# shim_pids: the shims started for our containerd (their command line names its socket).
shim_pids() {
  pgrep -f "containerd-shim.* -address $(printf '%s' "$SOCK" | sed 's/[.[\*^$]/\\&/g')( |\$)" || true
}

# kill_wait SIGNAL-GRACE PID...: SIGTERM, up to GRACE seconds, then SIGKILL; wait until gone.
kill_wait() {
  local grace=$1 p deadline
  shift
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  deadline=$(($(date +%s) + grace))
  while :; do
    local left=()
    for p in "$@"; do if alive "$p"; then left+=("$p"); fi; done
    [ ${#left[@]} -gt 0 ] || return 0
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kill -KILL "${left[@]}" 2>/dev/null || true
      [ "$(date +%s)" -lt $((deadline + 10)) ] || { log "processes still alive after SIGKILL: ${left[*]}"; return 1; }
    fi
    sleep 0.1
  done
}

stop_component() {
  local pid
  pid=$(pid_of "$1") || return 0
  kill_wait "${2:-5}" "$pid"
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "down needs root"
  local t0 problems=() phases="" t_phase
  t0=$(now)
  t_phase=$t0
  # phase NAME: note how long the step just finished took.
  phase() {
    local t
    t=$(now)
    phases+=" $1 $(secs "$t_phase" "$t")s"
    t_phase=$t
  }
  local ino
  ino=$(netns_inode || true)

  # 1. kubelet first (it would restart containers), then the pods' processes (by their cgroups),
  #    the shims started for our containerd (PID 1 is their parent), containerd, and the rest.
  stop_component kubelet 2
  local pids
  for _ in 1 2 3; do
    mapfile -t pids < <(kubepods_pids)
    [ ${#pids[@]} -gt 0 ] || break
    kill_wait 0 "${pids[@]}" || true
  done
  mapfile -t pids < <(shim_pids)
  kill_wait 0 "${pids[@]}" || true
  stop_component containerd 3
  stop_component kube-proxy 3
  # Its iptables chains and ipsets are the namespace's and go with it (step 6).
  stop_component kube-router 3
  local c
  pids=()
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    local p
    p=$(pid_of "$c") && pids+=("$p")
  done
  kill_wait 1 "${pids[@]}" || true
  # Anything else still in the namespace (a test binary left by `exec`, a hostNetwork pod).
  if [ -n "$ino" ]; then
    mapfile -t pids < <(pids_in_netns "$ino")
    if [ ${#pids[@]} -gt 0 ]; then
      log "stopping other processes still in $NETNS: $(for p in "${pids[@]}"; do printf '%s(%s) ' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done)"
      kill_wait 2 "${pids[@]}" || true
    fi
  fi
  rm -f "$STATE"/pids/* 2>/dev/null || true

  phase processes
  # 2. Mounts: everything below $STATE (kubelet's shared bind of its root dir, pods' tmpfs and
  #    overlays, sandbox shm), deepest first; then the pods' network namespaces containerd made.
  local before=$STATE/host-before m
  for _ in 1 2 3 4 5; do
    mapfile -t pids < <(mounts_under "$STATE")
    [ ${#pids[@]} -gt 0 ] || break
    for m in "${pids[@]}"; do umount "$m" 2>/dev/null || true; done
  done
  mapfile -t pids < <(mounts_under "$STATE")
  if [ ${#pids[@]} -gt 0 ]; then
    for m in "${pids[@]}"; do umount -l "$m" 2>/dev/null || true; done
    problems+=("needed a lazy unmount for: ${pids[*]}")
  fi
  local ns
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    if [ -f "$before/netns" ] && grep -qxF "${ns##*/}" "$before/netns"; then continue; fi
    umount "$ns" 2>/dev/null || true
    rm -f "$ns"
  done

  phase mounts
  # 3. cgroups: ours in every hierarchy, depth first (unless they were there before).
  local d
  while read -r d; do
    [ -n "$d" ] || continue
    if [ -f "$before/cgroups" ] && grep -qxF "$d" "$before/cgroups"; then continue; fi
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [ -d "$d" ] || break
      sleep 0.2
    done
    [ -d "$d" ] && problems+=("cannot remove cgroup $d")
  done < <(our_cgroups)

  phase cgroups
  # 4. Files the runtime writes outside $STATE.
  local a
  for a in "$STATE"/containerd/state/io.containerd.runtime.v2.task/*/*/address; do
    [ -f "$a" ] || continue
    a=$(cat "$a")
    a=${a#unix://}
    case $a in /run/containerd/s/*) rm -f "$a" ;; esac
  done
  for a in /run/containerd/s/*; do
    [ -e "$a" ] || continue
    if [ -f "$before/paths" ] && grep -qxF "$a" "$before/paths"; then continue; fi
    # Not there before and nobody listens on it any more (a shim of ours; no other shim can be
    # listening after its containerd went away unless it belongs to another runtime, which keeps it).
    if ! grep -q " ${a}\$" /proc/net/unix 2>/dev/null; then rm -f "$a"; fi
  done
  # libcni's result cache: <network>-<container id>-<interface>, for our network and containerd's
  # loopback network (cni-loopback) of the same sandboxes.
  for a in /var/lib/cni/results/"$CNI_NETWORK"-*; do
    [ -f "$a" ] || continue
    local id=${a#/var/lib/cni/results/"$CNI_NETWORK"-}
    id=${id%-*}
    rm -f /var/lib/cni/results/*-"$id"-*
  done
  for a in /var/log/containers/*; do
    [ -L "$a" ] || continue
    case $(readlink "$a") in "$STATE"/*) rm -f "$a" ;; esac
  done
  # kubelet's device manager hard-codes /var/lib/kubelet/device-plugins whatever its --root-dir.
  for d in /var/lib/kubelet/device-plugins /var/lib/kubelet; do
    if [ -d "$d" ] && [ -f "$before/paths" ] && grep -qxF "$d: absent" "$before/paths" && [ -z "$(mounts_under "$d")" ]; then
      rm -rf --one-file-system "$d"
    fi
  done
  # Folders that did not exist before `up` and are empty now.
  for d in /run/containerd/s /run/containerd/runc /run/containerd/fifo /run/containerd /var/lib/cni/results \
    /var/lib/cni/networks /var/lib/cni /var/log/containers /var/log/pods; do
    [ -d "$d" ] || continue
    if [ -f "$before/paths" ] && grep -qxF "$d: absent" "$before/paths"; then rmdir "$d" 2>/dev/null || true; fi
  done

  phase files
  # 5. Host-global sysctls kubelet changed.
  if [ -f "$before/sysctl" ]; then
    local k v
    while IFS=' ' read -r k v; do
      [ "$v" = "(absent)" ] && continue
      [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -qw "$k=$v" || problems+=("cannot restore $k=$v")
    done < <(sed 's/ = / /' "$before/sysctl")
  fi

  phase sysctls
  # 6. The namespace (its bridge, veths, iptables chains and conntrack entries go with it), and the
  #    /run/netns mount `ip netns add` made.
  if [ -e "$NETNS_PATH" ]; then
    ino=$(netns_inode || true)
    if [ -n "$ino" ] && [ -n "$(pids_in_netns "$ino")" ]; then
      problems+=("processes still in $NETNS: $(pids_in_netns "$ino" | tr '\n' ' ')")
    fi
    ip netns del "$NETNS" || problems+=("ip netns del $NETNS failed")
  fi
  if [ -f "$before/mounts" ] && ! grep -q '^/run/netns ' "$before/mounts"; then
    while grep -q ' /run/netns ' /proc/self/mountinfo && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; do
      umount /run/netns || break
    done
  fi
  if [ -f "$before/paths" ] && grep -qxF "/run/netns: absent" "$before/paths"; then rmdir /run/netns 2>/dev/null || true; fi

  phase netns
  # 7. $STATE: keep the logs, audit log, the suite's output, timings and the host records; remove the rest.
  if [ -d "$STATE" ]; then
    if [ -n "$(mounts_under "$STATE")" ]; then
      problems+=("mounts remain under $STATE; not removing it: $(mounts_under "$STATE" | tr '\n' ' ')")
    else
      for a in "$STATE"/* "$STATE"/.[!.]*; do
        [ -e "$a" ] || continue
        case ${a##*/} in logs | audit.log | e2e.log | timings | host-before | host-after | host-diff) ;; *) rm -rf --one-file-system "$a" ;; esac
      done
    fi
  fi

  phase state
  # 8. Compare with the record taken at `up`.
  local rc=0
  if [ -d "$before" ]; then
    snapshot "$STATE/host-after"
    local diffs=""
    for f in "$before"/*; do
      local dd
      dd=$(diff -u --label "before: ${f##*/}" --label "after: ${f##*/}" "$f" "$STATE/host-after/${f##*/}" || true)
      [ -z "$dd" ] || diffs+="$dd"$'\n'
    done
    printf '%s' "$diffs" >"$STATE/host-diff"
    if [ -n "$diffs" ]; then
      log "the host differs from before up:"
      printf '%s' "$diffs" >&2
      rc=1
    else
      log "host state identical to before up (links, routes, iptables, ipsets, mounts, netns, cgroups, sysctls, paths)"
    fi
  else
    log "no record of the host from an up in $STATE; nothing to compare"
  fi
  if [ ${#problems[@]} -gt 0 ]; then
    for p in "${problems[@]}"; do log "problem: $p"; done
    rc=1
  fi
  phase compare
  log "down in $(secs "$t0" "$(now)")s (${phases# })"
  return $rc
}

# ---------------------------------------------------------------------------------------------------

load_env() {
  [ -f "$STATE/env" ] || die "no cluster is up for $STATE (no $STATE/env); run hack/node/cluster.sh up"
  [ -e "$NETNS_PATH" ] || die "network namespace $NETNS does not exist; run hack/node/cluster.sh up"
}

cmd_exec() {
  [ $# -gt 0 ] || die "usage: cluster.sh exec COMMAND [ARGS...]"
  load_env
  local kv envs=()
  while IFS= read -r kv; do [ -n "$kv" ] && envs+=("$kv"); done <"$STATE/env"
  local kubectl
  kubectl=$(sed -n 's/^KUBECTL=//p' "$STATE/env")
  exec nsenter --net="$NETNS_PATH" -- env "${envs[@]}" PATH="$(dirname "$kubectl"):$PATH" "$@"
}

cmd_status() {
  local c pid rc=0
  if [ -e "$NETNS_PATH" ]; then echo "netns $NETNS: present"; else echo "netns $NETNS: absent"; rc=1; fi
  for c in "${components[@]}"; do
    if pid=$(pid_of "$c"); then
      printf '%-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '%-24s not running\n' "$c"
      rc=1
    fi
  done
  [ -f "$STATE/env" ] && echo "env: $STATE/env" || rc=1
  return $rc
}

cmd_import() {
  [ $# -gt 0 ] || die "usage: cluster.sh import FILE.tar..."
  load_env
  pid_of containerd >/dev/null || die "containerd is not running"
  local f
  for f in "$@"; do
    [ -f "$f" ] || die "$f: no such file"
    ctr -a "$SOCK" -n k8s.io images import "$f" >&2 || die "importing $f failed"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) cmd_up ;;
  down) cmd_down ;;
  exec) cmd_exec "$@" ;;
  env) load_env; cat "$STATE/env" ;;
  status) cmd_status ;;
  import) cmd_import "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; echo >&2; exit 2 ;;
esac
