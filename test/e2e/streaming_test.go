//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

const (
	streamNS = "e2e-stream"
	// streamFacility labels the profile of the streaming instance, streamOffFacility the profile
	// that switches streaming off.
	streamFacility    = "e2e-stream"
	streamOffFacility = "e2e-stream-off"
	// streamInstance has two Tiled replicas on a ReadWriteMany data claim and the managed cache;
	// streamOffInstance is born on the profile with streaming off.
	streamInstance    = "st"
	streamOffInstance = "st-off"
	// streamUpdates is how many array writes the latency run times through each path, one at a time.
	streamUpdates = 200
	// streamCheckUpdates is how many array rows and table appends each `stream.py check` streams.
	streamCheckUpdates = 30
	// streamGoal is the goal for the latency across replicas over the latency on one replica (p50).
	streamGoal = 1.2
	// streamGapLimit bounds how long any update written while the subscriber's Tiled pod is replaced
	// may take to reach it.
	streamGapLimit = 60 * time.Second
	// cachePause is how long the cache is made unresponsive (redis-cli CLIENT PAUSE ... ALL): long
	// enough for its readiness probe (every 2 s, 3 s timeout, 2 failures) to fail, shorter than its
	// liveness probe's three failures 20 s apart and than the operator's probe grace (60 s), after
	// which the condition would name the failing probe instead of the outage.
	cachePause = 25 * time.Second
	// streamSignal is the file the test creates in a subscriber pod to tell it to go on.
	streamSignal = "/tmp/e2e-go"
)

// streamProfileYAML is upgradeProfileYAML's shape (managed cache on cacheImg) in the streaming
// namespace; off switches streaming off in the profile.
func streamProfileYAML(name, facility string, off bool) string {
	p := strings.Replace(upgradeProfileYAML(name, facility, tiledImg()), "namespace: "+upgradeNS, "namespace: "+streamNS, 1)
	if off {
		p = strings.Replace(p, "  streaming:\n    managed:\n", "  streaming:\n    enabled: false\n    managed:\n", 1)
	}
	return p
}

// streamInstanceYAML is a standalone TiledInstance of the streaming namespace selecting the profile
// of facility; extra is indented YAML appended under spec.
func streamInstanceYAML(name, facility, extra string) string {
	return standaloneYAMLIn(streamNS, name, facility, extra)
}

// twoReplicas is the streaming instance's spec: two Tiled pods, which need a data claim every node
// can mount (the engine refuses two replicas on ReadWriteOnce).
const twoReplicas = "  tiled: {replicas: 2}\n  storage: {data: {accessModes: [ReadWriteMany]}}\n"

// podURL is Tiled replica i of the instance, addressed through its headless Service: the pod itself,
// not the Service that balances between them.
func podURL(n names.Objects, i int) string {
	return fmt.Sprintf("http://%s-%d.%s.%s.svc:8000", n.Tiled, i, n.HeadlessService, streamNS)
}

