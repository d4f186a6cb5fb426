//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// Case 15 (issue 33): the instances' NetworkPolicies on the real node, whose kube-router enforces
// them. The contract (spec.networkPolicy, on by default): per instance <inst>, in its namespace and
// owned by its TiledInstance,
//
//   - <inst> selects the Tiled pods: TCP 8000 from every pod of the namespace, from the pods of
//     ingressControllerNamespace (built-in ingress-nginx) and from tiledFrom; TCP 9090 (the metrics
//     sidecar) from the pods of metricsNamespace when monitoring is on;
//   - <inst>-postgres selects the managed database's pod: TCP 5432 from the instance's Tiled, lifecycle
//     (the upgrade procedure's and restore Jobs) and backups pods only;
//   - <inst>-cache selects the managed cache's pod: TCP 6379 from the instance's Tiled pods only;
//   - <inst>-egress (egress.restricted only) selects all its pods: connections out only to DNS, its
//     own database and cache, and egress.allow.
//
// kube-router lets through whatever starts on the node itself (kubelet's probes, the API server's
// calls to the webhooks, this test process, which runs in the node's network namespace): only
// traffic between pods is filtered, so every check connects from a pod. A pod labelled as an
// instance's Tiled pod would be let through by the policies: that is no positive control (labels
// are forgeable by whoever may create pods in the namespace, docs/e2e.md), so the controls are pods
// the policies admit by namespace.
//
// What the case does not cover and where it is covered: Tiled reaching its database under the
// policies is every instance being Ready (checked here for the first fleet, and by every other
// case); the upgrade procedure's Jobs (check, backup, migrate, restore: component lifecycle) reaching
// the database under the policies is case 9 (e2e-upgrade), the backup CronJob's Jobs (component
// backups) and the restore of a new instance case 10 (e2e-backup); both check first that their
// instances' policies exist (requireInstancePolicies). Tiled reaching the cache is case 11.
const (
	// npIngressNS is the built-in networkPolicy.ingressControllerNamespace. The node has no ingress
	// controller: a pod of this namespace reaching Tiled's Service is the Ingress path as far as the
	// network is concerned.
	npIngressNS = "ingress-nginx"
	// npOutsideNS is a namespace no policy admits.
	npOutsideNS = "e2e-np-outside"
	// npNS holds the case's own one-beamline fleet, egress restricted, whose profile turns the
	// policies off and on.
	npNS       = "e2e-netpol"
	npCluster  = "np"
	npFacility = "e2e-np"
	// npListenerPort is the port of the listener pod of npNS, which no policy selects.
	npListenerPort = 8080
	// npTimeout is how long one connection attempt may take; a timeout is a denial (kube-router
	// drops what a policy does not allow).
	npTimeout = 3 * time.Second
	// npSettle bounds how long kube-router takes to apply a created or deleted policy.
	npSettle = time.Minute
)

// npAttempt is one connection a probe tries, and, back from the probe, how it ended.
type npAttempt struct {
	Target string `json:"target"` // what is tried, for the messages: "e2e-amx database Service"
	Host   string `json:"host"`   // a Service's DNS name or a pod IP
	Port   int    `json:"port"`
	// HTTP, when not empty, is a path the probe GETs once connected: the attempt reached its
	// target only when an HTTP status line came back (Tiled answered, not just a socket).
	HTTP string `json:"http,omitempty"`
	// Allow: the policies must let this connection through (a positive control); otherwise they
	// must refuse it.
	Allow bool `json:"allow"`

	// Outcome is connected, refused, timeout, unreachable (a firewall's ICMP answer), dns-error or
	// error.
	Outcome string `json:"outcome,omitempty"`
	IP      string `json:"ip,omitempty"`
	Status  string `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
}

// npProbeScript tries every attempt of the JSON list argv[1] at once, each with a connect timeout
// of argv[2] seconds, and prints each result as one JSON line after E2E-NP.
const npProbeScript = `
import concurrent.futures, errno, json, socket, sys
TIMEOUT = float(sys.argv[2])
def attempt(a):
    out = dict(a)
    try:
        ip = socket.getaddrinfo(a["host"], a["port"], socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError as e:
        out["outcome"], out["error"] = "dns-error", str(e)
        return out
    out["ip"] = ip
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    try:
        s.connect((ip, a["port"]))
    except socket.timeout:
        out["outcome"] = "timeout"
        return out
    except ConnectionRefusedError:
        out["outcome"] = "refused"
        return out
    except OSError as e:
        unreachable = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.EPERM)
        out["outcome"], out["error"] = ("unreachable" if e.errno in unreachable else "error"), str(e)
        return out
    out["outcome"] = "connected"
    if a.get("http"):
        try:
            s.settimeout(20)
            s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (a["http"], a["host"])).encode())
            out["status"] = s.recv(256).decode("latin-1").split("\r\n")[0]
        except OSError as e:
            out["error"] = str(e)
    s.close()
    return out
