//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The stranded-rollout case (issue 43's first "done when"): a fleet serving without the streaming
// cache has it turned on in its profile with a cache image the node cannot pull, as an operator
// release that brings the cache to a site whose network cannot reach its registry would. Before
// dependencies came first, the Tiled pods were replaced at once with a configuration pointing at a
// cache that never started, and every write failed while the pods stayed Ready. Now no Tiled pod is
// replaced while the cache is not Ready: every beamline keeps accepting writes, and the instance the
// cluster's rollout reached first names the cache's pull error (not Ready: the budget of one is
// spent, so the change reaches no other beamline). The image fixed in the profile, the fleet
// converges within its rollout budget, the test deleting no pod: the cache pod stuck on the
// unpullable revision is replaced by the operator, then Tiled rolls, one beamline at a time.

const (
	strandedNS      = "e2e-stranded"
	strandedCluster = "strd"
	// strandedCacheImage is a cache image on a registry at a loopback address that refuses the
	// connection: a real pull that fails, and nothing contacted outside the node.
	strandedCacheImage = "127.0.0.1:1/local/valkey:unreachable"
	// strandedClientPrefix names the case's client pods (the only pods the test deletes).
	strandedClientPrefix = "strd-client-"
)

var strandedBeamlines = []string{"a1", "a2"}

// streamingOff turns the streaming cache off in a profile of profileYAMLIn's shape.
func streamingOff(profile string) string {
	return strings.Replace(profile, "  streaming:\n    managed:\n", "  streaming:\n    enabled: false\n    managed:\n", 1)
}

// strandedProfileYAML is the case's profile: streaming off, or on with the managed cache's image.
func strandedProfileYAML(cacheImage string) string {
	p := profileYAMLIn(strandedNS, "stranded-defaults", strandedNS, tiledImg())
	if cacheImage == "" {
		return streamingOff(p)
	}
	return strings.Replace(p, "      image: "+cacheImg+"\n", "      image: "+cacheImage+"\n", 1)
}

// strandedWriteScript writes count small arrays under keys of its round, reads each back, and prints
// E2E-WRITES ok=N failed=M (a write or read that raises counts as failed, a client that cannot
// connect fails them all), then E2E-OK: the case counts failures, it does not stop at the first.
const strandedWriteScript = `
import os, sys, numpy
from tiled.client import from_uri
rnd, count = sys.argv[1], int(sys.argv[2])
ok = failed = 0
try:
    c = from_uri(os.environ["TILED_URL"], api_key=os.environ["TILED_API_KEY"])
except Exception as e:
    print("E2E-ERROR connect", repr(e))
    c = None
for i in range(count):
    if c is None:
        failed += 1
        continue
    try:
        c.write_array(numpy.arange(5) + i, key="%s_%d" % (rnd, i))
        assert list(c["%s_%d" % (rnd, i)].read()) == list(numpy.arange(5) + i)
        ok += 1
    except Exception as e:
        print("E2E-ERROR write", i, repr(e))
        failed += 1
print("E2E-WRITES ok=%d failed=%d" % (ok, failed))
print("E2E-OK")
`

var strandedWritesLine = regexp.MustCompile(`E2E-WRITES ok=(\d+) failed=(\d+)`)

// strandedWrites runs one client pod per beamline at once, each writing and reading back count
// arrays, and returns the failed writes over all of them.
func strandedWrites(t *testing.T, round string, count int) int {
	t.Helper()
	for _, b := range strandedBeamlines {
		ti := getInstanceIn(t, strandedNS, upgInstance(strandedCluster, b))
		pod := strandedClientPrefix + round + "-" + b
		_, _ = kubectl(nil, "-n", strandedNS, "delete", "pod", pod, "--ignore-not-found", "--wait=true")
		mustKubectl(t, []byte(pythonClientPodYAML(pod, strandedNS, tiledImg(), strandedWriteScript, ti.Status.URL, fleet.NamesOf(ti).Secret,
			round, strconv.Itoa(count))), "apply", "--server-side", "-f", "-")
	}
	failed := 0
	for _, b := range strandedBeamlines {
		pod := strandedClientPrefix + round + "-" + b
		var phase corev1.PodPhase
		eventually(t, clientPodTimeout, time.Second, "client pod "+pod+" finished", func() (bool, string) {
			var p corev1.Pod
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: strandedNS, Name: pod}, &p); err != nil {
				return false, err.Error()
			}
			phase = p.Status.Phase
			return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
		})
		logs, _ := kubectl(nil, "-n", strandedNS, "logs", pod)
		m := strandedWritesLine.FindStringSubmatch(logs)
		if phase != corev1.PodSucceeded || m == nil {
			t.Fatalf("client %s (round %s): phase %s, no count of writes\n%s", pod, round, phase, logs)
		}
		ok, _ := strconv.Atoi(m[1])
		bad, _ := strconv.Atoi(m[2])
		if bad > 0 {
			t.Errorf("round %s, beamline %s: %d of %d writes failed\n%s", round, b, bad, ok+bad, logs)
		}
		failed += bad
		_, _ = kubectl(nil, "-n", strandedNS, "delete", "pod", pod, "--wait=false")
	}
	t.Logf("round %s: %d writes on each of %d beamlines, %d failed", round, count, len(strandedBeamlines), failed)
	return failed
}