// streamSubscriberScript keeps one subscription (Tiled's own client) through READER_URL to an array
// it writes through WRITER_URL while the test breaks something, and checks that every row written
// after the subscription was up arrives once, in order, with consecutive sequence numbers.
//
//	READER_URL WRITER_URL MODE AFTER INTERVAL WAIT SIGNAL
//
// It subscribes, writes row 0 until the subscriber receives it (Tiled subscribes to the cache only
// after the websocket handshake) and prints E2E-SUBSCRIBED; then, until the file SIGNAL exists, MODE
// "survive" writes a row every INTERVAL seconds and "outage" writes nothing; then it writes AFTER more
// rows and waits (WAIT seconds at most) for the last. It prints E2E-RESULT with what arrived, how late
// (from the start of each write to the callback) and the start= of each websocket connection the
// subscription made (Tiled's client reconnects by itself and resumes from its last sequence number).
// The client's reconnect back-off is capped at 10 s instead of Tiled's 45 s, so that the gap after a
// replica is replaced measures the replacement, not the client's sleep.
const streamSubscriberScript = `
import json, os, sys, threading, time, uuid
os.environ.setdefault("TILED_RETRY_TIMEOUT", "10")
import numpy
from tiled.client import from_uri

reader_url, writer_url, mode = sys.argv[1], sys.argv[2], sys.argv[3]
after, interval, wait = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
signal_file = sys.argv[7]
api_key = os.environ["TILED_API_KEY"]
WIDTH = 4


def done(code, tag, **fields):
    print(tag, json.dumps(fields, sort_keys=True), flush=True)
    if code == 0:
        print("E2E-OK", flush=True)
    os._exit(code)


writer, reader = from_uri(writer_url, api_key=api_key), from_uri(reader_url, api_key=api_key)
key = "e2e-%s-%s" % (mode, uuid.uuid4().hex[:10])
writer.write_array(numpy.zeros((1, WIDTH)), key=key)
wnode = writer[key]

cond = threading.Condition()
got = []  # (sequence, row, value, arrived)


def on_update(update):
    arrived = time.monotonic()
    row = update.offset[0] if update.offset else 0
    value = float(update.data().ravel()[0])
    with cond:
        got.append((update.sequence, row, value, arrived))
        cond.notify_all()


def wait_for(pred, timeout):
    with cond:
        return cond.wait_for(lambda: pred(got), timeout)


sub = reader[key].subscribe()
sub.new_data.add_callback(on_update)
starts = []
connect = sub._connect


def counted_connect(start=None, max_size=1_000_000):
    connect(start, max_size=max_size)
    starts.append(start)


sub._connect = counted_connect
starter = threading.Thread(target=sub.start_in_thread, daemon=True)
starter.start()
starter.join(wait)
if starter.is_alive():
    done(1, "E2E-FAIL", why="the subscription through %s did not connect within %ss" % (reader_url, wait))

n, deadline = 0, time.monotonic() + wait
while True:
    n += 1
    wnode.patch(numpy.full((1, WIDTH), -float(n)), offset=(0,))
    if wait_for(lambda g: any(r == 0 and v == -n for _, r, v, _ in g), 1.0):
        break
    if time.monotonic() > deadline:
        done(1, "E2E-FAIL", why="none of %d warm-up writes reached the subscriber" % n)
base = next(s for s, r, v, _ in got if r == 0 and v == -n)
counted_from = len(got)
print("E2E-SUBSCRIBED", json.dumps({"key": key, "seq": base}), flush=True)

sent = {}


def write(row):
    sent[row] = time.monotonic()
    try:
        wnode.patch(numpy.full((1, WIDTH), float(row)), offset=(row,), extend=True)
    except Exception as err:
        done(1, "E2E-FAIL", why="write of row %d through %s: %s" % (row, writer_url, err))


row, during = 0, 0
signal_deadline = time.monotonic() + 900
while not os.path.exists(signal_file):
    if time.monotonic() > signal_deadline:
        done(1, "E2E-FAIL", why="no signal within 900 s")
    if mode == "survive":
        row += 1
        during += 1
        write(row)
    time.sleep(interval)
for _ in range(after):
    row += 1
    write(row)
    time.sleep(interval)
complete = wait_for(lambda g: any(r == row for _, r, _, _ in g[counted_from:]), wait)
with cond:
    counted = list(got[counted_from:])
rows = [r for _, r, _, _ in counted]
seqs = [s for s, _, _, _ in counted]
delays = sorted(t - sent[r] for _, r, _, t in counted if r in sent)
result = {
    "key": key, "written": row, "written_during": during, "received": len(counted),
    "connections": len(starts), "starts": starts, "first_seq": base + 1,
    "max_delay_s": round(delays[-1], 3) if delays else None,
    "p50_delay_s": round(delays[len(delays) // 2], 3) if delays else None,
}
if not complete or rows != list(range(1, row + 1)):
    done(1, "E2E-FAIL", why="rows arrived as %s, want 1..%d once each, in order" % (rows, row), **result)
if any(v != float(r) for _, r, v, _ in counted):
    done(1, "E2E-FAIL", why="payloads differ from what was written", **result)
if seqs != list(range(base + 1, base + 1 + len(seqs))):
    done(1, "E2E-FAIL", why="sequence numbers %s, want consecutive from %d" % (seqs, base + 1), **result)
done(0, "E2E-RESULT", **result)
`

// subscriberResult is the E2E-RESULT line of streamSubscriberScript.
type subscriberResult struct {
	Key           string  `json:"key"`
	Written       int     `json:"written"`
	WrittenDuring int     `json:"written_during"`
	Received      int     `json:"received"`
	Connections   int     `json:"connections"`
	Starts        []*int  `json:"starts"`
	FirstSeq      int     `json:"first_seq"`
	MaxDelay      float64 `json:"max_delay_s"`
	P50Delay      float64 `json:"p50_delay_s"`
}

// streamLatency is what `stream.py latency` prints, and `stream.py latency-pair` for each writer.
type streamLatency struct {
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Write float64 `json:"write_p50_ms"`
}

// streamProbe is what `stream.py probe` prints.
type streamProbe struct {
	Subscribe      string `json:"subscribe"`
	SubscribeError string `json:"subscribe_error"`
	Write          string `json:"write"`
	WriteError     string `json:"write_error"`
	Received       *bool  `json:"received"`
}

