//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// The readiness case (issue 43, item 4: Ready means the beamline serves). Two beamlines in a
// namespace of their own: "rc" streams through an external cache the test runs (a redis-server pod
// behind a Service, its URI in a Secret), which the operator never looks at, so only the Tiled pods'
// readiness (ready.py) can report it; "rd" has its managed database and cache. The test stops rc's
// cache (deletes its pod) and takes rd's catalog tables away underneath the running Tiled (renames
// the nodes table, as an emptied database looks to Tiled: relation "nodes" does not exist). Each
// beamline must be reported not Ready (its Tiled pod not ready, the instance Ready=False) within
// readyDetect, with the pod's Unhealthy event naming the part that fails, and Ready again within
// readyRepair of the repair; the Tiled pods are neither replaced nor restarted (liveness stays on
// /healthz).
const (
	readyNS       = "e2e-ready"
	readyFacility = "e2e-ready"
	// readyExternalFacility labels the profile whose streaming cache is external.
	readyExternalFacility = "e2e-ready-external"
	readyCacheInstance    = "rc"
	readyDBInstance       = "rd"
	readyExtCache         = "ext-cache"
	// readyDetect bounds the time from the break to the instance's Ready=False: the probe's two
	// failures (render.ReadyPeriodSeconds apart, each up to its three 3 s steps) after up to one
	// period's wait, and the operator's reconcile on the pod's status change, with room for a
	// loaded node.
	readyDetect = time.Duration(render.ReadyPeriodSeconds*(render.ReadyFailureThreshold+1)+render.ReadyTimeoutSeconds)*time.Second + 30*time.Second
	// readyRepair bounds the time from the repair to Ready=True: one period, a reconcile, and (for the
	// cache) the new cache pod's start.
	readyRepair = 2 * time.Minute
)

// readyExternalProfileYAML is the namespace's profile with the managed cache replaced by the test's
// external one.
func readyExternalProfileYAML() string {
	p := profileYAMLIn(readyNS, "ready-external", readyExternalFacility, tiledImg())
	i := strings.Index(p, "  streaming:\n")
	if i < 0 {
		panic("profileYAMLIn has no streaming section")
	}
	return p[:i] + "  streaming:\n    external:\n      uriSecretRef: {name: " + readyExtCache + "}\n"
}

// readyInstanceYAML is a standalone TiledInstance of the namespace selecting facility's profile.
func readyInstanceYAML(name, facility string) string {
	return standaloneYAMLIn(readyNS, name, facility, "")
}

// readyExtCacheYAML is the external cache: a Secret with its password and the URI Tiled uses, a
// Service, and a restricted pod running redis-server on a configuration file written from the
// environment (the password on no command line).
func readyExtCacheYAML(password string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %[1]s, namespace: %[2]s}
stringData:
  password: %[3]s
  uri: redis://:%[3]s@%[1]s.%[2]s.svc:6379/0
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {e2e-ready: %[1]s}
  ports: [{name: redis, port: 6379, targetPort: 6379}]
`, readyExtCache, readyNS, password) + "---\n" + readyExtCachePodYAML()
}

func readyExtCachePodYAML() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {e2e-ready: %[1]s}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 999, runAsGroup: 999, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: redis
    image: %[3]s
    command: [/bin/sh, -c, 'umask 077; printf "requirepass \"%%s\"\nport 6379\nbind * -::*\nsave \"\"\nappendonly no\n" "$PASSWORD" > /tmp/redis.conf; exec redis-server /tmp/redis.conf']
    env: [{name: PASSWORD, valueFrom: {secretKeyRef: {name: %[1]s, key: password}}}]
    ports: [{containerPort: 6379}]
    readinessProbe: {tcpSocket: {port: 6379}, periodSeconds: 1}
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    volumeMounts: [{name: tmp, mountPath: /tmp}]
  volumes: [{name: tmp, emptyDir: {}}]
`, readyExtCache, readyNS, cacheImg)
}

// unhealthyNotes are the notes of the kubelet's Unhealthy events about a pod.
func unhealthyNotes(t *testing.T, ns, pod string) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := cl.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == "Pod" && ev.Regarding.Name == pod && ev.Reason == "Unhealthy" {
			out = append(out, ev.Note)
		}
	}
	return out
}

// readyState is one look at a beamline: its Ready condition and its one Tiled pod.
func readyState(t *testing.T, name string) (ti *v1alpha1.TiledInstance, pod *corev1.Pod, why string) {
	ti = getInstanceIn(t, readyNS, name)
	pods := serverPodsOf(t, readyNS, name)
	if len(pods) != 1 {
		return ti, nil, fmt.Sprintf("%d Tiled pods", len(pods))
	}
	return ti, &pods[0], fmt.Sprintf("pod ready %t; %s", podReady(&pods[0]), streamConditions(ti))
}

