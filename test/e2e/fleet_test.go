//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bluesky/tiled-operator/expansion"
)

const (
	operatorNS   = "tiled-operator-system"
	operatorDep  = "tiled-operator-controller-manager"
	operatorUser = "system:serviceaccount:" + operatorNS + ":tiled-operator-controller-manager"
	leaseName    = "tiled-operator.tiled.blueskyproject.io"
	tenantNS     = "beamlines"
	floorNS      = "floor"
	clusterName  = "e2e"
	storageClass = "local-hostpath"
	postgresImg  = "docker.io/local/postgres:15"
	cacheImg     = "docker.io/local/redis:7.0"
	// podsPerBeamline: Tiled, PostgreSQL and the streaming cache.
	podsPerBeamline = 3
	pauseImg        = "docker.io/local/pause:3.10"
	rolloutVar      = "E2E_ROLL"
)

// beamlines of the sample fleet: one plain, one with an override, one with a read-only detector
// mount on a hostPath-backed PersistentVolume (the NFS-style mount of a real facility).
var beamlines = []string{"amx", "bmm", "chx"}

func tiledImg() string { return "docker.io/local/tiled:" + expansion.TiledVersion }

func instanceName(b string) string { return clusterName + "-" + b }

// namespaceYAML is a tenant namespace that enforces the restricted Pod Security Standard, with the
// labels given as "key: value" besides.
func namespaceYAML(name string, labels ...string) string {
	var extra strings.Builder
	for _, l := range labels {
		extra.WriteString("    " + l + "\n")
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
%s`, name, extra.String())
}

// metricsNamespaceLabel is the label config/default's NetworkPolicy of the manager pods asks of a
// namespace whose pods scrape the manager's metrics port (kubebuilder's convention): cases 13 and 14
// put it on their scrapers' namespaces.
const metricsNamespaceLabel = "metrics: enabled"

// detectorYAML is the read-only detector data: a static PV on a hostPath folder the suite fills,
// and the claim the chx beamline mounts.
func detectorYAML(hostPath, ns, pv string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: %s
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: %s, name: detector-data}
  hostPath: {path: %s, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: detector-data
  namespace: %s
spec:
  accessModes: [ReadOnlyMany]
  storageClassName: ""
  volumeName: %s
  resources: {requests: {storage: 1Gi}}
`, pv, ns, hostPath, ns, pv)
}

// profileYAML is the facility profile of the suite: local images, small requests (two shared
// cores), hostPath storage, a managed PostgreSQL and a single-user API key. roll is the value of an
// environment variable that changes every instance's pod template.
func profileYAML(roll string) string {
	return fmt.Sprintf(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata:
  name: e2e-defaults
  namespace: %s
  labels: {facility: e2e}
spec:
  priority: 0
  tiled:
    image: %s
    imagePullPolicy: IfNotPresent
    # Small CPU requests: the cases' pods share the node's two cores, and what the requests add up
    # to decides what can be scheduled, not what runs (with 50m, bad input's pods stayed Pending,
    # "Insufficient cpu", beside the long cases in two rehearsals).
    resources:
      requests: {cpu: 10m, memory: 256Mi}
      limits: {memory: 1Gi}
    env:
    - {name: %s, value: %q}
  storage:
    data: {storageClassName: %s, size: 1Gi, accessModes: [ReadWriteOnce]}
    retention: Retain
  database:
    managed:
      image: %s
      storageClassName: %s
      size: 1Gi
      resources:
        requests: {cpu: 10m, memory: 64Mi}
        limits: {memory: 512Mi}
  auth:
    singleUserAPIKey: {}
  streaming:
    managed:
      image: %s
      resources:
        requests: {cpu: 10m, memory: 16Mi}
        limits: {memory: 128Mi}
  # Tiled's metrics through the sidecar, with a token of their own (case 14 scrapes them).
  monitoring:
    serviceMonitor: true
  # The instances' NetworkPolicies (on by default; case 15 tests them): the metrics sidecar admits
  # case 14's Prometheus namespace, and so does Tiled's port (tiledFrom), for case 14's traffic pod.
  # ingressControllerNamespace stays the built-in ingress-nginx, which case 15 relies on.
  networkPolicy:
    metricsNamespace: %s
    tiledFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
`, tenantNS, tiledImg(), rolloutVar, roll, storageClass, postgresImg, storageClass, cacheImg, promNS, promNS)
}

// clusterYAML is the terse TiledCluster: one line per beamline, one override, one detector mount.
// paused and the beamlines present are parameters for the rollout and re-add cases.
func clusterYAML(paused bool, present []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata:
  name: %s
  namespace: %s
spec:
  profileSelector: {matchLabels: {facility: e2e}}
  paused: %t
  rollout: {maxUnavailable: 1}
  instances:
`, clusterName, tenantNS, paused)
	for _, n := range present {
		switch n {
		case "bmm":
			b.WriteString("  - {name: bmm, overrides: {tiled: {env: [{name: E2E_OVERRIDE, value: bmm}]}}}\n")
		case "chx":
			b.WriteString("  - {name: chx, overrides: {storage: {readOnlyMounts: [{name: detector, mountPath: /data/detector, existingClaimName: detector-data}]}}}\n")
		default:
			fmt.Fprintf(&b, "  - {name: %s}\n", n)
		}
	}
	return b.String()
}