with concurrent.futures.ThreadPoolExecutor(8) as ex:
    for r in ex.map(attempt, json.loads(sys.argv[1])):
        print("E2E-NP " + json.dumps(r), flush=True)
print("E2E-OK")
`

// npListenerScript accepts connections on npListenerPort and closes them.
const npListenerScript = `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", 8080))
s.listen(64)
print("E2E-OK", flush=True)
while True:
    c, _ = s.accept()
    c.close()
`

func npProfileYAML(t *testing.T, off bool) string {
	p := profileYAMLIn(npNS, "np-defaults", npFacility, tiledImg())
	var ports []string
	for _, p := range dnsTargetPorts(t) {
		ports = append(ports, fmt.Sprint(p))
	}
	egress := fmt.Sprintf("    egress: {restricted: true, dnsPorts: [%s]}\n", strings.Join(ports, ", "))
	if off {
		return p + "  networkPolicy:\n    enabled: false\n" + egress
	}
	return p + "  networkPolicy:\n" + egress
}

// dnsTargetPorts are the ports the cluster's DNS pods answer on, as an admin finds them: the
// targetPorts of the Service kube-system/kube-dns (the node's CoreDNS listens on 1053, without the
// capability to bind 53), which networkPolicy.egress.dnsPorts must name (a NetworkPolicy sees the
// connection after the Service's address was translated). Without it the restricted Tiled pod
// cannot resolve its database's name and never starts (seen).
func dnsTargetPorts(t *testing.T) []int32 {
	t.Helper()
	var svc corev1.Service
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}, &svc); err != nil {
		t.Fatalf("the DNS Service kube-system/kube-dns: %v", err)
	}
	var out []int32
	for _, p := range svc.Spec.Ports {
		port := p.TargetPort.IntVal
		if port == 0 {
			port = p.Port
		}
		if !slices.Contains(out, port) {
			out = append(out, port)
		}
	}
	if len(out) == 0 {
		t.Fatal("the DNS Service kube-system/kube-dns has no ports")
	}
	return out
}

func npClusterYAML() string {
	return upgradeClusterSpec{ns: npNS, name: npCluster, facility: npFacility, beamlines: []string{"r1"}}.yaml()
}

// instancePods are an instance's pods by component (server, database, cache).
type instancePods map[string][]corev1.Pod

func podsOfInstance(t *testing.T, ns, instance string) instancePods {
	t.Helper()
	var l corev1.PodList
	if err := cl.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelAppInstance: instance}); err != nil {
		t.Fatal(err)
	}
	out := instancePods{}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		c := p.Labels[v1alpha1.LabelAppComponent]
		out[c] = append(out[c], p)
	}
	return out
}

// one returns the one running pod of component, failing the case otherwise.
func (p instancePods) one(t *testing.T, instance, component string) corev1.Pod {
	t.Helper()
	if len(p[component]) != 1 || p[component][0].Status.PodIP == "" {
		t.Fatalf("instance %s: %d running %s pods (want 1, with an IP)", instance, len(p[component]), component)
	}
	return p[component][0]
}

func testNetworkPolicies(t *testing.T) {
	ctx := ctxT(t)
	start := time.Now()
	t.Cleanup(func() {
		_, _ = kubectl(nil, "-n", tenantNS, "delete", "pod", "client-np-foreign", "--ignore-not-found", "--wait=false")
		if t.Failed() {
			t.Logf("namespaces %s, %s and %s are kept for inspection", npNS, npOutsideNS, npIngressNS)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", npNS, npOutsideNS, npIngressNS, "--wait=false", "--ignore-not-found")
	})

	// The case's own fleet starts first, so that its pods come up while the first fleet is probed.
	for _, ns := range []string{npNS, npOutsideNS, npIngressNS} {
		mustKubectl(t, []byte(namespaceYAML(ns)), "apply", "--server-side", "-f", "-")
	}
	mustKubectl(t, []byte(npProfileYAML(t, false)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(npClusterYAML()), "apply", "--server-side", "-f", "-")
	for _, ns := range []string{npNS, npOutsideNS, npIngressNS} {
		waitDefaultServiceAccount(t, ns)
	}
	listener := pythonPod{name: "np-listener", namespace: npNS, image: tiledImg(), script: npListenerScript,
		specExtra: "  automountServiceAccountToken: false\n"}
	startPythonPod(t, listener)

	// 1. The first fleet is Ready (each Tiled reaches its database through <inst>-postgres), and
	// each beamline has exactly the policies the contract names.
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=4m")
	var managerNP networkingv1.NetworkPolicy
	if err := cl.Get(ctx, types.NamespacedName{Namespace: operatorNS, Name: operatorDep}, &managerNP); err != nil {
		t.Errorf("the manager pods' NetworkPolicy %s/%s (config/default): %v", operatorNS, operatorDep, err)
	} else {
		checkPolicyPorts(t, &managerNP, operatorPods(t), "(webhook 9443 and metrics 8443)", 9443, 8443)
	}
	type beamline struct {
		ti                           *v1alpha1.TiledInstance
		tiled, database, cache       corev1.Pod
		tiledSvc, dbSvc, cacheSvc    string // DNS names
		tiledIP, dbSvcIP, cacheSvcIP string // ClusterIPs
	}
	var bls []beamline
	for _, b := range beamlines {
		ti := getInstance(t, instanceName(b))
		if c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("TiledInstance %s/%s: Ready %+v, want True (Tiled reaches its database under the policies)", tenantNS, ti.Name, c)
		}
		n := fleet.NamesOf(ti)
		pods := podsOfInstance(t, tenantNS, ti.Name)
		bl := beamline{ti: ti,
			tiled: pods.one(t, ti.Name, render.ComponentServer), database: pods.one(t, ti.Name, render.ComponentDatabase), cache: pods.one(t, ti.Name, render.ComponentCache),
			tiledSvc: n.Tiled + "." + tenantNS + ".svc", dbSvc: n.Postgres + "." + tenantNS + ".svc", cacheSvc: n.Cache + "." + tenantNS + ".svc"}
		bl.tiledIP = serviceIP(t, tenantNS, n.Tiled, render.Port)
		bl.dbSvcIP = serviceIP(t, tenantNS, n.Postgres, render.PostgresPort)
		bl.cacheSvcIP = serviceIP(t, tenantNS, n.Cache, render.CachePort)
		others := func(except string) []corev1.Pod {
			var out []corev1.Pod
			for c, ps := range pods {
				if c != except {
					out = append(out, ps...)
				}
			}
			return out
		}
		checkPolicy(t, tenantNS, ti.Name, ti, pods[render.ComponentServer], others(render.ComponentServer), render.Port, render.MetricsPort)
		checkPolicy(t, tenantNS, ti.Name+"-postgres", ti, pods[render.ComponentDatabase], others(render.ComponentDatabase), render.PostgresPort)
		checkPolicy(t, tenantNS, ti.Name+"-cache", ti, pods[render.ComponentCache], others(render.ComponentCache), render.CachePort)
		var egress networkingv1.NetworkPolicy
		if err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: ti.Name + "-egress"}, &egress); !apierrors.IsNotFound(err) {
			t.Errorf("NetworkPolicy %s/%s-egress: %v; want none (egress.restricted is false by default)", tenantNS, ti.Name, err)
		}
		bls = append(bls, bl)
	}
	if t.Failed() {
		t.FailNow()
	}

	// 2. The addresses are right: from the node (this process, in the node's network namespace,
	// which kube-router lets through) every database, cache and metrics port the pods will try
	// accepts a connection. Without this a refused connection below could be a wrong address.
	listenerIP := waitPodIP(t, npNS, listener.name)
	var nodeChecks []string
	for _, bl := range bls {
		nodeChecks = append(nodeChecks,
			net.JoinHostPort(bl.database.Status.PodIP, strconv.Itoa(render.PostgresPort)), net.JoinHostPort(bl.dbSvcIP, strconv.Itoa(render.PostgresPort)),
			net.JoinHostPort(bl.cache.Status.PodIP, strconv.Itoa(render.CachePort)), net.JoinHostPort(bl.cacheSvcIP, strconv.Itoa(render.CachePort)),
			net.JoinHostPort(bl.tiled.Status.PodIP, strconv.Itoa(render.MetricsPort)), net.JoinHostPort(bl.tiled.Status.PodIP, strconv.Itoa(render.Port)),
			net.JoinHostPort(bl.tiledIP, strconv.Itoa(render.Port)))
	}
	nodeChecks = append(nodeChecks, net.JoinHostPort(listenerIP, strconv.Itoa(npListenerPort)))
	var managers []corev1.Pod
	for _, p := range operatorPods(t) {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			managers = append(managers, p)
			nodeChecks = append(nodeChecks, net.JoinHostPort(p.Status.PodIP, "8443"), net.JoinHostPort(p.Status.PodIP, "9443"))
		}
	}
	eventually(t, time.Minute, time.Second, "every address the probes try accepts a connection from the node", func() (bool, string) {
		for _, a := range nodeChecks {
			c, err := net.DialTimeout("tcp", a, npTimeout)
			if err != nil {
				return false, fmt.Sprintf("%s: %v (a wrong address, or nothing listens: the denials would prove nothing)", a, err)
			}
			c.Close()
		}
		return true, ""
	})

	// 3. From pods: one per source, every target in one run.
	//   - foreign: a pod of the fleet's namespace labelled as no instance's. Denied: each database
	//     and cache (Service and pod IP) and each metrics sidecar. Control: each Tiled Service
	//     answers HTTP (the namespace is admitted to port 8000).
	//   - ingress: a pod of ingress-nginx. Control: each Tiled Service answers HTTP (the Ingress
	//     path, as far as the network goes). Denied: the databases, caches and sidecars.
	//   - outside: a pod of a third namespace. Denied: everything of the fleet, Tiled's Service and
	//     pod included, and the manager pods' metrics port (8443: only from namespaces labelled
	//     metrics: enabled; cases 13 and 14 scrape it from such namespaces). Controls: the listener
	//     of npNS, which no policy selects, and the manager pods' webhook port (9443, from anywhere).
	var foreign, ingress, outside []npAttempt
	for _, bl := range bls {
		inst := bl.ti.Name
		private := []npAttempt{
			{Target: inst + " database Service", Host: bl.dbSvc, Port: render.PostgresPort},
			{Target: inst + " database pod " + bl.database.Name, Host: bl.database.Status.PodIP, Port: render.PostgresPort},
			{Target: inst + " cache Service", Host: bl.cacheSvc, Port: render.CachePort},
			{Target: inst + " cache pod " + bl.cache.Name, Host: bl.cache.Status.PodIP, Port: render.CachePort},
			{Target: inst + " metrics sidecar of pod " + bl.tiled.Name, Host: bl.tiled.Status.PodIP, Port: render.MetricsPort},
		}
		tiled := npAttempt{Target: inst + " Tiled Service", Host: bl.tiledSvc, Port: render.Port, HTTP: "/api/v1/"}
		allowed := tiled
		allowed.Allow = true
		foreign = append(append(foreign, private...), allowed)
		ingress = append(append(ingress, private...), allowed)
		outside = append(append(outside, private...), tiled,
			npAttempt{Target: inst + " Tiled pod " + bl.tiled.Name, Host: bl.tiled.Status.PodIP, Port: render.Port})
	}
	outside = append(outside, npAttempt{Target: "the listener of " + npNS + " (no policy)", Host: listenerIP, Port: npListenerPort, Allow: true})
	for _, p := range managers {
		outside = append(outside,
			npAttempt{Target: "the metrics port of manager pod " + p.Name, Host: p.Status.PodIP, Port: 8443},
			npAttempt{Target: "the webhook port of manager pod " + p.Name, Host: p.Status.PodIP, Port: 9443, Allow: true})
	}
	probes := []struct {
		pod      pythonPod
		attempts []npAttempt
	}{
		{npProbePod("client-np-foreign", tenantNS, foreign), foreign},
		{npProbePod("np-ingress", npIngressNS, ingress), ingress},
		{npProbePod("np-outside", npOutsideNS, outside), outside},
	}
	for _, p := range probes {
		startPythonPod(t, p.pod)
	}
	for _, p := range probes {
		logs := waitPythonPod(t, p.pod, clientPodTimeout)
		judgeAttempts(t, "pod "+p.pod.namespace+"/"+p.pod.name, p.attempts, npResults(logs))
	}

	// 4. The webhooks answer while the policies are in force (the API server calls them from the
	// node; the manager's policy admits port 9443 from anywhere): a TiledCluster admitted by a
	// server-side dry run, and a bad one refused by the validating webhook with its message.
	okCluster := strings.Replace(clusterYAML(false, []string{"amx"}), "name: "+clusterName+"\n", "name: np-webhook-probe\n", 1)
	if out, err := kubectl([]byte(okCluster), "apply", "--server-side", "--dry-run=server", "-f", "-"); err != nil {
		t.Errorf("a valid TiledCluster refused under the policies (dry run): %v\n%s", err, out)
	}
	bad := fmt.Sprintf(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: np-webhook-bad, namespace: %s}
spec:
  profileSelector: {matchLabels: {facility: e2e}}
  template: {expose: {ingress: {hostExpression: "instance.name +"}}}
  instances: [{name: amx}]
`, tenantNS)
	if out, err := kubectl([]byte(bad), "apply", "--server-side", "--dry-run=server", "-f", "-"); err == nil {
		t.Errorf("a TiledCluster whose hostExpression does not compile was admitted under the policies:\n%s", out)
	} else {
		for _, want := range []string{"TiledCluster " + tenantNS + "/np-webhook-bad refused", "hostExpression", "compile"} {
			if !strings.Contains(out, want) {
				t.Errorf("the validating webhook's refusal does not say %q (was it the webhook that answered?):\n%s", want, out)
			}
		}
	}

	// 5. The case's own fleet: egress restricted. Ready means Tiled resolves its database's and
	// cache's names (DNS) and reaches them; its four policies exist.
	npInst := upgInstance(npCluster, "r1")
	npNames := []string{npInst, npInst + "-postgres", npInst + "-cache", npInst + "-egress"}
	mustKubectl(t, nil, "-n", npNS, "wait", "--for=condition=Ready", "tc/"+npCluster, "--timeout=8m")
	ti := getInstanceIn(t, npNS, npInst)
	pods := podsOfInstance(t, npNS, npInst)
	tiledPod := pods.one(t, npInst, render.ComponentServer)
	var all []corev1.Pod
	for _, ps := range pods {
		all = append(all, ps...)
	}
	checkEgressPolicy(t, npNS, npInst+"-egress", ti, all)
	if got := presentPolicies(t, npNS, npNames); len(got) != len(npNames) {
		t.Fatalf("instance %s/%s with egress restricted has the NetworkPolicies %v, want %v", npNS, npInst, got, npNames)
	}
	uids := map[string]types.UID{}
	for _, p := range all {
		uids[p.Name] = p.UID
	}
	n := fleet.NamesOf(ti)
	// From inside the restricted Tiled pod: its own database and cache by name (DNS and both
	// allowed), the listener (no rule allows it) refused.
	restricted := []npAttempt{
		{Target: npInst + " database Service (its own)", Host: n.Postgres + "." + npNS + ".svc", Port: render.PostgresPort, Allow: true},
		{Target: npInst + " cache Service (its own)", Host: n.Cache + "." + npNS + ".svc", Port: render.CachePort, Allow: true},
		{Target: "the listener of " + npNS, Host: listenerIP, Port: npListenerPort},
	}
	source := "the restricted Tiled pod " + npNS + "/" + tiledPod.Name
	judgeAttempts(t, source, restricted, execProbe(t, npNS, tiledPod.Name, restricted))

	// 6. The profile turns the policies off: all four deleted (pruned), the listener reachable from
	// the Tiled pod; on again: all four back, the listener refused again. No pod replaced.
	listenerOnly := restricted[2:]
	offAt := time.Now()
	mustKubectl(t, []byte(npProfileYAML(t, true)), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, 500*time.Millisecond, "every NetworkPolicy of "+npInst+" deleted after networkPolicy.enabled false", func() (bool, string) {
		got := presentPolicies(t, npNS, npNames)
		return len(got) == 0, fmt.Sprintf("still %v", got)
	})
	offSeconds := time.Since(offAt).Seconds()
	npEventually(t, source, tiledPod.Name, "the listener reachable once the policies are off", listenerOnly, true)
	onAt := time.Now()
	mustKubectl(t, []byte(npProfileYAML(t, false)), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, 500*time.Millisecond, "every NetworkPolicy of "+npInst+" back after networkPolicy.enabled true", func() (bool, string) {
		got := presentPolicies(t, npNS, npNames)
		return len(got) == len(npNames), fmt.Sprintf("only %v", got)
	})
	onSeconds := time.Since(onAt).Seconds()
	npEventually(t, source, tiledPod.Name, "the listener refused again once the policies are back", listenerOnly, false)
	mustKubectl(t, nil, "-n", npNS, "wait", "--for=condition=Ready", "tiledinstance/"+npInst, "--timeout=2m")
	now := map[string]types.UID{}
	for _, ps := range podsOfInstance(t, npNS, npInst) {
		for _, pod := range ps {
			now[pod.Name] = pod.UID
		}
	}
	for name, uid := range uids {
		if now[name] != uid {
			t.Errorf("pod %s/%s replaced while the policies were turned off and on (uid %q, was %s)", npNS, name, now[name], uid)
		}
	}
	figMu.Lock()
	fig.NetworkPolicyOffSeconds, fig.NetworkPolicyOnSeconds = offSeconds, onSeconds
	figMu.Unlock()
	t.Logf("policies of %s off -> all deleted %.1fs; on -> all back %.1fs; case 15 took %.0fs; %d connections refused, %d let through unexpectedly, %d controls reached, %d failed",
		npInst, offSeconds, onSeconds, time.Since(start).Seconds(), fig.NetworkPolicyDenied, fig.NetworkPolicyAllowedUnexpected, fig.NetworkPolicyControlsReached, fig.NetworkPolicyControlsFailed)
}

