//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// metricsNS holds the scraper pod and its ServiceAccount, bound to the ClusterRole that
// config/default ships for Prometheus (tiled-operator-metrics-reader).
const metricsNS = "e2e-metrics"

// testObservability reads the first fleet as an admin on call would: `kubectl tiled status` for the
// cluster and one beamline (text and -o json), and the operator's /metrics as Prometheus scrapes it
// (HTTPS, a ServiceAccount token checked by TokenReview and SubjectAccessReview), from every manager
// pod: the leader reports the fleet, the standby only that it is not the leader.
func testObservability(t *testing.T) {
	// kubectl tiled status CLUSTER -o json: every beamline Ready, with its version and database. The
	// case before deleted amx's pods: the status may still catch up with their return.
	eventually(t, 2*time.Minute, 2*time.Second, "kubectl tiled status "+clusterName+": every instance Ready", func() (bool, string) {
		var doc statusDoc
		statusJSON(t, &doc, "-n", tenantNS, "status", "tiledcluster/"+clusterName, "-o", "json")
		return clusterStatusOK(doc)
	})

	// kubectl tiled status INSTANCE -o json: its pods, all Ready, none restarted (bmm: the case
	// before restarted amx's).
	bmm := instanceName("bmm")
	var one statusDoc
	statusJSON(t, &one, "-n", tenantNS, "status", "tiledinstance/"+bmm, "-o", "json")
	if len(one.Pods) != podsPerBeamline {
		t.Errorf("kubectl tiled status %s lists %d pods, want %d: %+v", bmm, len(one.Pods), podsPerBeamline, one.Pods)
	}
	for _, p := range one.Pods {
		if p.Restarts != 0 || p.Status != string(corev1.PodRunning) {
			t.Errorf("kubectl tiled status %s: pod %s %s with %d restarts", bmm, p.Name, p.Status, p.Restarts)
		}
	}

	// The text screen names every beamline and its pods.
	out, err := kubectlTiled(t, "-n", tenantNS, "status", clusterName)
	if err != nil {
		t.Fatalf("kubectl tiled status %s: %v\n%s", clusterName, err, out)
	}
	for _, b := range beamlines {
		if !strings.Contains(out, instanceName(b)) {
			t.Errorf("kubectl tiled status %s does not name %s:\n%s", clusterName, instanceName(b), out)
		}
	}
	t.Logf("kubectl tiled status %s:\n%s", clusterName, out)

	// The leader's fleet series follow the statuses above; scraped again until they agree (each
	// scrape is a new pod, as a Prometheus scrape is a new request).
	defer func() {
		_, _ = kubectl(nil, "delete", "namespace", metricsNS, "--wait=false")
		_, _ = kubectl(nil, "delete", "clusterrolebinding", "e2e-metrics-scraper", "--ignore-not-found")
	}()
	var problems []string
	for attempt := 0; attempt < 6; attempt++ {
		if problems = checkScrapes(scrapeManagers(t)); len(problems) == 0 {
			return
		}
		time.Sleep(5 * time.Second)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// clusterStatusOK says whether a `kubectl tiled status CLUSTER -o json` document shows the cluster
// and every beamline Ready, each with its Tiled version and its database ready.
func clusterStatusOK(doc statusDoc) (bool, string) {
	if doc.Cluster == nil {
		return false, "no cluster in the document"
	}
	if doc.Cluster.Instances != int32(len(beamlines)) || doc.Cluster.ReadyInstances != int32(len(beamlines)) || doc.Cluster.Ready != "True" {
		return false, fmt.Sprintf("%d instances, %d ready, Ready=%s; want %d, %d, True",
			doc.Cluster.Instances, doc.Cluster.ReadyInstances, doc.Cluster.Ready, len(beamlines), len(beamlines))
	}
	seen := map[string]bool{}
	for _, in := range doc.Instances {
		seen[in.Name] = true
		if in.Ready != "True" || in.Version == "" || in.Database == nil || !in.Database.Ready {
			return false, fmt.Sprintf("instance %s: Ready=%s version=%q database=%+v", in.Name, in.Ready, in.Version, in.Database)
		}
	}
	for _, b := range beamlines {
		if !seen[instanceName(b)] {
			return false, fmt.Sprintf("no instance %s listed: %v", instanceName(b), sortedKeys(seen))
		}
	}
	return true, ""
}

// checkScrapes returns what is wrong with the managers' tiled_operator_ series: exactly one leader,
// which reports every beamline ready and the cluster's ready count; a standby reporting no fleet.
func checkScrapes(scrapes map[string]string) []string {
	var problems []string
	leaders := 0
	for pod, text := range scrapes {
		switch {
		case strings.Contains(text, "\ntiled_operator_leader 1"):
			leaders++
			for _, b := range beamlines {
				want := fmt.Sprintf(`tiled_operator_instance_ready{instance=%q,namespace=%q,tiled_cluster=%q} 1`, instanceName(b), tenantNS, clusterName)
				if !strings.Contains(text, want) {
					problems = append(problems, fmt.Sprintf("the leader %s does not report %s", pod, want))
				}
			}
			want := fmt.Sprintf(`tiled_operator_cluster_instances{namespace=%q,state="ready",tiled_cluster=%q} %d`, tenantNS, clusterName, len(beamlines))
			if !strings.Contains(text, want) {
				problems = append(problems, fmt.Sprintf("the leader %s does not report %s", pod, want))
			}
		case strings.Contains(text, "\ntiled_operator_leader 0"):
			if strings.Contains(text, "tiled_operator_instance_ready{") {
				problems = append(problems, fmt.Sprintf("the standby %s reports the fleet", pod))
			}
		default:
			problems = append(problems, fmt.Sprintf("manager pod %s reports no tiled_operator_leader", pod))
		}
	}
	if leaders != 1 {
		problems = append(problems, fmt.Sprintf("%d manager pods report tiled_operator_leader 1, want 1", leaders))
	}
	return problems
}

// statusDoc is the part of `kubectl tiled status -o json` the case reads; the plugin's own type
// lives in package main.
type statusDoc struct {
	Cluster *struct {
		Ready          string `json:"ready"`
		Instances      int32  `json:"instances"`
		ReadyInstances int32  `json:"readyInstances"`
	} `json:"cluster"`
	Instances []struct {
		Name     string `json:"name"`
		Ready    string `json:"ready"`
		Version  string `json:"version"`
		Database *struct {
			Ready bool `json:"ready"`
		} `json:"database"`
	} `json:"instances"`
	Pods []struct {
		Name     string `json:"name"`
		Status   string `json:"status"`
		Restarts int32  `json:"restarts"`
	} `json:"pods"`
}

// statusJSON runs `kubectl tiled ARGS` and decodes its standard output (stderr apart) into v.
func statusJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	bin := filepath.Join(e.repo, "bin")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"tiled"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "PATH="+bin+":"+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl tiled %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("kubectl tiled %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

const scrapeScript = `
import ssl, sys, urllib.request
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
for ip in sys.argv[1:]:
    req = urllib.request.Request("https://%s:8443/metrics" % ip, headers={"Authorization": "Bearer " + token})
    body = urllib.request.urlopen(req, context=ctx, timeout=20).read().decode()
    for line in body.splitlines():
        if line.startswith("tiled_operator_"):
            print("E2E-METRIC", ip, line)
print("E2E-OK")
`

// scrapeManagers fetches /metrics from every manager pod as Prometheus would, from a pod whose
// ServiceAccount is bound to tiled-operator-metrics-reader, and returns the tiled_operator_ lines
// of each pod (each line after a newline).
func scrapeManagers(t *testing.T) map[string]string {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(operatorNS), client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	var ips []string
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		byIP[p.Status.PodIP] = p.Name
		ips = append(ips, p.Status.PodIP)
	}
	if len(byIP) < 2 {
		t.Fatalf("%d manager pods with an IP, want 2 (leader and standby)", len(byIP))
	}
	// Labelled for the manager pods' NetworkPolicy, which admits their metrics port only from
	// namespaces so labelled.
	mustKubectl(t, []byte(namespaceYAML(metricsNS, metricsNamespaceLabel)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-metrics-scraper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tiled-operator-metrics-reader}
subjects:
- {kind: ServiceAccount, name: scraper, namespace: %[1]s}
`, metricsNS)), "apply", "--server-side", "-f", "-")
	logs := runPythonPod(t, pythonPod{name: "scraper", namespace: metricsNS, image: tiledImg(),
		script: scrapeScript, args: ips, specExtra: "  serviceAccountName: scraper\n"}, clientPodTimeout)
	line := regexp.MustCompile(`^E2E-METRIC (\S+) (.*)$`)
	out := map[string]string{}
	for _, l := range strings.Split(logs, "\n") {
		if m := line.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			out[byIP[m[1]]] += "\n" + m[2]
		}
	}
	for ip, pod := range byIP {
		if out[pod] == "" {
			t.Errorf("no tiled_operator_ metric scraped from %s (%s)", pod, ip)
		}
	}
	return out
}