// streamPy is hack/tiled/stream.py, read from the checkout the suite runs from; the client pods run
// it with `python -c` (they have only what the Tiled image holds).
func streamPy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.repo, "hack/tiled/stream.py"))
	if err != nil {
		t.Fatalf("the streaming client: %v", err)
	}
	return string(b)
}

// startStreamPod (re)creates the client pod name running script with args against url with the
// instance's API key from its Secret.
func startStreamPod(t *testing.T, name, script, url, secret string, args ...string) {
	t.Helper()
	_, _ = kubectl(nil, "-n", streamNS, "delete", "pod", name, "--ignore-not-found", "--wait=true")
	mustKubectl(t, []byte(pythonClientPodYAML(name, streamNS, tiledImg(), script, url, secret, args...)), "apply", "--server-side", "-f", "-")
}

// streamPodPhase is the client pod's phase ("" when it cannot be read).
func streamPodPhase(name string) corev1.PodPhase {
	var p corev1.Pod
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: name}, &p); err != nil {
		return ""
	}
	return p.Status.Phase
}

// finishStreamPod waits for the client pod to end and returns its log; it fails unless the pod
// succeeded, and, when needOK, printed E2E-OK (stream.py prints none: its exit status says). The pod
// is deleted when it succeeded and kept otherwise.
func finishStreamPod(t *testing.T, name string, timeout time.Duration, needOK bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	phase := streamPodPhase(name)
	for phase != corev1.PodSucceeded && phase != corev1.PodFailed {
		if time.Now().After(deadline) {
			logs, _ := kubectl(nil, "-n", streamNS, "logs", name)
			t.Fatalf("client pod %s did not end within %s (phase %q):\n%s", name, timeout, phase, logs)
		}
		time.Sleep(time.Second)
		phase = streamPodPhase(name)
	}
	logs, _ := kubectl(nil, "-n", streamNS, "logs", name)
	if phase != corev1.PodSucceeded || (needOK && !strings.Contains(logs, "E2E-OK")) {
		t.Fatalf("client pod %s: phase %s\n%s", name, phase, logs)
	}
	_, _ = kubectl(nil, "-n", streamNS, "delete", "pod", name, "--wait=false")
	return logs
}

// waitSubscribed waits until the subscriber pod says its subscription is up.
func waitSubscribed(t *testing.T, name string) {
	t.Helper()
	eventually(t, 3*time.Minute, 500*time.Millisecond, name+" subscribed", func() (bool, string) {
		logs, _ := kubectl(nil, "-n", streamNS, "logs", name)
		if strings.Contains(logs, "E2E-SUBSCRIBED") {
			return true, ""
		}
		if ph := streamPodPhase(name); ph == corev1.PodSucceeded || ph == corev1.PodFailed {
			t.Fatalf("subscriber %s ended (%s) before its subscription was up:\n%s", name, ph, logs)
		}
		return false, logs
	})
}

// signalStreamPod tells the subscriber pod to go on.
func signalStreamPod(t *testing.T, name string) {
	t.Helper()
	mustKubectl(t, nil, "-n", streamNS, "exec", name, "-c", "client", "--", "python", "-c", fmt.Sprintf("open(%q, 'w').close()", streamSignal))
}

// lastJSON decodes the last line of logs that is a JSON object (after prefix, when given).
func lastJSON(t *testing.T, logs, prefix string, v any) {
	t.Helper()
	lines := strings.Split(logs, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if prefix != "" {
			var ok bool
			if l, ok = strings.CutPrefix(l, prefix); !ok {
				continue
			}
			l = strings.TrimSpace(l)
		}
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), v) == nil {
			return
		}
	}
	t.Fatalf("no %sJSON line in:\n%s", prefix, logs)
}

// streamConditions is the instance's conditions on one line, for messages.
func streamConditions(ti *v1alpha1.TiledInstance) string {
	var b strings.Builder
	for _, c := range ti.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s/%s (gen %d): %s; ", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message)
	}
	return b.String()
}

// tiledPodState is the Tiled pods' UIDs and their containers' restarts, to tell that an outage of
// the cache neither replaced nor restarted them.
func tiledPodState(t *testing.T, instance string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range serverPodsOf(t, streamNS, instance) {
		var restarts int32
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			restarts += cs.RestartCount
		}
		out[p.Name] = fmt.Sprintf("uid %s, %d restarts", p.UID, restarts)
	}
	return out
}