// tiledPodUIDs returns the UIDs of the Tiled pods of namespace ns, by pod name.
func tiledPodUIDs(t *testing.T, ns string) map[string]types.UID {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.LabelAppComponent: render.ComponentServer}); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

// strandedTiledSets returns the generation of each instance's Tiled StatefulSet.
func strandedTiledSets(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, b := range strandedBeamlines {
		ti := getInstanceIn(t, strandedNS, upgInstance(strandedCluster, b))
		var sts appsv1.StatefulSet
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: strandedNS, Name: fleet.NamesOf(ti).Tiled}, &sts); err != nil {
			t.Fatal(err)
		}
		out[sts.Name] = sts.Generation
	}
	return out
}

var pullFailure = regexp.MustCompile(`ErrImagePull|ImagePullBackOff`)

// strandedNamed says whether the instance has a condition that names its cache pod's pull failure,
// and the conditions for the log.
func strandedNamed(ti *v1alpha1.TiledInstance) (bool, string) {
	cache := fleet.NamesOf(ti).Cache
	var all []string
	for _, c := range ti.Status.Conditions {
		msg := c.Reason + " " + c.Message
		all = append(all, fmt.Sprintf("%s=%s %s", c.Type, c.Status, msg))
		if pullFailure.MatchString(msg) && strings.Contains(msg, cache) {
			return true, all[len(all)-1]
		}
	}
	return false, strings.Join(all, "; ")
}