// npProbePod is a restricted pod of namespace, labelled as no instance's, that tries attempts.
func npProbePod(name, namespace string, attempts []npAttempt) pythonPod {
	b, err := json.Marshal(attempts)
	if err != nil {
		panic(err)
	}
	return pythonPod{name: name, namespace: namespace, image: tiledImg(), script: npProbeScript,
		args: []string{string(b), strconv.Itoa(int(npTimeout.Seconds()))}, specExtra: "  automountServiceAccountToken: false\n"}
}

// execProbe runs the probe in the tiled container of pod (its network namespace: the pod's
// policies apply) and returns the results.
func execProbe(t *testing.T, ns, pod string, attempts []npAttempt) []npAttempt {
	t.Helper()
	b, err := json.Marshal(attempts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubectl(nil, "-n", ns, "exec", pod, "-c", "tiled", "--", "python", "-c", npProbeScript, string(b), strconv.Itoa(int(npTimeout.Seconds())))
	if err != nil || !strings.Contains(out, "E2E-OK") {
		t.Fatalf("the probe in %s/%s: %v\n%s", ns, pod, err, out)
	}
	return npResults(out)
}

// npResults parses the probe's E2E-NP lines.
func npResults(logs string) []npAttempt {
	var out []npAttempt
	for _, l := range strings.Split(logs, "\n") {
		js, ok := strings.CutPrefix(strings.TrimSpace(l), "E2E-NP ")
		if !ok {
			continue
		}
		var a npAttempt
		if json.Unmarshal([]byte(js), &a) == nil {
			out = append(out, a)
		}
	}
	return out
}

// reached says whether an attempt got through: connected and, for an HTTP attempt, answered.
func (a npAttempt) reached() bool {
	return a.Outcome == "connected" && (a.HTTP == "" || strings.HasPrefix(a.Status, "HTTP/"))
}

// denied says whether an attempt was stopped by the network: refused, timed out, or refused by a
// firewall's ICMP answer (a name that does not resolve is not a denial, it is a broken check).
func (a npAttempt) denied() bool {
	return a.Outcome == "refused" || a.Outcome == "timeout" || a.Outcome == "unreachable"
}

func (a npAttempt) String() string {
	s := fmt.Sprintf("%s at %s:%d (%s", a.Target, a.Host, a.Port, a.Outcome)
	if a.IP != "" && a.IP != a.Host {
		s += ", " + a.IP
	}
	if a.Status != "" {
		s += ", " + a.Status
	}
	if a.Error != "" {
		s += ", " + a.Error
	}
	return s + ")"
}

// judgeAttempts counts and checks the results of one source's run: every attempt must come back;
// a control must reach its target; every other attempt must be denied.
func judgeAttempts(t *testing.T, source string, want, got []npAttempt) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d results for %d attempts", source, len(got), len(want))
	}
	denied, unexpected, reached, failed := 0, 0, 0, 0
	for _, a := range got {
		switch {
		case a.Allow && a.reached():
			reached++
		case a.Allow:
			failed++
			t.Errorf("%s could not reach %s, which the policies admit: the network or the target is broken, so this run's denials prove nothing", source, a)
		case a.denied():
			denied++
		case a.Outcome == "connected":
			unexpected++
			t.Errorf("%s connected to %s: a NetworkPolicy must refuse it", source, a)
		default:
			t.Errorf("%s could not try %s: neither reached nor denied", source, a)
		}
	}
	figMu.Lock()
	fig.NetworkPolicyDenied += denied
	fig.NetworkPolicyAllowedUnexpected += unexpected
	fig.NetworkPolicyControlsReached += reached
	fig.NetworkPolicyControlsFailed += failed
	figMu.Unlock()
	t.Logf("%s: %d refused as they must, %d connected unexpectedly, %d controls reached, %d not", source, denied, unexpected, reached, failed)
}