func testStreaming(t *testing.T) {
	caseNamespace(t, streamNS)
	script := streamPy(t)
	mustKubectl(t, []byte(streamProfileYAML("stream-defaults", streamFacility, false)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(streamProfileYAML("stream-off", streamOffFacility, true)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(streamInstanceYAML(streamInstance, streamFacility, twoReplicas)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(streamInstanceYAML(streamOffInstance, streamOffFacility, "")), "apply", "--server-side", "-f", "-")

	// 1. Two Tiled replicas and the cache: Ready, StreamingCacheReady.
	n := names.For(streamNS, streamInstance)
	eventually(t, 8*time.Minute, 2*time.Second, streamInstance+" and "+streamOffInstance+" Ready", func() (bool, string) {
		for _, name := range []string{streamInstance, streamOffInstance} {
			ti := instanceIfAny(t, streamNS, name)
			if ti == nil || !isTrue(ti, controllers.ConditionReady) {
				return false, name + " not Ready"
			}
		}
		return true, ""
	})
	ti := getInstanceIn(t, streamNS, streamInstance)
	if !isTrue(ti, controllers.ConditionStreamingCacheReady) {
		t.Fatalf("%s is Ready but not StreamingCacheReady: %s", streamInstance, streamConditions(ti))
	}
	if c := condition(ti, controllers.ConditionStreamingCacheReady); !strings.Contains(c.Message, n.Cache+"-0") {
		t.Errorf("%s: StreamingCacheReady does not name the cache pod %s-0: %s", streamInstance, n.Cache, c.Message)
	}
	if got := readyOn(t, streamNS, streamInstance, tiledImg()); got != 2 {
		t.Fatalf("%s: %d Ready Tiled pods, want 2", streamInstance, got)
	}
	// The instance's NetworkPolicies are on (the default): both replicas reach the cache below
	// under <instance>-cache, which admits the instance's Tiled pods only.
	requireInstancePolicies(t, streamNS, streamInstance, "", "-postgres", "-cache")
	checkCacheObjects(t, n)
	secret := fleet.NamesOf(ti).Secret

	// 7a. Streaming off in the profile: no cache, no condition about it, subscriptions refused.
	off := getInstanceIn(t, streamNS, streamOffInstance)
	checkNoCache(t, off)
	streamRefused(t, script, off, []string{off.Status.URL})
	mustKubectl(t, nil, "-n", streamNS, "delete", "tiledinstance", streamOffInstance, "--wait=false")

	// 2. Every array row and table append written through one replica reaches a subscriber through
	// the other, in order; and the same on one replica.
	w1, r0 := podURL(n, 1), podURL(n, 0)
	updates := fmt.Sprint(streamCheckUpdates)
	startStreamPod(t, "check-cross", script, r0, secret, "--timeout", "30", "check", w1, r0, "--updates", updates)
	startStreamPod(t, "check-single", script, r0, secret, "--timeout", "30", "check", r0, r0, "--updates", updates)
	for _, p := range []string{"check-cross", "check-single"} {
		logs := finishStreamPod(t, p, 4*time.Minute, false)
		var r struct {
			OK    bool `json:"ok"`
			Array struct {
				Received int `json:"received"`
			} `json:"array"`
			Table struct {
				Received int `json:"received"`
			} `json:"table"`
		}
		lastJSON(t, logs, "", &r)
		if !r.OK || r.Array.Received != streamCheckUpdates || r.Table.Received != streamCheckUpdates {
			t.Errorf("%s: stream.py check: %s", p, logs)
		}
		t.Logf("%s: %s", p, strings.TrimSpace(logs))
	}

	// 3. Latency: across replicas (writer on 1, subscriber on 0) and on one replica (both on 0),
	// measured interleaved in one client pod: the writes alternate between replica 1 and replica 0
	// into one array that one subscriber on 0 receives, so both paths are timed under the same
	// load, write for write. (Runs one after another, as this case first did, differed by more
	// than the two paths do: the ratio ranged 0.72-1.34 over eight suite runs on this machine.)
	pod := "latency-pair"
	startStreamPod(t, pod, script, r0, secret, "--timeout", "30", "latency-pair", w1, r0, r0, "--updates", fmt.Sprint(streamUpdates))
	var pair struct {
		A streamLatency `json:"a"`
		B streamLatency `json:"b"`
	}
	lastJSON(t, finishStreamPod(t, pod, 5*time.Minute, false), "", &pair)
	cross, single := pair.A, pair.B
	t.Logf("latency across replicas: %+v; on one replica: %+v", cross, single)
	if cross.N != streamUpdates || single.N != streamUpdates {
		t.Fatalf("latency: %d and %d of %d updates timed", cross.N, single.N, streamUpdates)
	}
	ratio := cross.P50 / single.P50
	figMu.Lock()
	fig.StreamCrossReplicaP50, fig.StreamCrossReplicaP99 = cross.P50, cross.P99
	fig.StreamSingleReplicaP50, fig.StreamSingleReplicaP99 = single.P50, single.P99
	fig.StreamRatio, fig.StreamUpdates = ratio, streamUpdates
	figMu.Unlock()
	verdict := "goal <= 1.2 met"
	if ratio > streamGoal {
		verdict = "goal <= 1.2 missed"
	}
	t.Logf("streaming latency over %d writes: across replicas p50 %.1f ms, p99 %.1f ms; one replica p50 %.1f ms, p99 %.1f ms; ratio (p50) %.2f, %s",
		streamUpdates, cross.P50, cross.P99, single.P50, single.P99, ratio, verdict)

	// 4. The subscriber's Tiled pod deleted under it, each replica in turn: every update written
	// during and after arrives, in order, within streamGapLimit.
	streamSurvivesDeletion(t, n, secret, 0, 1)
	streamSurvivesDeletion(t, n, secret, 1, 0)

	// 6. Cache outages: unresponsive (paused), then its pod deleted.
	streamCachePaused(t, n, secret)
	streamCacheDeleted(t, n, secret, script)

	// 5. The cache password is in no log: the cache's, the Tiled pods' (every container, after the
	// outages above, when they had connection errors to report), the operator's.
	checkCachePasswordNotLogged(t, n)

	// 7b. Streaming switched off on the instance: the operator removes the cache, subscriptions are
	// refused, Tiled serves on.
	mustKubectl(t, []byte(streamInstanceYAML(streamInstance, streamFacility, twoReplicas+"  streaming: {enabled: false}\n")), "apply", "--server-side", "-f", "-")
	eventually(t, 6*time.Minute, 2*time.Second, streamInstance+" Ready without streaming", func() (bool, string) {
		ti := getInstanceIn(t, streamNS, streamInstance)
		if ti.Spec.Streaming == nil || ti.Spec.Streaming.Enabled == nil || *ti.Spec.Streaming.Enabled {
			return false, fmt.Sprintf("spec.streaming %+v", ti.Spec.Streaming)
		}
		return isTrue(ti, controllers.ConditionReady) && readyOn(t, streamNS, streamInstance, tiledImg()) == 2, streamConditions(ti)
	})
	ti = getInstanceIn(t, streamNS, streamInstance)
	eventually(t, 2*time.Minute, time.Second, "the cache of "+streamInstance+" removed", func() (bool, string) {
		for _, obj := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}} {
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: n.Cache}, obj); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%T %s: %v", obj, n.Cache, err)
			}
		}
		// Its NetworkPolicy goes with it (rendered for a managed cache only).
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: streamInstance + "-cache"}, &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("NetworkPolicy %s-cache: %v", streamInstance, err)
		}
		return true, ""
	})
	checkNoCache(t, ti)
	streamRefused(t, script, ti, []string{podURL(n, 0), podURL(n, 1)})
}