func testStrandedRollout(t *testing.T) {
	ns := strandedNS
	caseNamespace(t, ns)
	requireFreeVolumes(t, 2*len(strandedBeamlines))
	mustKubectl(t, []byte(strandedProfileYAML("")), "apply", "--server-side", "-f", "-")
	tc := upgradeClusterSpec{ns: ns, name: strandedCluster, facility: ns, beamlines: strandedBeamlines}
	mustKubectl(t, []byte(tc.yaml()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tc/"+strandedCluster, "--timeout="+stuckWait.String())
	for _, b := range strandedBeamlines {
		if ti := getInstanceIn(t, ns, upgInstance(strandedCluster, b)); condition(ti, "StreamingCacheReady") != nil {
			t.Fatalf("%s: streaming is off, yet %+v", ti.Name, condition(ti, "StreamingCacheReady"))
		}
	}
	failed := strandedWrites(t, "before", 3)

	// Streaming turned on with a cache image the node cannot pull.
	podsBefore, setsBefore := tiledPodUIDs(t, ns), strandedTiledSets(t)
	w := watchUpgrade(t, ns)
	defer w.stop(t)
	start := time.Now()
	mustKubectl(t, []byte(strandedProfileYAML(strandedCacheImage)), "apply", "--server-side", "-f", "-")
	// The cluster's rollout takes the change to one beamline at a time (maxUnavailable 1): the
	// first instance it reaches names its cache's pull failure and is not Ready (its streaming does
	// not work), which spends the budget, so the change goes no further until that is fixed. Every
	// other instance is either reached too and names the failure the same way, or not reached: no
	// cache yet.
	var reached []string
	eventually(t, stuckWait, time.Second, "an instance names its cache pod's pull failure", func() (bool, string) {
		reached = nil
		var all []string
		for _, b := range strandedBeamlines {
			ti := getInstanceIn(t, ns, upgInstance(strandedCluster, b))
			ok, msg := strandedNamed(ti)
			if ok {
				reached = append(reached, ti.Name)
				t.Logf("%s: %s", ti.Name, msg)
			}
			all = append(all, ti.Name+": "+msg)
		}
		return len(reached) > 0, strings.Join(all, " | ")
	})
	for _, b := range strandedBeamlines {
		ti := getInstanceIn(t, ns, upgInstance(strandedCluster, b))
		if slices.Contains(reached, ti.Name) {
			continue
		}
		var cache appsv1.StatefulSet
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: fleet.NamesOf(ti).Cache}, &cache)
		if err == nil || condition(ti, "StreamingCacheReady") != nil {
			t.Errorf("%s has its cache (or its condition) but does not name the pull failure: %v", ti.Name, ti.Status.Conditions)
		} else {
			t.Logf("%s: not reached by the cluster's rollout while %v is not Ready (no cache yet)", ti.Name, reached)
		}
	}
	// The kubelet retries the pull (ErrImagePull, ImagePullBackOff in turn) and each status update
	// reaches the operator: watched for stuckHold, no Tiled StatefulSet may change meanwhile.
	deadline := time.Now().Add(stuckHold)
	for time.Now().Before(deadline) {
		if got := strandedTiledSets(t); fmt.Sprint(got) != fmt.Sprint(setsBefore) {
			t.Fatalf("a Tiled StatefulSet changed while its cache could not start: generations %v, before %v", got, setsBefore)
		}
		time.Sleep(time.Second)
	}
	failed += strandedWrites(t, "stranded", 3)
	if got := tiledPodUIDs(t, ns); fmt.Sprint(got) != fmt.Sprint(podsBefore) {
		t.Errorf("Tiled pods replaced while the cache could not start: %v, before %v", got, podsBefore)
	}

	// The image fixed in the profile: the fleet converges within its budget, nothing deleted by the
	// test.
	fixAt := time.Now()
	mustKubectl(t, []byte(strandedProfileYAML(cacheImg)), "apply", "--server-side", "-f", "-")
	var instances []string
	for _, b := range strandedBeamlines {
		name := upgInstance(strandedCluster, b)
		instances = append(instances, name)
		eventually(t, stuckWait, time.Second, name+" Ready with its cache, Tiled on the new template", func() (bool, string) {
			ti := getInstanceIn(t, ns, name)
			var sts appsv1.StatefulSet
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: fleet.NamesOf(ti).Tiled}, &sts); err != nil {
				return false, err.Error()
			}
			rolled := sts.Generation > setsBefore[sts.Name] && sts.Status.ObservedGeneration == sts.Generation &&
				sts.Status.UpdatedReplicas == sts.Status.Replicas && sts.Status.ReadyReplicas == sts.Status.Replicas &&
				sts.Status.CurrentRevision == sts.Status.UpdateRevision
			return rolled && isTrue(ti, "Ready") && isTrue(ti, "StreamingCacheReady"),
				fmt.Sprintf("Tiled StatefulSet generation %d (was %d), observed %d, updated %d of %d, ready %d; Ready %+v, StreamingCacheReady %+v",
					sts.Generation, setsBefore[sts.Name], sts.Status.ObservedGeneration, sts.Status.UpdatedReplicas, sts.Status.Replicas,
					sts.Status.ReadyReplicas, condition(ti, "Ready"), condition(ti, "StreamingCacheReady"))
		})
	}
	mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tc/"+strandedCluster, "--timeout="+stuckWait.String())
	converged := time.Now()
	fixSeconds := converged.Sub(fixAt).Seconds()
	if n, at, which := w.maxWithoutReady(instances, fixAt, converged); n > 1 {
		t.Errorf("%d instances without a Ready Tiled pod at %s (%v): the cluster's budget is 1", n, at.Format(time.RFC3339Nano), which)
	}
	failed += strandedWrites(t, "after", 3)

	// Who deleted pods: never the test (its client pods aside).
	var byTest []string
	for _, ev := range podDeletions(t, ns, start, time.Now()) {
		if strings.HasPrefix(ev.ObjectRef.Name, strandedClientPrefix) || !ev.succeeded() {
			continue
		}
		if u := ev.User.Username; u != operatorUser && u != statefulSetController && !strings.HasPrefix(u, "system:serviceaccount:kube-system:") {
			byTest = append(byTest, ev.ObjectRef.Name+" by "+u)
		}
	}
	if len(byTest) > 0 {
		t.Errorf("pods deleted by someone other than the operator and kube-controller-manager: %v", byTest)
	}

	// What is left stuck: any pod of the namespace (client pods aside) not Ready.
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var stuck []string
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, strandedClientPrefix) || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if p.DeletionTimestamp != nil || !podReady(&p) {
			stuck = append(stuck, p.Name)
		}
	}
	if len(stuck) > 0 {
		t.Errorf("pods not Ready after the fleet converged: %v", stuck)
	}
	restarts, by := w.restartTotal()
	t.Logf("stranded rollout: %d writes failed, %d pods left stuck, the fix converged in %.1fs; container restarts %d %v",
		failed, len(stuck), fixSeconds, restarts, by)

	figMu.Lock()
	defer figMu.Unlock()
	fig.StrandedWritesFailed = &failed
	left := len(stuck)
	fig.StuckPodsLeft = &left
	fig.FixConvergeSeconds = fixSeconds
}