// npEventually runs the probe in the Tiled container of pod (of npNS; source names it in messages)
// until every attempt is reached (reach) or denied, within npSettle (kube-router applies a policy
// change within seconds), and counts only the last run.
func npEventually(t *testing.T, source, pod, what string, attempts []npAttempt, reach bool) {
	t.Helper()
	want := make([]npAttempt, len(attempts))
	for i, a := range attempts {
		a.Allow = reach
		want[i] = a
	}
	deadline := time.Now().Add(npSettle)
	for {
		got := execProbe(t, npNS, pod, want)
		ok := len(got) == len(want)
		for _, a := range got {
			ok = ok && (reach && a.reached() || !reach && a.denied())
		}
		if ok || time.Now().After(deadline) {
			t.Logf("%s: %s", source, what)
			judgeAttempts(t, source, want, got)
			return
		}
		time.Sleep(2 * time.Second)
	}
}

// presentPolicies returns which of the NetworkPolicies names exist in ns.
func presentPolicies(t *testing.T, ns string, names []string) []string {
	t.Helper()
	var out []string
	for _, name := range names {
		var np networkingv1.NetworkPolicy
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &np)
		switch {
		case err == nil && np.DeletionTimestamp == nil:
			out = append(out, name)
		case err != nil && !apierrors.IsNotFound(err):
			t.Fatalf("NetworkPolicy %s/%s: %v", ns, name, err)
		}
	}
	return out
}