// checkCacheObjects checks the managed cache's objects: the StatefulSet with one ready pod labelled as
// the cache, the Service on port 6379 named redis, and Tiled's configuration pointing at it with the
// password only as a reference to the environment.
func checkCacheObjects(t *testing.T, n names.Objects) {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	if err := cl.Get(ctx, types.NamespacedName{Namespace: streamNS, Name: n.Cache}, &sts); err != nil {
		t.Fatalf("the cache StatefulSet: %v", err)
	}
	if sts.Status.ReadyReplicas != 1 || sts.Spec.Template.Labels[v1alpha1.LabelAppComponent] != render.ComponentCache {
		t.Errorf("cache StatefulSet %s: %d ready, pod labels %v", n.Cache, sts.Status.ReadyReplicas, sts.Spec.Template.Labels)
	}
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != cacheImg {
		t.Errorf("cache StatefulSet %s runs %s, want the profile's %s", n.Cache, img, cacheImg)
	}
	var svc corev1.Service
	if err := cl.Get(ctx, types.NamespacedName{Namespace: streamNS, Name: n.Cache}, &svc); err != nil {
		t.Fatalf("the cache Service: %v", err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != render.CachePort || svc.Spec.Ports[0].Name != render.CachePortName {
		t.Errorf("cache Service %s ports %+v, want one, %d named %s", n.Cache, svc.Spec.Ports, render.CachePort, render.CachePortName)
	}
	var cm corev1.ConfigMap
	if err := cl.Get(ctx, types.NamespacedName{Namespace: streamNS, Name: n.ConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	uri := fmt.Sprintf("redis://:${%s}@%s.%s.svc:%d/0", render.EnvStreamingCachePassword, n.Cache, streamNS, render.CachePort)
	if !strings.Contains(cm.Data["config.yml"], "streaming_cache:") || !strings.Contains(cm.Data["config.yml"], uri) {
		t.Errorf("Tiled's config.yml has no streaming_cache with uri %s:\n%s", uri, cm.Data["config.yml"])
	}
}

// checkNoCache checks that an instance without streaming has no cache StatefulSet or Service, no
// StreamingCacheReady condition and no streaming_cache in Tiled's configuration.
func checkNoCache(t *testing.T, ti *v1alpha1.TiledInstance) {
	t.Helper()
	n := fleet.NamesOf(ti)
	var sts appsv1.StatefulSetList
	if err := cl.List(context.Background(), &sts, client.InNamespace(streamNS),
		client.MatchingLabels{v1alpha1.LabelAppInstance: ti.Name, v1alpha1.LabelAppComponent: render.ComponentCache}); err != nil {
		t.Fatal(err)
	}
	if len(sts.Items) != 0 {
		t.Errorf("%s (streaming off) has a cache StatefulSet %s", ti.Name, sts.Items[0].Name)
	}
	if c := condition(ti, controllers.ConditionStreamingCacheReady); c != nil {
		t.Errorf("%s (streaming off) has the condition %s=%s/%s", ti.Name, c.Type, c.Status, c.Reason)
	}
	var cm corev1.ConfigMap
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: n.ConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cm.Data["config.yml"], "streaming_cache") {
		t.Errorf("%s (streaming off): Tiled's config.yml has a streaming_cache:\n%s", ti.Name, cm.Data["config.yml"])
	}
}

// streamRefused runs `stream.py probe` against each url of an instance without streaming: the
// subscription must fail, the write succeed.
func streamRefused(t *testing.T, script string, ti *v1alpha1.TiledInstance, urls []string) {
	t.Helper()
	secret := fleet.NamesOf(ti).Secret
	for i, u := range urls {
		startStreamPod(t, fmt.Sprintf("probe-%s-%d", ti.Name, i), script, u, secret, "--timeout", "20", "probe", u)
	}
	for i, u := range urls {
		var p streamProbe
		lastJSON(t, finishStreamPod(t, fmt.Sprintf("probe-%s-%d", ti.Name, i), 3*time.Minute, false), "", &p)
		t.Logf("%s (streaming off), probe through %s: %+v", ti.Name, u, p)
		if p.Subscribe == "connected" {
			t.Errorf("%s has streaming off, yet a subscription through %s connected: %+v", ti.Name, u, p)
		}
		if p.Write != "ok" {
			t.Errorf("%s has streaming off: a write through %s failed (it must not need the cache): %+v", ti.Name, u, p)
		}
	}
}

// streamSurvivesDeletion deletes Tiled replica victim while a subscriber is connected through it (the
// writer is on replica other) and requires every update written during and after the deletion to
// arrive, in order, within streamGapLimit of its write, through a reconnection that resumed from a
// sequence number.
func streamSurvivesDeletion(t *testing.T, n names.Objects, secret string, victim, other int) {
	t.Helper()
	pod := fmt.Sprintf("sub-delete-%d", victim)
	startStreamPod(t, pod, streamSubscriberScript, podURL(n, victim), secret,
		podURL(n, victim), podURL(n, other), "survive", "20", "0.5", "120", streamSignal)
	waitSubscribed(t, pod)
	victimPod := fmt.Sprintf("%s-%d", n.Tiled, victim)
	var old corev1.Pod
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: victimPod}, &old); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustKubectl(t, nil, "-n", streamNS, "delete", "pod", victimPod, "--wait=false")
	eventually(t, 4*time.Minute, 500*time.Millisecond, victimPod+" replaced and Ready", func() (bool, string) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: victimPod}, &p); err != nil {
			return false, err.Error()
		}
		return p.UID != old.UID && podReady(&p), string(p.Status.Phase)
	})
	replaced := time.Since(start)
	signalStreamPod(t, pod)
	var r subscriberResult
	lastJSON(t, finishStreamPod(t, pod, 4*time.Minute, true), "E2E-RESULT", &r)
	t.Logf("replica %d deleted under its subscriber: replaced and Ready in %.1f s; %d updates written while it was replaced, %d after, %d received; %d connections, starts %v; delay p50 %.2f s, max %.2f s",
		victim, replaced.Seconds(), r.WrittenDuring, r.Written-r.WrittenDuring, r.Received, r.Connections, derefAll(r.Starts), r.P50Delay, r.MaxDelay)
	if r.WrittenDuring == 0 || r.Received != r.Written {
		t.Errorf("replica %d deleted: %d updates written during the deletion, %d of %d received", victim, r.WrittenDuring, r.Received, r.Written)
	}
	if r.Connections < 2 {
		t.Errorf("replica %d deleted, yet its subscriber never reconnected (%d connection): it was not connected through it", victim, r.Connections)
	}
	for _, s := range r.Starts[min(1, len(r.Starts)):] {
		if s == nil || *s < r.FirstSeq {
			t.Errorf("replica %d deleted: the subscriber reconnected with start %v, want a resume after its first counted sequence %d: %v", victim, s, r.FirstSeq, derefAll(r.Starts))
		}
	}
	if time.Duration(r.MaxDelay*float64(time.Second)) > streamGapLimit {
		t.Errorf("replica %d deleted: an update took %.1f s to reach the subscriber, more than %s", victim, r.MaxDelay, streamGapLimit)
	}
}

