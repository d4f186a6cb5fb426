//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

const (
	autoscaleNS       = "e2e-autoscale"
	autoscaleFacility = "e2e-autoscale"
	autoscaleInstance = "as"
	// What hack/node/cluster.sh runs: metrics-server's --metric-resolution, and kube-controller-manager's
	// --horizontal-pod-autoscaler-sync-period (its default; cluster.sh does not set it).
	metricResolution = 15 * time.Second
	hpaSyncPeriod    = 15 * time.Second
	// The instance's scaleDownStabilizationSeconds.
	scaleDownWindow = 30 * time.Second
	// loadSeconds bounds the load pod's run; the case deletes it as soon as the instance has scaled
	// up. loadRequests bounds its request count.
	loadSeconds  = 240
	loadRequests = 400000
)

// autoscaleProfileYAML is upgradeProfileYAML in the autoscaling namespace, with a ReadWriteMany data
// claim (admission refuses an autoscaler above one pod on ReadWriteOnce, and the node's hostPath
// volumes offer ReadWriteMany) and retention Delete.
func autoscaleProfileYAML() string {
	return strings.NewReplacer(
		"name: "+upgProfileName, "name: autoscale-defaults",
		"namespace: "+upgradeNS, "namespace: "+autoscaleNS,
		"accessModes: [ReadWriteOnce]", "accessModes: [ReadWriteMany]",
		"retention: Retain", "retention: Delete",
	).Replace(upgradeProfileYAML(upgProfileName, autoscaleFacility, tiledImg()))
}

// upgProfileName is the name autoscaleProfileYAML gives upgradeProfileYAML before renaming it.
const upgProfileName = "autoscale-base"

// autoscaleInstanceYAML is the standalone instance: the autoscaler on (1 to 3 pods at 50% of a 50m
// request, 30 s scale-down window), or off with tiled.replicas.
func autoscaleInstanceYAML(enabled bool, replicas int) string {
	tiled := `{autoscaling: {enabled: true, minReplicas: 1, maxReplicas: 3, targetCPUUtilizationPercentage: 50, scaleDownStabilizationSeconds: 30}, resources: {requests: {cpu: 50m}}}`
	if !enabled {
		tiled = fmt.Sprintf(`{replicas: %d, autoscaling: {enabled: false}, resources: {requests: {cpu: 50m}}}`, replicas)
	}
	return standaloneYAMLIn(autoscaleNS, autoscaleInstance, autoscaleFacility, "  tiled: "+tiled+"\n")
}

// loadScript keeps Tiled busy: threads of authenticated searches, one new connection per request so
// that kube-proxy spreads them over every Tiled pod the Service has. It stops by itself after argv[1]
// seconds or argv[2] requests, whichever comes first, and prints what it did every 10 s and at the end.
const loadScript = `
import os, sys, threading, time
import httpx
url = os.environ["TILED_URL"].rstrip("/") + "/api/v1/search/"
headers = {"Authorization": "Apikey " + os.environ["TILED_API_KEY"]}
deadline, limit = time.monotonic() + float(sys.argv[1]), int(sys.argv[2])
done, failed, lock = [0], [0], threading.Lock()
def worker():
    with httpx.Client(headers=headers, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        while time.monotonic() < deadline:
            with lock:
                if done[0] + failed[0] >= limit:
                    return
            try:
                ok = c.get(url).status_code == 200
            except httpx.HTTPError:
                ok = False
            with lock:
                if ok:
                    done[0] += 1
                else:
                    failed[0] += 1
def report():
    with lock:
        print("E2E-LOAD requests", done[0], "failed", failed[0], flush=True)
threads = [threading.Thread(target=worker, daemon=True) for _ in range(8)]
for th in threads:
    th.start()
while any(th.is_alive() for th in threads):
    time.sleep(10)
    report()
`