// checkPolicy checks the NetworkPolicy name of ti: owned by it (its controller), labelled as managed
// by the operator, an Ingress policy whose pod selector matches every pod of selects and none of
// notSelects, admitting the ports (a named port is looked up in the selected pods' containers).
func checkPolicy(t *testing.T, ns, name string, ti *v1alpha1.TiledInstance, selects, notSelects []corev1.Pod, ports ...int32) {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &np); err != nil {
		t.Errorf("NetworkPolicy %s/%s of instance %s: %v", ns, name, ti.Name, err)
		return
	}
	checkOwned(t, &np, ti)
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy %s/%s: spec.policyTypes %v, want Ingress among them", ns, name, np.Spec.PolicyTypes)
	}
	checkSelects(t, &np, selects, notSelects)
	checkPolicyPorts(t, &np, selects, "", ports...)
}

// checkEgressPolicy checks the egress NetworkPolicy name of ti: owned by it, an Egress policy
// selecting every pod of the instance.
func checkEgressPolicy(t *testing.T, ns, name string, ti *v1alpha1.TiledInstance, pods []corev1.Pod) {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &np); err != nil {
		t.Errorf("NetworkPolicy %s/%s of instance %s (egress.restricted): %v", ns, name, ti.Name, err)
		return
	}
	checkOwned(t, &np, ti)
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("NetworkPolicy %s/%s: spec.policyTypes %v, want Egress among them", ns, name, np.Spec.PolicyTypes)
	}
	checkSelects(t, &np, pods, nil)
}