func derefAll(ps []*int) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = "none"
		if p != nil {
			out[i] = fmt.Sprint(*p)
		}
	}
	return out
}

// waitCacheCondition polls the streaming instance until ok says its conditions are as wanted, and
// returns how long that took.
func waitCacheCondition(t *testing.T, timeout time.Duration, what string, ok func(ti *v1alpha1.TiledInstance) bool) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, timeout, 250*time.Millisecond, what, func() (bool, string) {
		ti := getInstanceIn(t, streamNS, streamInstance)
		return ok(ti), streamConditions(ti)
	})
	return time.Since(start)
}

// cacheUnavailable says the instance reports the outage of the cache pod: StreamingCacheReady False
// with reason StreamingCacheUnavailable naming the pod, and Ready False (Reconciling) with it.
func cacheUnavailable(n names.Objects) func(ti *v1alpha1.TiledInstance) bool {
	return func(ti *v1alpha1.TiledInstance) bool {
		c, r, rec := condition(ti, controllers.ConditionStreamingCacheReady), condition(ti, controllers.ConditionReady), condition(ti, controllers.ConditionReconciling)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controllers.ReasonStreamingCacheUnavailable && strings.Contains(c.Message, n.Cache+"-0") &&
			r != nil && r.Status == metav1.ConditionFalse && r.Reason == controllers.ReasonStreamingCacheUnavailable &&
			rec != nil && rec.Status == metav1.ConditionTrue
	}
}