// requireFreeVolumes fails the test unless the node has at least n Available PersistentVolumes of
// the suite's storage class: a case's fleet binds one per claim, and a released one is never reused.
func requireFreeVolumes(t *testing.T, n int) {
	t.Helper()
	var pvs corev1.PersistentVolumeList
	if err := cl.List(context.Background(), &pvs); err != nil {
		t.Fatal(err)
	}
	free := 0
	for _, pv := range pvs.Items {
		if pv.Spec.StorageClassName == storageClass && pv.Status.Phase == corev1.VolumeAvailable {
			free++
		}
	}
	if free < n {
		t.Fatalf("%d Available PersistentVolumes of class %s, the case needs %d (raise PV_COUNT in hack/node/cluster.sh)", free, storageClass, n)
	}
}

// tiledPods counts an instance's Tiled pods that are not terminating, and those of them Ready.
func tiledPods(t *testing.T, ns, instance string) (pods, ready int) {
	for _, p := range serverPodsOf(t, ns, instance) {
		if p.DeletionTimestamp != nil {
			continue
		}
		pods++
		if podReady(&p) {
			ready++
		}
	}
	return pods, ready
}

// operatorSetsReplicas reports whether the operator's apply owns the StatefulSet's spec.replicas, from
// its managed fields.
func operatorSetsReplicas(t *testing.T, s *appsv1.StatefulSet) bool {
	t.Helper()
	found := false
	for _, m := range s.ManagedFields {
		if m.Manager != v1alpha1.FieldOwner || m.Operation != metav1.ManagedFieldsOperationApply || m.FieldsV1 == nil {
			continue
		}
		found = true
		var f struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &f); err != nil {
			t.Fatalf("managed fields of %s: %v", s.Name, err)
		}
		if _, ok := f.Spec["f:replicas"]; ok {
			return true
		}
	}
	if !found {
		t.Fatalf("StatefulSet %s has no managed fields of %s (Apply)", s.Name, v1alpha1.FieldOwner)
	}
	return false
}

func getHPA(n names.Objects) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	var h autoscalingv2.HorizontalPodAutoscaler
	err := cl.Get(context.Background(), types.NamespacedName{Namespace: autoscaleNS, Name: n.Tiled}, &h)
	return &h, err
}