func checkOwned(t *testing.T, np *networkingv1.NetworkPolicy, ti *v1alpha1.TiledInstance) {
	t.Helper()
	if o := metav1.GetControllerOf(np); o == nil || o.Kind != "TiledInstance" || o.Name != ti.Name || o.UID != ti.UID {
		t.Errorf("NetworkPolicy %s/%s: controller %+v, want TiledInstance %s (uid %s)", np.Namespace, np.Name, o, ti.Name, ti.UID)
	}
	if np.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
		t.Errorf("NetworkPolicy %s/%s: label %s=%q, want %q", np.Namespace, np.Name, v1alpha1.LabelManagedBy, np.Labels[v1alpha1.LabelManagedBy], v1alpha1.ManagedByValue)
	}
}

func checkSelects(t *testing.T, np *networkingv1.NetworkPolicy, selects, notSelects []corev1.Pod) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Errorf("NetworkPolicy %s/%s: spec.podSelector: %v", np.Namespace, np.Name, err)
		return
	}
	if len(selects) == 0 {
		t.Errorf("NetworkPolicy %s/%s: no running pod to check its selector %s against", np.Namespace, np.Name, sel)
	}
	for _, p := range selects {
		if !sel.Matches(labels.Set(p.Labels)) {
			t.Errorf("NetworkPolicy %s/%s: spec.podSelector %s does not select pod %s %v", np.Namespace, np.Name, sel, p.Name, p.Labels)
		}
	}
	for _, p := range notSelects {
		if sel.Matches(labels.Set(p.Labels)) {
			t.Errorf("NetworkPolicy %s/%s: spec.podSelector %s selects pod %s %v, which it must not", np.Namespace, np.Name, sel, p.Name, p.Labels)
		}
	}
}