// cacheBack says the instance is Ready with StreamingCacheReady True again.
func cacheBack(ti *v1alpha1.TiledInstance) bool {
	return isTrue(ti, controllers.ConditionStreamingCacheReady) && isTrue(ti, controllers.ConditionReady)
}

// streamCachePaused makes the cache unresponsive (CLIENT PAUSE ... ALL: every command, the probes'
// included, waits) while a subscriber is connected through replica 0 to an array written through
// replica 1: the instance reports the outage naming the cache pod, then the cache back; the
// subscription made before the outage receives the updates written after it; Tiled's pods were
// neither replaced nor restarted.
func streamCachePaused(t *testing.T, n names.Objects, secret string) {
	t.Helper()
	pod := "sub-outage"
	startStreamPod(t, pod, streamSubscriberScript, podURL(n, 0), secret,
		podURL(n, 0), podURL(n, 1), "outage", "5", "0.2", "120", streamSignal)
	waitSubscribed(t, pod)
	tiledBefore := tiledPodState(t, streamInstance)
	out := mustKubectl(t, nil, "-n", streamNS, "exec", n.Cache+"-0", "-c", "cache", "--",
		"redis-cli", "CLIENT", "PAUSE", fmt.Sprint(cachePause.Milliseconds()), "ALL")
	if strings.TrimSpace(out) != "OK" {
		t.Fatalf("redis-cli CLIENT PAUSE in %s-0: %q", n.Cache, out)
	}
	paused := time.Now()
	seen := waitCacheCondition(t, cachePause, "the paused cache reported (StreamingCacheReady False, StreamingCacheUnavailable, naming "+n.Cache+"-0)", cacheUnavailable(n))
	t.Logf("cache paused: %s reports it after %.1f s: %s", streamInstance, seen.Seconds(), streamConditions(getInstanceIn(t, streamNS, streamInstance)))
	waitCacheCondition(t, cachePause+90*time.Second-time.Since(paused), "the cache back after the pause", cacheBack)
	t.Logf("cache paused for %s: StreamingCacheReady True and Ready again %.1f s after the pause began", cachePause, time.Since(paused).Seconds())
	signalStreamPod(t, pod)
	var r subscriberResult
	lastJSON(t, finishStreamPod(t, pod, 3*time.Minute, true), "E2E-RESULT", &r)
	t.Logf("the subscription made before the pause received %d of %d updates written after it, delay max %.2f s", r.Received, r.Written, r.MaxDelay)
	if r.Received != r.Written || r.Written != 5 {
		t.Errorf("after the pause: %d of %d updates received, want 5 of 5", r.Received, r.Written)
	}
	if after := tiledPodState(t, streamInstance); fmt.Sprint(after) != fmt.Sprint(tiledBefore) {
		t.Errorf("the Tiled pods changed during the cache's pause: before %v, after %v", tiledBefore, after)
	}
}