func hpaCondition(h *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType) string {
	for _, c := range h.Status.Conditions {
		if c.Type == typ {
			return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "absent"
}

// hpaCPU is the Tiled container's CPU use the autoscaler last saw, in percent of the request.
func hpaCPU(h *autoscalingv2.HorizontalPodAutoscaler) string {
	for _, m := range h.Status.CurrentMetrics {
		if m.ContainerResource != nil && m.ContainerResource.Current.AverageUtilization != nil {
			return fmt.Sprintf("%d%%", *m.ContainerResource.Current.AverageUtilization)
		}
	}
	return "none"
}

// instanceSampler records the instance's conditions and readyReplicas every 500 ms while the
// autoscaler works, to tell that it never stalled and that readyReplicas followed the pods.
type instanceSampler struct {
	stop    chan struct{}
	done    sync.WaitGroup
	mu      sync.Mutex
	stalled []string
	states  map[string]int // "Ready=<status> <reason>" -> samples
	maxRR   int32
}

func sampleInstance(ns, name string) *instanceSampler {
	s := &instanceSampler{stop: make(chan struct{}), states: map[string]int{}}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			var ti v1alpha1.TiledInstance
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &ti); err == nil {
				s.mu.Lock()
				if c := condition(&ti, "Stalled"); c != nil && c.Status == metav1.ConditionTrue {
					s.stalled = append(s.stalled, c.Reason+": "+c.Message)
				}
				if c := condition(&ti, "Ready"); c != nil {
					s.states[fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)]++
				}
				s.maxRR = max(s.maxRR, ti.Status.ReadyReplicas)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *instanceSampler) finish() (stalled []string, states map[string]int, maxReadyReplicas int32) {
	close(s.stop)
	s.done.Wait()
	return s.stalled, s.states, s.maxRR
}

// testAutoscaling: an instance with the autoscaler on runs one Tiled pod; under load the
// HorizontalPodAutoscaler the operator rendered scales the StatefulSet up, on the metrics API of the
// node's metrics-server; without load it scales back to one after its stabilization window; turned
// off, the autoscaler is pruned and the StatefulSet is back at tiled.replicas.
func testAutoscaling(t *testing.T) {
	ctx := ctxT(t)
	caseNamespace(t, autoscaleNS)
	// The node's metrics API answers (hack/node/cluster.sh waits for it at up).
	if out, err := kubectl(nil, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"); err != nil || !strings.Contains(out, `"cpu"`) {
		t.Fatalf("the metrics API does not answer: %v\n%s", err, out)
	}

	// The instance binds two of the node's volumes (data, database).
	requireFreeVolumes(t, 2)

	// 1. The instance with the autoscaler on.
	mustKubectl(t, []byte(autoscaleProfileYAML()), "apply", "--server-side", "-f", "-")
	start := time.Now()
	mustKubectl(t, []byte(autoscaleInstanceYAML(true, 0)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", autoscaleNS, "wait", "--for=condition=Ready", "tiledinstance/"+autoscaleInstance, "--timeout=5m")
	t.Logf("instance Ready %.1fs after apply", time.Since(start).Seconds())
	ti := getInstanceIn(t, autoscaleNS, autoscaleInstance)
	n := fleet.NamesOf(ti)

	// 2. The autoscaler: owned by the instance, on the StatefulSet, the tiled container's CPU.
	h, err := getHPA(n)
	if err != nil {
		t.Fatalf("HorizontalPodAutoscaler %s/%s: %v", autoscaleNS, n.Tiled, err)
	}
	if c := metav1.GetControllerOf(h); c == nil || c.UID != ti.UID || c.Kind != "TiledInstance" {
		t.Errorf("HorizontalPodAutoscaler %s: controller %+v, want the TiledInstance %s (%s)", h.Name, c, ti.Name, ti.UID)
	}
	sp := h.Spec
	if sp.ScaleTargetRef.Kind != "StatefulSet" || sp.ScaleTargetRef.Name != n.Tiled || sp.MinReplicas == nil || *sp.MinReplicas != 1 ||
		sp.MaxReplicas != 3 || len(sp.Metrics) != 1 || sp.Metrics[0].ContainerResource == nil ||
		sp.Metrics[0].ContainerResource.Container != "tiled" || sp.Metrics[0].ContainerResource.Name != corev1.ResourceCPU ||
		sp.Metrics[0].ContainerResource.Target.AverageUtilization == nil || *sp.Metrics[0].ContainerResource.Target.AverageUtilization != 50 ||
		sp.Behavior == nil || sp.Behavior.ScaleDown == nil || sp.Behavior.ScaleDown.StabilizationWindowSeconds == nil ||
		*sp.Behavior.ScaleDown.StabilizationWindowSeconds != 30 {
		b, _ := json.Marshal(sp)
		t.Errorf("HorizontalPodAutoscaler %s: spec %s", h.Name, b)
	}
	var sts appsv1.StatefulSet
	if err := cl.Get(ctx, types.NamespacedName{Namespace: autoscaleNS, Name: n.Tiled}, &sts); err != nil {
		t.Fatal(err)
	}
	if operatorSetsReplicas(t, &sts) {
		t.Errorf("StatefulSet %s: the operator's apply owns spec.replicas while the autoscaler is on", sts.Name)
	}
	// The autoscaler reads the pod's CPU from the metrics API and, idle, wants one pod. (A pod's
	// samples count one metric window after it became Ready.)
	eventually(t, 3*time.Minute, time.Second, "the autoscaler reads the Tiled container's CPU and wants 1 pod", func() (bool, string) {
		h, err := getHPA(n)
		if err != nil {
			return false, err.Error()
		}
		active := hpaCondition(h, autoscalingv2.ScalingActive)
		why := fmt.Sprintf("cpu %s, current %d, desired %d; ScalingActive %s", hpaCPU(h), h.Status.CurrentReplicas, h.Status.DesiredReplicas, active)
		return strings.HasPrefix(active, "True") && hpaCPU(h) != "none" && h.Status.DesiredReplicas == 1, why
	})
	h, _ = getHPA(n)
	t.Logf("idle: the autoscaler sees %s of the CPU request, %d pod wanted (%.1fs after the apply)", hpaCPU(h), h.Status.DesiredReplicas, time.Since(start).Seconds())

	// 3. Load: the autoscaler scales up; at least two Tiled pods become Ready.
	samp := sampleInstance(autoscaleNS, autoscaleInstance)
	pod := pythonClientPodYAML("load", autoscaleNS, tiledImg(), loadScript, ti.Status.URL, n.Secret,
		fmt.Sprint(loadSeconds), fmt.Sprint(loadRequests))
	loadStart := time.Now()
	mustKubectl(t, []byte(pod), "apply", "--server-side", "-f", "-")
	// The bound: two metric samples of the load, one sync of the autoscaler, and a Tiled pod's start
	// on a busy node (under a minute here), with room.
	upBound := 2*metricResolution + hpaSyncPeriod + 2*time.Minute
	eventually(t, upBound, time.Second, "at least 2 Ready Tiled pods under load", func() (bool, string) {
		pods, ready := tiledPods(t, autoscaleNS, autoscaleInstance)
		h, err := getHPA(n)
		if err != nil {
			return false, err.Error()
		}
		return ready >= 2, fmt.Sprintf("%d pods, %d Ready; autoscaler: cpu %s, desired %d, AbleToScale %s", pods, ready,
			hpaCPU(h), h.Status.DesiredReplicas, hpaCondition(h, autoscalingv2.AbleToScale))
	})
	scaleUp := time.Since(loadStart)
	h, _ = getHPA(n)
	t.Logf("scale-up: %d Ready Tiled pods %.1fs after the load started (autoscaler: cpu %s, desired %d)",
		2, scaleUp.Seconds(), hpaCPU(h), h.Status.DesiredReplicas)
	eventually(t, 30*time.Second, 500*time.Millisecond, "the instance's readyReplicas follows the StatefulSet", func() (bool, string) {
		ti := getInstanceIn(t, autoscaleNS, autoscaleInstance)
		var s appsv1.StatefulSet
		if err := cl.Get(ctx, types.NamespacedName{Namespace: autoscaleNS, Name: n.Tiled}, &s); err != nil {
			return false, err.Error()
		}
		return ti.Status.ReadyReplicas >= 2 && ti.Status.ReadyReplicas == s.Status.ReadyReplicas,
			fmt.Sprintf("instance readyReplicas %d, StatefulSet %d", ti.Status.ReadyReplicas, s.Status.ReadyReplicas)
	})
	if err := cl.Get(ctx, types.NamespacedName{Namespace: autoscaleNS, Name: n.Tiled}, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas < 2 {
		t.Errorf("StatefulSet %s: spec.replicas %v after the scale-up", sts.Name, sts.Spec.Replicas)
	}
	if operatorSetsReplicas(t, &sts) {
		t.Errorf("StatefulSet %s: the operator's apply took spec.replicas back after the autoscaler scaled it", sts.Name)
	}

	// 4. No load: back to one pod within the window, the autoscaler's sync and two metric samples
	// (the rate over the last interval must show the idle pods), plus the pods' shutdown.
	logs, _ := kubectl(nil, "-n", autoscaleNS, "logs", "load")
	mustKubectl(t, nil, "-n", autoscaleNS, "delete", "pod", "load", "--grace-period=0", "--wait=true")
	loadEnd := time.Now()
	downBound := scaleDownWindow + hpaSyncPeriod + 2*metricResolution + 90*time.Second
	eventually(t, downBound, time.Second, "back to 1 Tiled pod without load", func() (bool, string) {
		pods, ready := tiledPods(t, autoscaleNS, autoscaleInstance)
		all := len(serverPodsOf(t, autoscaleNS, autoscaleInstance))
		h, err := getHPA(n)
		if err != nil {
			return false, err.Error()
		}
		return all == 1 && ready == 1 && h.Status.DesiredReplicas == 1,
			fmt.Sprintf("%d pods (%d terminating), %d Ready; autoscaler: cpu %s, desired %d", pods, all-pods, ready, hpaCPU(h), h.Status.DesiredReplicas)
	})
	scaleDown := time.Since(loadEnd)
	t.Logf("scale-down: 1 Tiled pod %.1fs after the load stopped (bound %s: window %s, sync %s, two samples of %s, 90s for the pods)",
		scaleDown.Seconds(), downBound, scaleDownWindow, hpaSyncPeriod, metricResolution)
	figMu.Lock()
	fig.AutoscaleUpSeconds, fig.AutoscaleDownSeconds = scaleUp.Seconds(), scaleDown.Seconds()
	figMu.Unlock()
	eventually(t, time.Minute, 500*time.Millisecond, "the instance Ready with readyReplicas 1", func() (bool, string) {
		ti := getInstanceIn(t, autoscaleNS, autoscaleInstance)
		return isTrue(ti, "Ready") && ti.Status.ReadyReplicas == 1, fmt.Sprintf("Ready %+v, readyReplicas %d", condition(ti, "Ready"), ti.Status.ReadyReplicas)
	})
	stalled, states, maxRR := samp.finish()
	t.Logf("instance during the scaling: %v, readyReplicas at most %d; load: %s", states, maxRR, strings.TrimSpace(lastLine(logs)))
	if len(stalled) > 0 {
		t.Errorf("the instance was Stalled while the autoscaler scaled: %v", stalled)
	}
	if maxRR < 2 {
		t.Errorf("the instance's status.readyReplicas never showed the scale-up (at most %d)", maxRR)
	}
	// Scaled up, a new pod may wait for CPU on a node other cases share ("Insufficient cpu"): the
	// instance says so (Unschedulable, not stalled: capacity may come), and the scale-up bound holds.
	for s := range states {
		if !strings.HasPrefix(s, "Ready=True") && s != "Ready=False WaitingForPods" && s != "Ready=False Unschedulable" {
			t.Errorf("the instance's Ready condition while scaling: %s (%d samples), want True, or False WaitingForPods or Unschedulable", s, states[s])
		}
	}

	// 5. The autoscaler off: pruned; the StatefulSet back at tiled.replicas (2), owned by the operator.
	mustKubectl(t, []byte(autoscaleInstanceYAML(false, 2)), "apply", "--server-side", "-f", "-")
	eventually(t, time.Minute, 500*time.Millisecond, "the autoscaler pruned", func() (bool, string) {
		_, err := getHPA(n)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("get: %v", err)
	})
	eventually(t, 2*time.Minute, time.Second, "the StatefulSet at tiled.replicas 2, the instance Ready with 2", func() (bool, string) {
		var s appsv1.StatefulSet
		if err := cl.Get(ctx, types.NamespacedName{Namespace: autoscaleNS, Name: n.Tiled}, &s); err != nil {
			return false, err.Error()
		}
		ti := getInstanceIn(t, autoscaleNS, autoscaleInstance)
		ok := s.Spec.Replicas != nil && *s.Spec.Replicas == 2 && isTrue(ti, "Ready") && ti.Status.ReadyReplicas == 2
		return ok, fmt.Sprintf("spec.replicas %v, Ready %+v, readyReplicas %d", s.Spec.Replicas, condition(ti, "Ready"), ti.Status.ReadyReplicas)
	})
	if err := cl.Get(ctx, types.NamespacedName{Namespace: autoscaleNS, Name: n.Tiled}, &sts); err != nil {
		t.Fatal(err)
	}
	if !operatorSetsReplicas(t, &sts) {
		t.Errorf("StatefulSet %s: the operator's apply does not own spec.replicas with the autoscaler off", sts.Name)
	}
	t.Logf("autoscaling: scale-up %.1fs (bound %s), scale-down %.1fs (bound %s)", scaleUp.Seconds(), upBound, scaleDown.Seconds(), downBound)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}