// checkPolicyPorts fails unless the policy's ingress rules admit each port (a named port resolved in
// the containers of pods).
func checkPolicyPorts(t *testing.T, np *networkingv1.NetworkPolicy, pods []corev1.Pod, what string, ports ...int32) {
	t.Helper()
	have := map[int32]bool{}
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port == nil {
				continue
			}
			if p.Port.IntValue() > 0 {
				have[int32(p.Port.IntValue())] = true
				continue
			}
			for _, pod := range pods {
				for _, c := range pod.Spec.Containers {
					for _, cp := range c.Ports {
						if cp.Name == p.Port.StrVal {
							have[cp.ContainerPort] = true
						}
					}
				}
			}
		}
	}
	for _, p := range ports {
		if !have[p] {
			t.Errorf("NetworkPolicy %s/%s admits no TCP %d %s: its ingress ports are %v", np.Namespace, np.Name, p, what, sortedKeys(portKeys(have)))
		}
	}
}

func portKeys(m map[int32]bool) map[string]bool {
	out := map[string]bool{}
	for p := range m {
		out[strconv.Itoa(int(p))] = true
	}
	return out
}

// serviceIP returns the ClusterIP of the Service name, failing unless it has port.
func serviceIP(t *testing.T, ns, name string, port int32) string {
	t.Helper()
	var s corev1.Service
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatalf("Service %s/%s: %v", ns, name, err)
	}
	for _, p := range s.Spec.Ports {
		if p.Port == port {
			return s.Spec.ClusterIP
		}
	}
	t.Fatalf("Service %s/%s has no port %d: %+v", ns, name, port, s.Spec.Ports)
	return ""
}