// standaloneYAML is a terse standalone TiledInstance: the mutating webhook expands it from the
// profiles it selects. extra is indented YAML appended under spec.
func standaloneYAML(name, extra string) string {
	return standaloneYAMLIn(tenantNS, name, "e2e", extra)
}

// standaloneYAMLIn is a terse standalone TiledInstance of namespace ns selecting the profiles of
// facility; extra is indented YAML appended under spec.
func standaloneYAMLIn(ns, name, facility, extra string) string {
	return fmt.Sprintf(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledInstance
metadata:
  name: %s
  namespace: %s
spec:
  profileSelector: {matchLabels: {facility: %s}}
%s`, name, ns, facility, extra)
}

// clientPodYAML runs the Tiled Python client in the cluster against an instance's Service DNS name
// with the API key from the operator's Secret. mode "write" writes an array and a table and reads
// them back; "read" only reads them back.
func clientPodYAML(name, url, secret, mode string) string {
	script := `
import os, sys
import numpy, pandas
from tiled.client import from_uri
c = from_uri(os.environ["TILED_URL"], api_key=os.environ["TILED_API_KEY"])
if sys.argv[1] == "write":
    c.write_array(numpy.arange(10), key="e2e_array")
    c.write_dataframe(pandas.DataFrame({"x": [1, 2, 3]}), key="e2e_table")
a = c["e2e_array"].read()
assert list(a) == list(range(10)), a
t = c["e2e_table"].read()
assert list(t["x"]) == [1, 2, 3], t
print("E2E-OK", sorted(c))
`
	return pythonClientPodYAML(name, tenantNS, tiledImg(), script, url, secret, mode)
}

// pythonClientPodYAML is a restricted pod in namespace that runs script with the Tiled Python client
// of image, against url with the instance's API key (from its Secret), the args after the script.
func pythonClientPodYAML(name, namespace, image, script, url, secret string, args ...string) string {
	return pythonPodYAML(pythonPod{name: name, namespace: namespace, image: image, script: script, args: args,
		env: fmt.Sprintf(`    env:
    - {name: TILED_URL, value: %q}
    - {name: HOME, value: /tmp}
    - name: TILED_API_KEY
      valueFrom: {secretKeyRef: {name: %s, key: TILED_SINGLE_USER_API_KEY}}
`, url, secret)})
}

// pythonPod is a restricted pod (the restricted Pod Security Standard) whose one container runs a
// Python script with python -c, the args after it.
type pythonPod struct {
	name, namespace, image, script string
	args                           []string
	// specExtra is YAML added under spec (e.g. serviceAccountName), indented two spaces.
	specExtra string
	// env is the container's env block, indented four spaces; empty: none.
	env string
	// labels are more labels of the pod, flow YAML ("app: x"), for a Service to select it.
	labels string
}

// pythonPodYAML is the pod p as YAML: an init container that waits until the node's NetworkPolicy
// implementation holds the pod's address (netpolsettle_test.go), then the script.
func pythonPodYAML(p pythonPod) string {
	var ind strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(p.script), "\n") {
		ind.WriteString("      " + l + "\n")
	}
	var argv strings.Builder
	for _, a := range p.args {
		fmt.Fprintf(&argv, "    - %q\n", a)
	}
	labels := ""
	if p.labels != "" {
		labels = ", " + p.labels
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {%[9]s: "true"%[10]s}
spec:
  restartPolicy: Never
%[3]s  securityContext:
    runAsNonRoot: true
    runAsUser: 999
    runAsGroup: 999
    seccompProfile: {type: RuntimeDefault}
%[8]s  containers:
  - name: client
    image: %[4]s
    imagePullPolicy: IfNotPresent
    command: [python, -c]
    args:
    - |
%[5]s%[6]s%[7]s    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
`, p.name, p.namespace, p.specExtra, p.image, ind.String(), argv.String(), p.env, settleInitContainerYAML(p.image), settleLabel, labels)
}

// runPythonPod runs the pod p (replacing one of its name) to its end within timeout and returns its
// log; the pod must succeed and print E2E-OK.
func runPythonPod(t *testing.T, p pythonPod, timeout time.Duration) string {
	t.Helper()
	startPythonPod(t, p)
	return waitPythonPod(t, p, timeout)
}

// startPythonPod creates the pod p, replacing one of its name, and returns without waiting: pods
// started together run at once.
func startPythonPod(t *testing.T, p pythonPod) {
	t.Helper()
	_, _ = kubectl(nil, "-n", p.namespace, "delete", "pod", p.name, "--ignore-not-found", "--wait=true")
	mustKubectl(t, []byte(pythonPodYAML(p)), "apply", "--server-side", "-f", "-")
}

// waitPythonPod waits within timeout for the pod p, started already, to end, and returns its log;
// the pod must succeed and print E2E-OK.
func waitPythonPod(t *testing.T, p pythonPod, timeout time.Duration) string {
	t.Helper()
	var phase corev1.PodPhase
	eventually(t, timeout, time.Second, "pod "+p.namespace+"/"+p.name+" finished", func() (bool, string) {
		var pod corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: p.namespace, Name: p.name}, &pod); err != nil {
			return false, err.Error()
		}
		phase = pod.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
	})
	logs, _ := kubectl(nil, "-n", p.namespace, "logs", p.name)
	if phase != corev1.PodSucceeded || !strings.Contains(logs, "E2E-OK") {
		t.Fatalf("pod %s/%s: phase %s\n%s", p.namespace, p.name, phase, logs)
	}
	return logs
}