// breakAndRepair breaks one beamline, requires it reported not Ready within readyDetect with the
// pod's Unhealthy event containing named, repairs it and requires it Ready within readyRepair, its
// Tiled pod the same and not restarted.
func breakAndRepair(t *testing.T, name, named string, breakIt, repair func()) {
	t.Helper()
	_, before, _ := readyState(t, name)
	if before == nil || !podReady(before) {
		t.Fatalf("%s: no ready Tiled pod before the break", name)
	}
	restarts := int32(0)
	for _, cs := range before.Status.ContainerStatuses {
		restarts += cs.RestartCount
	}
	start := time.Now()
	breakIt()
	eventually(t, readyDetect, time.Second, name+" reported not Ready", func() (bool, string) {
		ti, pod, why := readyState(t, name)
		if pod == nil || podReady(pod) {
			return false, why
		}
		r := condition(ti, controllers.ConditionReady)
		return r != nil && r.Status == "False", why
	})
	detected := time.Since(start)
	var notes []string
	eventually(t, 30*time.Second, time.Second, "the Unhealthy event of "+before.Name+" naming "+named, func() (bool, string) {
		notes = unhealthyNotes(t, readyNS, before.Name)
		for _, n := range notes {
			if strings.Contains(n, named) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%q", notes)
	})
	ti, _, _ := readyState(t, name)
	t.Logf("%s: not Ready %.1f s after the break (Ready: %s); the pod's events: %q", name, detected.Seconds(),
		condition(ti, controllers.ConditionReady).Message, notes)

	start = time.Now()
	repair()
	eventually(t, readyRepair, time.Second, name+" Ready again", func() (bool, string) {
		ti, pod, why := readyState(t, name)
		return pod != nil && podReady(pod) && isTrue(ti, controllers.ConditionReady), why
	})
	t.Logf("%s: Ready again %.1f s after the repair", name, time.Since(start).Seconds())
	_, after, _ := readyState(t, name)
	n := int32(0)
	for _, cs := range after.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	if after.UID != before.UID || n != restarts {
		t.Errorf("%s: the Tiled pod was replaced or restarted (uid %s -> %s, restarts %d -> %d): liveness must not follow readiness",
			name, before.UID, after.UID, restarts, n)
	}
}

func testReadyMeansServing(t *testing.T) {
	caseNamespace(t, readyNS)
	const password = "e2eReadyExternalCache0123456789"
	mustKubectl(t, []byte(readyExtCacheYAML(password)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(profileYAMLIn(readyNS, "ready-managed", readyFacility, tiledImg())), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(readyExternalProfileYAML()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(readyInstanceYAML(readyCacheInstance, readyExternalFacility)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(readyInstanceYAML(readyDBInstance, readyFacility)), "apply", "--server-side", "-f", "-")
	eventually(t, 8*time.Minute, 2*time.Second, readyCacheInstance+" and "+readyDBInstance+" Ready", func() (bool, string) {
		for _, name := range []string{readyCacheInstance, readyDBInstance} {
			ti := instanceIfAny(t, readyNS, name)
			if ti == nil || !isTrue(ti, controllers.ConditionReady) {
				return false, name + " not Ready"
			}
		}
		return true, ""
	})
	if ti := getInstanceIn(t, readyNS, readyCacheInstance); condition(ti, controllers.ConditionStreamingCacheReady) != nil {
		t.Errorf("%s: an external cache has no StreamingCacheReady condition: %s", readyCacheInstance, streamConditions(ti))
	}

	// The external cache stopped: only the Tiled pod's readiness can tell.
	host := readyExtCache + "." + readyNS + ".svc:6379"
	breakAndRepair(t, readyCacheInstance, "streaming cache "+host,
		func() { mustKubectl(t, nil, "-n", readyNS, "delete", "pod", readyExtCache, "--wait=true") },
		func() { mustKubectl(t, []byte(readyExtCachePodYAML()), "apply", "--server-side", "-f", "-") })

	// The catalog's tables gone under a running database: the database is Ready, Tiled answers
	// /healthz, every request fails.
	n := names.For(readyNS, readyDBInstance)
	breakAndRepair(t, readyDBInstance, `relation "nodes" does not exist`,
		func() { psql(t, readyNS, n, render.CatalogDatabase, "ALTER TABLE nodes RENAME TO nodes_away") },
		func() { psql(t, readyNS, n, render.CatalogDatabase, "ALTER TABLE nodes_away RENAME TO nodes") })
	if ti := getInstanceIn(t, readyNS, readyDBInstance); !isTrue(ti, controllers.ConditionDatabaseReady) {
		t.Errorf("%s: DatabaseReady not True after the repair: %s", readyDBInstance, streamConditions(ti))
	}
}