// waitPodIP waits for the pod to run with an IP and returns it.
func waitPodIP(t *testing.T, ns, name string) string {
	t.Helper()
	var ip string
	eventually(t, 2*time.Minute, time.Second, "pod "+ns+"/"+name+" running", func() (bool, string) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			return false, err.Error()
		}
		ip = p.Status.PodIP
		return p.Status.Phase == corev1.PodRunning && ip != "", string(p.Status.Phase)
	})
	return ip
}

// waitDefaultServiceAccount waits for the default ServiceAccount of a new namespace, without which
// a pod is refused.
func waitDefaultServiceAccount(t *testing.T, ns string) {
	t.Helper()
	eventually(t, time.Minute, 500*time.Millisecond, "ServiceAccount "+ns+"/default", func() (bool, string) {
		var sa corev1.ServiceAccount
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "default"}, &sa)
		return err == nil, fmt.Sprint(err)
	})
}

// requireInstancePolicies fails the case unless the NetworkPolicies <instance><suffix> exist: the
// cases whose Jobs and pods reach the database or the cache (9, 10, 11) prove it under the
// policies only if the policies are there (on by default; docs/e2e.md).
func requireInstancePolicies(t *testing.T, ns, instance string, suffixes ...string) {
	t.Helper()
	for _, s := range suffixes {
		var np networkingv1.NetworkPolicy
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: instance + s}, &np); err != nil {
			t.Errorf("NetworkPolicy %s/%s%s (this case runs under the instances' policies, on by default): %v", ns, instance, s, err)
		}
	}
}