// streamCacheDeleted deletes the cache pod (its updates are in an emptyDir: the new pod starts
// empty): the instance reports the cache back, Tiled's pods were neither replaced nor restarted, and
// a new subscription across replicas receives every update (stream.py check).
func streamCacheDeleted(t *testing.T, n names.Objects, secret, script string) {
	t.Helper()
	tiledBefore := tiledPodState(t, streamInstance)
	var old corev1.Pod
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: n.Cache + "-0"}, &old); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustKubectl(t, nil, "-n", streamNS, "delete", "pod", n.Cache+"-0", "--wait=false")
	// The new pod may be ready before the operator looks: the outage is reported when seen, the
	// return is required.
	sawOutage := false
	waitCacheCondition(t, 3*time.Minute, "the cache back after its pod was deleted", func(ti *v1alpha1.TiledInstance) bool {
		if cacheUnavailable(n)(ti) {
			sawOutage = true
		}
		var p corev1.Pod
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: n.Cache + "-0"}, &p)
		return err == nil && p.UID != old.UID && podReady(&p) && cacheBack(ti)
	})
	t.Logf("cache pod deleted: StreamingCacheReady True again on the new pod %.1f s later; the outage was seen reported: %t", time.Since(start).Seconds(), sawOutage)
	startStreamPod(t, "check-after-cache", script, podURL(n, 0), secret, "--timeout", "30", "check", podURL(n, 1), podURL(n, 0), "--updates", "10")
	logs := finishStreamPod(t, "check-after-cache", 4*time.Minute, false)
	var r struct {
		OK bool `json:"ok"`
	}
	lastJSON(t, logs, "", &r)
	if !r.OK {
		t.Errorf("stream.py check after the cache pod was replaced: %s", logs)
	}
	if after := tiledPodState(t, streamInstance); fmt.Sprint(after) != fmt.Sprint(tiledBefore) {
		t.Errorf("the Tiled pods changed when the cache pod was replaced: before %v, after %v", tiledBefore, after)
	}
}

// checkCachePasswordNotLogged requires the cache password, read from the instance's Secret, in no
// log: the cache pod's, every container of the Tiled pods (the init container migrate included,
// previous runs too), the operator's.
func checkCachePasswordNotLogged(t *testing.T, n names.Objects) {
	t.Helper()
	var sec corev1.Secret
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: n.Secret}, &sec); err != nil {
		t.Fatal(err)
	}
	password := string(sec.Data[render.SecretKeyStreamingCachePassword])
	if len(password) < 8 {
		t.Fatalf("Secret %s key %s holds %d bytes: no password to look for", n.Secret, render.SecretKeyStreamingCachePassword, len(password))
	}
	read := map[string]int{}
	look := func(what, logs string) {
		read[what] += len(logs)
		if strings.Contains(logs, password) {
			t.Errorf("the streaming cache password appears in the log of %s", what)
		}
	}
	var pods []corev1.Pod
	var cache corev1.Pod
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: streamNS, Name: n.Cache + "-0"}, &cache); err != nil {
		t.Fatal(err)
	}
	pods = append(pods, cache)
	pods = append(pods, serverPodsOf(t, streamNS, streamInstance)...)
	for _, p := range pods {
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if out, err := kubectl(nil, "-n", streamNS, "logs", p.Name, "-c", cs.Name); err == nil {
				look(p.Name+"/"+cs.Name, out)
			} else {
				t.Errorf("logs of %s/%s: %v", p.Name, cs.Name, err)
			}
			if cs.RestartCount > 0 {
				if out, err := kubectl(nil, "-n", streamNS, "logs", p.Name, "-c", cs.Name, "--previous"); err == nil {
					look(p.Name+"/"+cs.Name+" (previous)", out)
				}
			}
		}
	}
	look("the operator", mustKubectl(t, nil, "-n", operatorNS, "logs", "-l", "control-plane=controller-manager", "--all-containers", "--prefix", "--tail=-1"))
	t.Logf("the cache password is in none of these logs (bytes read): %v", read)
	for _, what := range []string{n.Cache + "-0/cache", n.Tiled + "-0/tiled", n.Tiled + "-1/tiled", "the operator"} {
		if read[what] == 0 {
			t.Errorf("the log of %s is empty: the check would prove nothing there", what)
		}
	}
}
