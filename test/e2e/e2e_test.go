//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// e2eCase is a case of the suite: what it shares with the others (schedule.go) and its body.
type e2eCase struct {
	Case
	f func(t *testing.T)
}

// suite lists the cases in their order. Schedule runs those whose Needs allow it beside each other
// (E2E_PARALLEL at once): the cases that change the operator run alone, the first fleet's one after
// another and the upgrade fleet's one after another, the rest — each in a namespace and fleet of
// its own — beside them. Every case that must run alone comes before the long own-namespace cases
// (9 to 12) but the last upgrade, which rolls every fleet left; the long cases then overlap the
// first fleet's and the two-minute window the operator upgrades share ends among them.
func suite() []e2eCase {
	c := func(name string, needs Needs, f func(*testing.T)) e2eCase {
		return e2eCase{Case{Name: name, Needs: needs}, f}
	}
	required := func(ec e2eCase) e2eCase { ec.Required = true; return ec }
	return []e2eCase{
		// The operator installed, upgraded from the previous release, the first fleet stamped out and
		// its floor timed: alone, so that the fleet's timings and its floor's are taken alike.
		c("operator upgrade 0: the previous release (hack/previous-release) from its own config/default; a fleet stamped out, data written", Alone, testPreviousRelease),
		required(c("install: kubectl apply --server-side -k config/default (over the previous release), webhooks answering", Alone, testInstall)),
		c("operator upgrade 1: previous release -> this build: 0 pods replaced or restarted, no write to the fleet but the reviewed list's (test/e2e/testdata/operator-upgrade-writes.yaml), its objects read and applied again", Alone, testOperatorUpgraded),
		required(c("1 fleet Ready: tc Ready, every instance Ready with its URL, every pod Ready, 0 restarts", Alone, testFleetReady)),
		c("floor: the same children applied without the operator, time to all pods Ready", Alone, testFloor),

		// The operator changed under the fleets, alone: upgrade 1's window (opened above) runs on
		// through them, and upgrades 2 and 3 check it.
		c("operator upgrade 2: this build -> a prime build of itself: 0 pods replaced or restarted, 0 writes to the fleet", Alone, testOperatorUpgradePrime),
		c("5 operator killed mid-rollout: budget kept, unchanged objects not rewritten", Alone, testOperatorKilledMidRollout),
		c("6 leader failover within the lease; webhooks keep answering", Alone, testLeaderFailover),
		// Short (two standalone instances): the leader killed while changes wait for approval.
		c("23 notifications across a leader kill: changes waiting for approval notified to a receiver pod once each, the leader killed between them", Alone, testNotificationsLeaderKill),
		c("operator upgrade 3: prime -> this build, the leader killed mid-rolling-update: 0 pods replaced or restarted, 0 writes to the fleet", Alone, testOperatorUpgradeFailover),

		// Stuck pods, a lost catalog and a restore in place, each in a namespace and fleet of its own,
		// run together: beside the long cases they pushed the node's two cores past what case 11
		// allows a replaced Tiled replica (its pod Ready 125 s after the deletion, 60 s allowed) and
		// bad input its four minutes (rehearsal of 2026-12-07); one after another they took 238 s,
		// mostly waiting (cases 16 to 18; 20, of the same weight, joined them later). Upgrade
		// 1's window runs on through them.
		c("16 stuck Tiled pod: a template whose containers cannot be created, the pod left alone until the fix, then replaced once (the StatefulSet controller or the operator), Ready again", Together, testStuckTiledPod),
		c("17 stuck PostgreSQL pod: an image typo held by its image check (no pod replaced, the beamline serving, the typo removed with no pod deleted); then a pod that cannot start under its memory limit, left alone until the fix, then deleted once by the operator (StuckPodReplaced, status.replacedPods); the same claim, the data read back", Together, testStuckPostgresPod),
		c("18 lost catalog: a serving beamline's database claim and pod deleted -> Stalled CatalogLost naming the claim and the backup, Tiled at 0, backups suspended, never served empty; RestoreLatest restores, the data read back", Together, testLostCatalog),
		c("20 restore in place: kubectl tiled restore of a serving beamline to an earlier backup (a dry run first, changing nothing), the data read back as it was then", Together, testRestoreInPlace),

		// The long cases in namespaces of their own beside the first fleet's, and the end of the
		// upgrades' window among them.
		c("9 Tiled upgrade 0.2.14 -> newest: backup, migrate once, hold, 2 replicas, failure undone", OwnNamespace, testTiledUpgrade),
		c("10 backups: taken while serving, a lost database restored (claim, S3), corrupt refused, schedule and retention", OwnNamespace, testBackupRestore),
		c("11 streaming: two replicas share the cache; no update lost to a deleted replica or a cache outage; password in no log; off means no cache", OwnNamespace, testStreaming),
		c("12 autoscaling: load scales Tiled 1 -> 2+ on the node's metrics API, back to 1 after the window; off prunes the autoscaler", OwnNamespace, testAutoscaling),
		c("2 Tiled serves an array and a table through Service DNS; catalog in PostgreSQL", FirstFleet, testTiledServes),
		c("3 data survives deleting the Tiled and PostgreSQL pods", FirstFleet, testDataSurvives),
		c("13 observability: kubectl tiled status shows the fleet Ready (text, -o json); the leader's /metrics reports it, the standby's does not", FirstFleet, testObservability),
		c("14 prometheus: a real Prometheus scrapes the operator and each Tiled through the shipped ServiceMonitors; every dashboard query and alert series has data; a stopped database fires TiledInstanceNotReady", FirstFleet, testPrometheus),
		c("15 network policies: the databases and caches refuse every pod but their instance's, Tiled admits its namespace and the ingress controller's only; webhooks answer; a profile turns them off and on; egress restricted keeps DNS and the database", FirstFleet, testNetworkPolicies),
		c("4 rolling change within maxUnavailable; paused freezes it", FirstFleet, testRollingChange),
		c("8 removed beamline keeps its claims (released); re-added finds its data", FirstFleet, testRemoveReadd),
		c("bad input: image pull, PostgreSQL never ready, config Tiled refuses -> named conditions", FirstFleet, testBadInput),
		c("7 mutating webhook on the real path; a bad profile refused at admission", OwnNamespace, testMutatingWebhook),
		c("19 Ready means serving: a stopped external cache and a catalog's tables gone make the beamline not Ready, named in the pod's events; Ready again once repaired", OwnNamespace, testReadyMeansServing),
		c("21 stranded rollout: streaming turned on with a cache image the node cannot pull -> no Tiled pod replaced, every beamline accepts writes, the pull error named; the image fixed -> the fleet converges within its budget, the test deleting no pod", OwnNamespace, testStrandedRollout),
		c("22 maintenance calendar: a Tiled pod-template change waits for a window that opens a minute in (exclusions past and inside it), then rolls within the budget; under approval Manual a change waits for kubectl tiled approve, the approver named; a stale approval refused; each notification received once", OwnNamespace, testMaintenanceCalendar),
		c("operator upgrades 1-3 (end): every object the operator owns at the same resourceVersion from upgrade 1 until 2 minutes after upgrade 3", UpgradeFleet, testOperatorUpgradeWindow),
		c("operator upgrades: the data written under the previous release read back after three upgrades", UpgradeFleet, testOperatorUpgradeData),

		// What every case left behind, then the last operator upgrade.
		c("no Secret value in any container log", Alone, testNoSecretsInLogs),
		c("no forbidden in the operator's log; its peak memory", Alone, testOperatorLog),
		// Last: every fleet left rolls its Tiled pods under the annotated build; the case watches the
		// first fleet's.
		c("operator upgrade 4: a build that renders one more Tiled pod annotation rolls it one beamline at a time (maxUnavailable 1), an Event per instance naming it", Alone, testOperatorUpgradeRendersMore),
	}
}

// TestE2E runs the suite on one cluster. A case that fails is recorded and the next ones still run
// where they can; when a required one fails (the install, the first fleet) nothing after it runs.
func TestE2E(t *testing.T) {
	cases := suite()
	meta := make([]Case, len(cases))
	for i, ec := range cases {
		meta[i] = ec.Case
	}
	parallel := e2eParallel(t)
	t.Logf("%d cases, up to %d at once (E2E_PARALLEL)", len(cases), parallel)
	start := time.Now()
	out := Schedule(meta, parallel, func(i int) bool { return t.Run(cases[i].Name, cases[i].f) })
	figMu.Lock()
	defer figMu.Unlock()
	fig.SuiteSeconds, fig.Parallel = time.Since(start).Seconds(), parallel
	for i, o := range out {
		fig.Cases = append(fig.Cases, CaseResult{Name: cases[i].Name, Passed: o.Passed, Seconds: o.Elapsed.Seconds(),
			Needs: cases[i].Needs.String(), Start: o.Start.Seconds(), Beside: o.Beside, NotRun: !o.Ran})
	}
}

// e2eParallel is E2E_PARALLEL, the most cases at once (ParseParallel).
func e2eParallel(t *testing.T) int {
	n, err := ParseParallel(os.Getenv("E2E_PARALLEL"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testInstall(t *testing.T) {
	// Over the previous release when its case installed it: the first operator upgrade.
	if opup.installed {
		startReviewedRollout(t)
	}
	upgradeOperator(t, fromPrevious, filepath.Join(e.repo, "test/e2e/testdata/install"), "e2e", false)
	var dep appsv1.Deployment
	if err := cl.Get(ctxT(t), types.NamespacedName{Namespace: operatorNS, Name: operatorDep}, &dep); err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas < 2 {
		t.Fatalf("the manager Deployment has %d ready replicas, want 2", dep.Status.ReadyReplicas)
	}
	// The validating webhook (failurePolicy Fail) answers: a dry-run of a valid profile is admitted.
	mustKubectl(t, []byte(namespaceYAML(tenantNS)), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, time.Second, "webhooks answering", func() (bool, string) {
		out, err := kubectl([]byte(profileYAML("1")), "apply", "--server-side", "--dry-run=server", "-f", "-")
		return err == nil, out
	})
}

func testFleetReady(t *testing.T) {
	ctx := ctxT(t)
	det := filepath.Join(e.state, "detector")
	if err := os.MkdirAll(det, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(det, "frame-0001.txt"), []byte("detector frame 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, []byte(detectorYAML(det, tenantNS, "e2e-detector")), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(profileYAML("1")), "apply", "--server-side", "-f", "-")
	rw := watchReadiness(t, tenantNS, clusterName)
	start := time.Now()
	mustKubectl(t, []byte(clusterYAML(false, beamlines)), "apply", "--server-side", "-f", "-")
	fig.Cluster, fig.Beamlines = clusterName, len(beamlines)
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=8m")
	fig.FleetReadySeconds = time.Since(start).Seconds()
	readyAt, clusterReady := rw.stop(t)
	dispatch, report, lastPod := operatorLatency(t, tenantNS, start, readyAt, clusterReady)
	fig.OperatorDispatchSeconds, fig.OperatorReportSeconds = dispatch.Seconds(), report.Seconds()
	t.Logf("fleet of %d Ready %.1fs after apply; the operator's last child write %.2fs after it; last pod Ready (%s) -> TiledCluster Ready %.2fs",
		len(beamlines), fig.FleetReadySeconds, fig.OperatorDispatchSeconds, lastPod, fig.OperatorReportSeconds)
	if report < 0 {
		t.Errorf("TiledCluster %s/%s Ready %.2fs before its last pod %s was Ready", tenantNS, clusterName, -report.Seconds(), lastPod)
	}
	if len(readyAt) != podsPerBeamline*len(beamlines) {
		t.Errorf("the watch saw %d pods Ready by the time the TiledCluster was Ready, want %d: %v", len(readyAt), podsPerBeamline*len(beamlines), sortedKeys(readyAt))
	}

	for _, b := range beamlines {
		var ti v1alpha1.TiledInstance
		if err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: instanceName(b)}, &ti); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(ti.Status.Conditions, "Ready")
		if c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("%s: Ready condition %+v", ti.Name, c)
			continue
		}
		if !strings.HasPrefix(ti.Status.URL, "http://") {
			t.Errorf("%s: status.url %q", ti.Name, ti.Status.URL)
		}
		fig.InstanceReadySeconds[ti.Name] = c.LastTransitionTime.Sub(ti.CreationTimestamp.Time).Seconds()
	}
	pods := podsIn(t, tenantNS)
	if len(pods) != podsPerBeamline*len(beamlines) {
		t.Errorf("%d pods in %s, want %d (Tiled, PostgreSQL and the streaming cache per beamline)", len(pods), tenantNS, podsPerBeamline*len(beamlines))
	}
	fig.RestartsByContainer = map[string]int32{}
	fig.RestartCount = 0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || !podReady(&p) {
			t.Errorf("pod %s: phase %s, ready %t", p.Name, p.Status.Phase, podReady(&p))
		}
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			fig.RestartsByContainer[p.Name+"/"+cs.Name] = cs.RestartCount
			fig.RestartCount += int(cs.RestartCount)
		}
	}
	if fig.RestartCount != 0 {
		t.Errorf("containers restarted %d times during a clean stamp-out (goal 0): %v", fig.RestartCount, fig.RestartsByContainer)
	}
	// The detector mount is readable in chx's Tiled container.
	out := mustKubectl(t, nil, "-n", tenantNS, "exec", instanceName("chx")+"-0", "-c", "tiled", "--", "cat", "/data/detector/frame-0001.txt")
	if !strings.Contains(out, "detector frame 1") {
		t.Errorf("detector file in chx: %q", out)
	}
}

// testFloor applies the fleet's own children, read back from the cluster with ownership and status
// stripped, into a fresh namespace without the operator, and times them until every pod is Ready.
func testFloor(t *testing.T) {
	ctx := ctxT(t)
	mustKubectl(t, []byte(namespaceYAML(floorNS)), "apply", "--server-side", "-f", "-")
	sel := client.MatchingLabels{v1alpha1.LabelCluster: clusterName}
	var docs []string
	docs = append(docs, detectorYAML(filepath.Join(e.state, "detector"), floorNS, "e2e-detector-floor"))
	add := func(list client.ObjectList, apiVersion, kind string) {
		if err := cl.List(ctx, list, client.InNamespace(tenantNS), sel); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		for _, it := range items {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(it)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: m}
			u.SetAPIVersion(apiVersion)
			u.SetKind(kind)
			docs = append(docs, floorCopy(t, u))
		}
	}
	add(&corev1.ConfigMapList{}, "v1", "ConfigMap")
	add(&corev1.SecretList{}, "v1", "Secret")
	add(&corev1.ServiceList{}, "v1", "Service")
	add(&corev1.PersistentVolumeClaimList{}, "v1", "PersistentVolumeClaim")
	add(&appsv1.StatefulSetList{}, "apps/v1", "StatefulSet")
	var want int32
	var sts appsv1.StatefulSetList
	_ = cl.List(ctx, &sts, client.InNamespace(tenantNS), sel)
	for _, s := range sts.Items {
		want += *s.Spec.Replicas
	}
	bundle := []byte(strings.Join(docs, "\n---\n"))
	writeTemp(t, "floor.yaml", bundle)
	start := time.Now()
	mustKubectl(t, bundle, "apply", "--server-side", "--field-manager=floor", "-f", "-")
	eventually(t, 8*time.Minute, 500*time.Millisecond, "floor pods Ready", func() (bool, string) {
		pods := podsIn(t, floorNS)
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) {
				ready++
			}
		}
		return int32(ready) == want, fmt.Sprintf("%d of %d pods Ready", ready, want)
	})
	fig.FloorReadySeconds = time.Since(start).Seconds()
	mustKubectl(t, nil, "delete", "namespace", floorNS, "--wait=false")
	if fig.FleetReadySeconds == 0 || fig.OperatorDispatchSeconds == 0 {
		t.Fatalf("the fleet's stamp-out was not measured (case 1): fleet %.1fs, operator's last child write %.2fs after the apply",
			fig.FleetReadySeconds, fig.OperatorDispatchSeconds)
	}
	// The raw ratio compares two single start-ups of real pods on two shared cores: Tiled's Python
	// start alone varies by seconds between them, so it is a figure, not the verdict. The verdict
	// takes the pods' start from the floor and adds what the operator adds before (its last child
	// write) and after (the last pod Ready to the TiledCluster Ready); both are measured, not assumed.
	fig.OperatorOverFloor = fig.FleetReadySeconds / fig.FloorReadySeconds
	fig.OperatorOverFloorSameStart = 1 + (fig.OperatorDispatchSeconds+fig.OperatorReportSeconds)/fig.FloorReadySeconds
	t.Logf("floor: %.1fs; operator %.1fs; operator/floor %.2f; with the pods' start taken from the floor %.2f",
		fig.FloorReadySeconds, fig.FleetReadySeconds, fig.OperatorOverFloor, fig.OperatorOverFloorSameStart)
	if fig.OperatorOverFloorSameStart > 1.2 {
		t.Errorf("operator/floor with the pods' start taken from the floor = %.2f, goal <= 1.2: the operator's last child write came %.2fs after the apply and the TiledCluster was Ready %.2fs after its last pod",
			fig.OperatorOverFloorSameStart, fig.OperatorDispatchSeconds, fig.OperatorReportSeconds)
	}
}

// floorCopy strips what the apiserver and the operator added and moves the object to the floor
// namespace, including the namespace in Service DNS names inside the config.
func floorCopy(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	obj := u.Object
	delete(obj, "status")
	md := map[string]any{"name": u.GetName(), "namespace": floorNS}
	if l := u.GetLabels(); len(l) > 0 {
		md["labels"] = l
	}
	ann := map[string]any{}
	for k, v := range u.GetAnnotations() {
		if strings.HasPrefix(k, "pv.kubernetes.io/") || strings.HasPrefix(k, "volume.") || strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			continue
		}
		ann[k] = v
	}
	if len(ann) > 0 {
		md["annotations"] = ann
	}
	obj["metadata"] = md
	switch u.GetKind() {
	case "Service":
		unstructured.RemoveNestedField(obj, "spec", "clusterIP")
		unstructured.RemoveNestedField(obj, "spec", "clusterIPs")
	case "PersistentVolumeClaim":
		unstructured.RemoveNestedField(obj, "spec", "volumeName")
	case "ConfigMap":
		// The floor is a fleet's first start: the operator writes the key that says a catalog is
		// expected only once a catalog was migrated (render.CatalogExpectedKey), and with it Tiled's
		// migrate step rightly refuses the floor's new, empty databases.
		unstructured.RemoveNestedField(obj, "data", render.CatalogExpectedKey)
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "."+tenantNS+".svc", "."+floorNS+".svc")
	return s
}

func testTiledServes(t *testing.T) {
	ti := getInstance(t, instanceName("amx"))
	n := fleet.NamesOf(ti)
	runClient(t, "client-write", ti.Status.URL, n.Secret, "write")
	// The catalog is in the managed PostgreSQL.
	out := mustKubectl(t, nil, "-n", tenantNS, "exec", n.Postgres+"-0", "-c", "postgres", "--",
		"psql", "-U", render.DatabaseUser, "-d", render.CatalogDatabase, "-tAc", "select key from nodes order by key")
	for _, k := range []string{"e2e_array", "e2e_table"} {
		if !strings.Contains(out, k) {
			t.Errorf("catalog table nodes in %s has no %q: %q", n.Postgres, k, out)
		}
	}
}

// runClient runs the client pod to completion and requires E2E-OK in its log.
func runClient(t *testing.T, name, url, secret, mode string) {
	t.Helper()
	_, _ = kubectl(nil, "-n", tenantNS, "delete", "pod", name, "--ignore-not-found", "--wait=true")
	mustKubectl(t, []byte(clientPodYAML(name, url, secret, mode)), "apply", "--server-side", "-f", "-")
	var phase corev1.PodPhase
	eventually(t, clientPodTimeout, time.Second, "client pod "+name+" finished", func() (bool, string) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: name}, &p); err != nil {
			return false, err.Error()
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
	})
	logs, _ := kubectl(nil, "-n", tenantNS, "logs", name)
	if phase != corev1.PodSucceeded || !strings.Contains(logs, "E2E-OK") {
		t.Fatalf("client %s (%s) against %s: phase %s\n%s", name, mode, url, phase, logs)
	}
	_, _ = kubectl(nil, "-n", tenantNS, "delete", "pod", name, "--wait=false")
}

func testDataSurvives(t *testing.T) {
	ctx := ctxT(t)
	ti := getInstance(t, instanceName("amx"))
	n := fleet.NamesOf(ti)
	kept := snapshotData(t, n)
	oldUIDs := map[string]types.UID{}
	for _, p := range []string{n.Tiled + "-0", n.Postgres + "-0"} {
		var pod corev1.Pod
		if err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: p}, &pod); err != nil {
			t.Fatal(err)
		}
		oldUIDs[p] = pod.UID
	}
	start := time.Now()
	mustKubectl(t, nil, "-n", tenantNS, "delete", "pod", n.Tiled+"-0", n.Postgres+"-0", "--wait=false")
	eventually(t, 4*time.Minute, 500*time.Millisecond, "pods recreated and Ready", func() (bool, string) {
		for p, old := range oldUIDs {
			var pod corev1.Pod
			if err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: p}, &pod); err != nil {
				return false, err.Error()
			}
			if pod.UID == old || !podReady(&pod) {
				return false, p + " not yet recreated and Ready"
			}
		}
		return true, ""
	})
	fig.PodRecreateSeconds = time.Since(start).Seconds()
	kept.sameClaims(t, "after the pods were deleted")
	kept.sameSecret(t, "after the pods were deleted")
	// The first request after the database restart must succeed too: read straight away.
	runClient(t, "client-read", ti.Status.URL, n.Secret, "read")
}

func testMutatingWebhook(t *testing.T) {
	out := mustKubectl(t, []byte(standaloneYAML("terse", "  tiled: {replicas: 1}\n")), "apply", "--server-side", "--dry-run=server", "-o", "yaml", "-f", "-")
	var ti v1alpha1.TiledInstance
	if err := yaml.Unmarshal([]byte(out), &ti); err != nil {
		t.Fatalf("dry-run output: %v\n%s", err, out)
	}
	if ti.Spec.Tiled == nil || ti.Spec.Tiled.Image != tiledImg() {
		t.Errorf("the dry-run result is not expanded: spec.tiled %+v", ti.Spec.Tiled)
	}
	if ti.Spec.Database == nil || ti.Spec.Database.Managed == nil || ti.Spec.Database.Managed.Image != postgresImg {
		t.Errorf("spec.database not expanded from the profile: %+v", ti.Spec.Database)
	}
	src := ti.Provenance["spec.tiled.image"]
	if !strings.Contains(src, "e2e-defaults") {
		t.Errorf("provenance of spec.tiled.image = %q, want the profile e2e-defaults (all: %v)", src, ti.Provenance)
	}
	bad := strings.Replace(profileYAML("1"), "name: e2e-defaults", "name: e2e-broken", 1) +
		"  expose:\n    ingress:\n      enabled: true\n      hostExpression: \"instance.name +\"\n"
	o, err := kubectl([]byte(bad), "apply", "--server-side", "--dry-run=server", "-f", "-")
	if err == nil {
		t.Fatalf("a profile with a broken expression was admitted:\n%s", o)
	}
	if !strings.Contains(o, "hostExpression") {
		t.Errorf("the refusal does not name the field: %s", o)
	}
}

// unreadySampler counts, every 250 ms, the beamlines whose Tiled pod is missing or not Ready.
type unreadySampler struct {
	mu      sync.Mutex
	max     int
	samples []int
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(t *testing.T, names []string) *unreadySampler {
	pods := make([]string, 0, len(names))
	for _, b := range names {
		pods = append(pods, instanceName(b)+"-0")
	}
	return startSamplerIn(t, tenantNS, pods)
}

// startSamplerIn samples, every 250 ms, how many of the pods of namespace ns are missing, unready or
// being deleted.
func startSamplerIn(t *testing.T, ns string, pods []string) *unreadySampler {
	s := &unreadySampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			unready := 0
			for _, name := range pods {
				var pod corev1.Pod
				err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &pod)
				if err != nil || !podReady(&pod) || pod.DeletionTimestamp != nil {
					unready++
				}
			}
			s.mu.Lock()
			s.samples = append(s.samples, unready)
			if unready > s.max {
				s.max = unready
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *unreadySampler) finish() (int, []int) {
	close(s.stop)
	<-s.done
	// Keep the changes only, so the figure stays short.
	var compact []int
	for i, v := range s.samples {
		if i == 0 || v != s.samples[i-1] {
			compact = append(compact, v)
		}
	}
	return s.max, compact
}

// rolledTo reports how many instances' specs carry the rollout variable value, and whether every
// instance's Tiled StatefulSet runs that value on all replicas, Ready.
func rolledTo(t *testing.T, value, except string) (specs int, done bool, why string) {
	done = true
	for _, b := range beamlines {
		if b == except {
			continue
		}
		ti := getInstance(t, instanceName(b))
		has := false
		if ti.Spec.Tiled != nil {
			for _, ev := range ti.Spec.Tiled.Env {
				if ev.Name == rolloutVar && ev.Value != nil && *ev.Value == value {
					has = true
				}
			}
		}
		if has {
			specs++
		}
		var sts appsv1.StatefulSet
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: fleet.NamesOf(ti).Tiled}, &sts); err != nil {
			return specs, false, err.Error()
		}
		podHas := false
		for _, c := range sts.Spec.Template.Spec.Containers {
			for _, ev := range c.Env {
				if ev.Name == rolloutVar && ev.Value == value {
					podHas = true
				}
			}
		}
		st := sts.Status
		if !has || !podHas || st.ObservedGeneration != sts.Generation || st.UpdateRevision != st.CurrentRevision ||
			st.UpdatedReplicas != *sts.Spec.Replicas || st.ReadyReplicas != *sts.Spec.Replicas {
			done = false
			why = fmt.Sprintf("%s: spec %t, template %t, status %+v", b, has, podHas, st)
		}
	}
	return specs, done, why
}

func testRollingChange(t *testing.T) {
	s := startSampler(t, beamlines)
	start := time.Now()
	// amx is in beamtime: held, it must stay on its template while the others roll.
	const heldBeamline = "amx"
	mustKubectl(t, nil, "-n", tenantNS, "patch", "tc", clusterName, "--type=json", "-p", `[{"op":"add","path":"/spec/instances/0/hold","value":true}]`)
	heldSTS := fleet.NamesOf(getInstance(t, instanceName(heldBeamline))).Tiled
	var before appsv1.StatefulSet
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: heldSTS}, &before); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, []byte(profileYAML("2")), "apply", "--server-side", "-f", "-")
	// Pause as soon as the first instance carries the change.
	eventually(t, 2*time.Minute, 200*time.Millisecond, "rollout started", func() (bool, string) {
		n, _, why := rolledTo(t, "2", heldBeamline)
		return n >= 1, why
	})
	mustKubectl(t, nil, "-n", tenantNS, "patch", "tc", clusterName, "--type=merge", "-p", `{"spec":{"paused":true}}`)
	frozen, _, _ := rolledTo(t, "2", heldBeamline)
	pauseEnd := time.Now().Add(25 * time.Second)
	for time.Now().Before(pauseEnd) {
		n, _, _ := rolledTo(t, "2", heldBeamline)
		if n > frozen {
			t.Errorf("paused cluster went on rolling: %d instances changed, %d when paused", n, frozen)
			break
		}
		time.Sleep(time.Second)
	}
	if frozen == len(beamlines)-1 {
		t.Errorf("every instance had changed before pause took effect; the pause was not exercised")
	}
	mustKubectl(t, nil, "-n", tenantNS, "patch", "tc", clusterName, "--type=merge", "-p", `{"spec":{"paused":false}}`)
	eventually(t, 8*time.Minute, time.Second, "rollout finished but for the held beamline", func() (bool, string) {
		_, done, why := rolledTo(t, "2", heldBeamline)
		return done, why
	})
	// The held beamline kept its pod template; the cluster says so.
	var after appsv1.StatefulSet
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: heldSTS}, &after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || after.Status.CurrentRevision != before.Status.CurrentRevision {
		t.Errorf("the held beamline's StatefulSet changed: generation %d -> %d, revision %s -> %s",
			before.Generation, after.Generation, before.Status.CurrentRevision, after.Status.CurrentRevision)
	}
	eventually(t, time.Minute, time.Second, "the cluster lists the held beamline", func() (bool, string) {
		var tc v1alpha1.TiledCluster
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: clusterName}, &tc); err != nil {
			return false, err.Error()
		}
		return tc.Status.HeldInstances == 1 && len(tc.Status.Held) == 1 && tc.Status.Held[0].Name == instanceName(heldBeamline),
			fmt.Sprintf("heldInstances %d, held %+v", tc.Status.HeldInstances, tc.Status.Held)
	})
	fig.HeldKeptTemplate = true
	// Beamtime over: releasing the hold rolls it within the budget.
	mustKubectl(t, nil, "-n", tenantNS, "patch", "tc", clusterName, "--type=json", "-p", `[{"op":"remove","path":"/spec/instances/0/hold"}]`)
	eventually(t, 8*time.Minute, time.Second, "rollout finished", func() (bool, string) {
		_, done, why := rolledTo(t, "2", "")
		return done, why
	})
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=3m")
	fig.RolloutSeconds = time.Since(start).Seconds()
	fig.RolloutBudget = 1
	fig.RolloutMaxUnready, fig.RolloutUnreadySamples = s.finish()
	if fig.RolloutMaxUnready > fig.RolloutBudget {
		t.Errorf("up to %d instances were unready at once; rollout.maxUnavailable is %d (samples %v)", fig.RolloutMaxUnready, fig.RolloutBudget, fig.RolloutUnreadySamples)
	}
}

// waitNewLeader waits until a replica other than the pod old holds the leader Lease, and returns it.
func waitNewLeader(t *testing.T, old string, timeout, interval time.Duration) coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	eventually(t, timeout, interval, "another replica holds the Lease", func() (bool, string) {
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: operatorNS, Name: leaseName}, &l); err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity == nil {
			return false, "no holder"
		}
		// A released Lease has an empty holder (and a 1 s duration): that is not a new leader yet.
		id, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return id != "" && id != old, "holder " + id
	})
	return l
}

func leaderPod(t *testing.T) string {
	var l coordinationv1.Lease
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: operatorNS, Name: leaseName}, &l); err != nil {
		t.Fatalf("leader Lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil {
		t.Fatal("the leader Lease has no holder")
	}
	id, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return id
}

func testOperatorKilledMidRollout(t *testing.T) {
	s := startSampler(t, beamlines)
	start := time.Now()
	mustKubectl(t, []byte(profileYAML("3")), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, 200*time.Millisecond, "rollout started", func() (bool, string) {
		n, _, why := rolledTo(t, "3", "")
		return n >= 1, why
	})
	leader := leaderPod(t)
	mustKubectl(t, nil, "-n", operatorNS, "delete", "pod", leader, "--grace-period=0", "--force")
	eventually(t, 8*time.Minute, time.Second, "rollout finished after the operator was killed", func() (bool, string) {
		_, done, why := rolledTo(t, "3", "")
		return done, why
	})
	mustKubectl(t, nil, "-n", operatorNS, "rollout", "status", "deploy/"+operatorDep, "--timeout=3m")
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=3m")
	end := time.Now()
	fig.KillRolloutSeconds = end.Sub(start).Seconds()
	fig.KillRolloutMaxUnready, _ = s.finish()
	if fig.KillRolloutMaxUnready > 1 {
		t.Errorf("up to %d instances unready at once with the operator killed; budget 1", fig.KillRolloutMaxUnready)
	}
	// Every write the operator sent in the window, from the apiserver's audit log. Only the objects
	// the change touches may be written: the instances, their Tiled StatefulSets, statuses, events
	// and the leader Lease. Anything else is an unchanged object rewritten.
	evs := auditSince(t, operatorUser, start, end.Add(time.Second))
	fig.KillRolloutRequests = map[string]int{}
	fig.KillRolloutWritesByKind = map[string]int{}
	allowed := map[string]bool{}
	for _, b := range beamlines {
		allowed["tiledinstances/"+instanceName(b)] = true
		allowed["statefulsets/"+fleet.NamesOf(getInstance(t, instanceName(b))).Tiled] = true
	}
	var rewritten []string
	for _, ev := range evs {
		fig.KillRolloutRequests[ev.Verb]++
		if !isWrite(ev.Verb) {
			continue
		}
		rk := resourceKey(ev)
		fig.KillRolloutWritesByKind[rk]++
		switch {
		case ev.ObjectRef == nil:
		// The first fleet's objects and the cluster's (PersistentVolumes): the other fleets left
		// by the cases before this one are judged by their own cases, and the upgrade fleet's by
		// the operator-upgrade window this case runs in (every object at its resourceVersion).
		case ev.ObjectRef.Namespace != "" && ev.ObjectRef.Namespace != tenantNS && ev.ObjectRef.Namespace != operatorNS:
		case ev.ObjectRef.Subresource == "status", rk == "events", rk == "leases", rk == "configmaps" && ev.ObjectRef.Namespace == operatorNS,
			rk == "secrets" && ev.ObjectRef.Namespace == operatorNS, rk == "tokenreviews", rk == "subjectaccessreviews":
		case allowed[rk+"/"+ev.ObjectRef.Name]:
		default:
			rewritten = append(rewritten, ev.Verb+" "+rk+"/"+ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name)
		}
	}
	t.Logf("operator requests during the rollout by verb: %v; writes by resource: %v", fig.KillRolloutRequests, fig.KillRolloutWritesByKind)
	if len(rewritten) > 0 {
		t.Errorf("the operator rewrote %d unchanged objects after its restart: %v", len(rewritten), rewritten)
	}
}

func testLeaderFailover(t *testing.T) {
	old := leaderPod(t)
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := &v1alpha1.TiledProfile{}
			if err := yaml.Unmarshal([]byte(profileYAML("probe")), p); err != nil {
				panic(err)
			}
			p.Name = "webhook-probe"
			// Selected by no cluster: a profile the fleet selected would (rightly) be refused as a
			// conflict with the fleet's own profile; the probe wants an admitted request.
			p.Labels = map[string]string{"e2e": "webhook-probe"}
			calls.Add(1)
			if err := cl.Create(context.Background(), p, client.DryRunAll); err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	start := time.Now()
	mustKubectl(t, nil, "-n", operatorNS, "delete", "pod", old, "--wait=false")
	l := waitNewLeader(t, old, 60*time.Second, 200*time.Millisecond)
	fig.FailoverSeconds = time.Since(start).Seconds()
	mustKubectl(t, nil, "-n", operatorNS, "rollout", "status", "deploy/"+operatorDep, "--timeout=3m")
	close(stop)
	wg.Wait()
	fig.WebhookCallsDuringFailover, fig.WebhookFailuresDuringFailover = int(calls.Load()), int(failures.Load())
	lease := 15.0
	if l.Spec.LeaseDurationSeconds != nil {
		lease = float64(*l.Spec.LeaseDurationSeconds)
	}
	if fig.FailoverSeconds > lease {
		t.Errorf("failover took %.1fs, longer than the lease duration %.0fs", fig.FailoverSeconds, lease)
	}
	if failures.Load() > 0 {
		t.Errorf("%d of %d webhook calls failed during the failover; first: %v", failures.Load(), calls.Load(), firstErr.Load())
	}
	// The pods of the fleet did not notice.
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=2m")
}

func testRemoveReadd(t *testing.T) {
	ctx := ctxT(t)
	ti := getInstance(t, instanceName("bmm"))
	n := fleet.NamesOf(ti)
	runClient(t, "client-write-bmm", ti.Status.URL, n.Secret, "write")
	kept := snapshotData(t, n)
	mustKubectl(t, []byte(clusterYAML(false, []string{"amx", "chx"})), "apply", "--server-side", "-f", "-")
	eventually(t, 3*time.Minute, time.Second, "bmm's instance and workloads removed", func() (bool, string) {
		checks := []struct {
			obj  client.Object
			name string
		}{{&v1alpha1.TiledInstance{}, ti.Name}, {&appsv1.StatefulSet{}, n.Tiled}, {&appsv1.StatefulSet{}, n.Postgres}, {&corev1.ConfigMap{}, n.ConfigMap}, {&corev1.Service{}, n.Tiled}}
		for _, c := range checks {
			err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: c.name}, c.obj)
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%T %s still there (%v)", c.obj, c.name, err)
			}
		}
		return true, ""
	})
	for _, pvc := range kept.sameClaims(t, "of the removed beamline") {
		if pvc.Labels[controllers.LabelReleased] != "true" {
			t.Errorf("claim %s of the removed beamline is not labelled %s=true: %v", pvc.Name, controllers.LabelReleased, pvc.Labels)
		}
	}
	mustKubectl(t, []byte(clusterYAML(false, beamlines)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=6m")
	for _, pvc := range kept.sameClaims(t, "of the re-added beamline") {
		if _, ok := pvc.Labels[controllers.LabelReleased]; ok {
			t.Errorf("claim %s of the re-added beamline still has the label %s", pvc.Name, controllers.LabelReleased)
		}
	}
	kept.sameSecret(t, "of the re-added beamline")
	ti = getInstance(t, instanceName("bmm"))
	runClient(t, "client-read-bmm", ti.Status.URL, n.Secret, "read")
}

// badInputWait bounds the wait for each bad instance's named condition. Alone, the three are named
// within a minute; the case runs beside the long cases (9 to 12), where a pod's start (the
// database's, Tiled's first crash) can take minutes on the node's two cores.
const badInputWait = 4 * time.Minute

// badCase is an instance that cannot run, and what its conditions must name.
type badCase struct {
	name, extra, pod, container string
	reason                      *regexp.Regexp
}

func testBadInput(t *testing.T) {
	cases := []badCase{
		// A registry on loopback that refuses the connection: a real pull that fails, and no
		// lookup of a registry's name outside the node's network namespace.
		{name: "bad-image", extra: "  tiled: {image: \"127.0.0.1:1/local/tiled:does-not-exist\"}\n",
			pod: "bad-image-0", reason: regexp.MustCompile(`ImagePullBackOff|ErrImagePull`)},
		{name: "bad-db", extra: "  database: {managed: {image: \"" + pauseImg + "\"}}\n",
			pod: "bad-db-postgres-0", container: "postgres", reason: regexp.MustCompile(`(?i)readiness|probe|not ready|unready`)},
		{name: "bad-config", extra: "  config: {allow_origins: 5}\n",
			pod: "bad-config-0", container: "tiled", reason: regexp.MustCompile(`CrashLoopBackOff|Error`)},
	}
	start := time.Now()
	for _, c := range cases {
		mustKubectl(t, []byte(standaloneYAML(c.name, c.extra)), "apply", "--server-side", "-f", "-")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			deadline := start.Add(badInputWait)
			var last string
			for {
				ti := getInstance(t, c.name)
				last = ""
				for _, cond := range ti.Status.Conditions {
					last += fmt.Sprintf("%s=%s/%s: %s; ", cond.Type, cond.Status, cond.Reason, cond.Message)
					if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue {
						t.Fatalf("%s is Ready", c.name)
					}
					if (cond.Type == "Stalled" && cond.Status == metav1.ConditionTrue) || (cond.Type == "Ready" && cond.Status == metav1.ConditionFalse) {
						msg := cond.Reason + " " + cond.Message
						if strings.Contains(msg, c.pod) && (c.container == "" || strings.Contains(msg, c.container)) && c.reason.MatchString(msg) {
							t.Logf("%s: %s=%s %s: %s (%.0fs)", c.name, cond.Type, cond.Status, cond.Reason, cond.Message, time.Since(start).Seconds())
							return
						}
					}
				}
				if time.Now().After(deadline) {
					// What the node did with the pod, for whoever reads a failure: its phase and
					// containers' states, and the Events about it.
					pods, _ := kubectl(nil, "-n", tenantNS, "get", "pods", "-l", v1alpha1.LabelAppInstance+"="+c.name, "-o", "wide")
					events, _ := kubectl(nil, "-n", tenantNS, "get", "events", "--field-selector", "involvedObject.name="+c.pod, "--sort-by", ".lastTimestamp")
					states, _ := kubectl(nil, "-n", tenantNS, "get", "pod", c.pod, "-o", "jsonpath={.status.phase} {.status.conditions} {.status.initContainerStatuses} {.status.containerStatuses}")
					t.Fatalf("%s: no condition naming pod %s, container %q and %s within %s; conditions: %s\npods:\n%s\npod %s: %s\nevents:\n%s",
						c.name, c.pod, c.container, c.reason, badInputWait, last, pods, c.pod, states, events)
				}
				time.Sleep(2 * time.Second)
			}
		})
	}
	// Nothing written is lost: the bad instances keep their Secrets, the fleet stays Ready.
	for _, c := range cases {
		ti := getInstance(t, c.name)
		var sec corev1.Secret
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: fleet.NamesOf(ti).Secret}, &sec); err != nil {
			t.Errorf("%s: its Secret: %v", c.name, err)
		}
		mustKubectl(t, nil, "-n", tenantNS, "delete", "tiledinstance", c.name, "--wait=false")
	}
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=2m")
}

func testNoSecretsInLogs(t *testing.T) {
	ctx := ctxT(t)
	var secrets corev1.SecretList
	if err := cl.List(ctx, &secrets, client.InNamespace(tenantNS)); err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, s := range secrets.Items {
		if s.Type == corev1.SecretTypeServiceAccountToken {
			continue
		}
		for _, v := range s.Data {
			if len(v) >= 8 {
				values = append(values, string(v))
			}
			// TILED_SECRET_KEYS is a JSON list; look for each key on its own as well.
			var list []string
			if json.Unmarshal(v, &list) == nil {
				for _, x := range list {
					if len(x) >= 8 {
						values = append(values, x)
					}
				}
			}
		}
	}
	if len(values) == 0 {
		t.Fatal("no Secret values found to look for")
	}
	pods := podsIn(t, tenantNS)
	logged := 0
	for _, p := range pods {
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			logs := []string{}
			if out, err := kubectl(nil, "-n", tenantNS, "logs", p.Name, "-c", cs.Name); err == nil {
				logs = append(logs, out)
			}
			if cs.RestartCount > 0 {
				if out, err := kubectl(nil, "-n", tenantNS, "logs", p.Name, "-c", cs.Name, "--previous"); err == nil {
					logs = append(logs, out)
				}
			}
			for _, l := range logs {
				logged += len(l)
				for _, v := range values {
					if strings.Contains(l, v) {
						t.Errorf("a Secret value appears in the log of %s/%s", p.Name, cs.Name)
					}
				}
			}
		}
	}
	t.Logf("read %d bytes of logs from %d pods, %d Secret values looked for", logged, len(pods), len(values))
	if logged == 0 {
		t.Error("no log output read at all; the check would prove nothing")
	}
}

// eventIntoDeletedNamespace says whether the log line l is the event broadcaster's report of an
// Event refused because its namespace was being deleted (a case's cleanup): refused as "unable to
// create new content in namespace ... because it is being terminated", and then, when the same
// Event repeats, as a patch of the series the broadcaster believes it created. Neither is a
// permission the operator lacks; every other forbidden fails the check.
func eventIntoDeletedNamespace(t *testing.T, l string) bool {
	_, js, ok := strings.Cut(l, "] ")
	if !ok {
		return false
	}
	var entry struct {
		Logger string `json:"logger"`
		Event  struct {
			Namespace string `json:"namespace"`
		} `json:"event"`
	}
	if json.Unmarshal([]byte(js), &entry) != nil || entry.Logger != "events" || entry.Event.Namespace == "" {
		return false
	}
	if strings.Contains(l, "because it is being terminated") {
		return true
	}
	var ns corev1.Namespace
	err := cl.Get(context.Background(), types.NamespacedName{Name: entry.Event.Namespace}, &ns)
	return apierrors.IsNotFound(err) || (err == nil && ns.DeletionTimestamp != nil)
}

func testOperatorLog(t *testing.T) {
	out := mustKubectl(t, nil, "-n", operatorNS, "logs", "-l", "control-plane=controller-manager", "--all-containers", "--prefix", "--tail=-1")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(strings.ToLower(l), "forbidden") && !eventIntoDeletedNamespace(t, l) {
			t.Errorf("the operator's log has a forbidden: %s", l)
		}
	}
	// Peak memory of the operator's pods, from their memory cgroups on the node.
	pods := podsIn(t, operatorNS)
	for _, p := range pods {
		if v, err := podPeakMemory(p.UID); err == nil {
			mib := float64(v) / (1 << 20)
			if mib > fig.OperatorPeakMemoryMiB {
				fig.OperatorPeakMemoryMiB = mib
			}
		} else {
			t.Logf("peak memory of %s: %v", p.Name, err)
		}
	}
	if fig.OperatorPeakMemoryMiB == 0 {
		t.Error("could not read the operator pods' peak memory")
	}
	t.Logf("operator pod peak memory %.1f MiB", fig.OperatorPeakMemoryMiB)
}

// podPeakMemory reads memory.max_usage_in_bytes (cgroup v1) of a pod's cgroup.
func podPeakMemory(uid types.UID) (int64, error) {
	var found string
	root := "/sys/fs/cgroup/memory"
	want := "pod" + string(uid)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || found != "" {
			return filepath.SkipDir
		}
		if d.IsDir() && strings.Count(strings.TrimPrefix(p, root), "/") > 4 {
			return filepath.SkipDir
		}
		if d.IsDir() && (d.Name() == want || d.Name() == strings.ReplaceAll(want, "-", "_")) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		return 0, fmt.Errorf("no memory cgroup %s under %s", want, root)
	}
	b, err := os.ReadFile(filepath.Join(found, "memory.max_usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// keptData is what must outlive pods and beamlines: the data claims by UID and the Secret's values.
type keptData struct {
	ns     string
	claims map[string]types.UID
	secret string
	data   map[string][]byte
}

// snapshotData records the data claims and the Secret of an instance's names in the first fleet's
// namespace.
func snapshotData(t *testing.T, n names.Objects) keptData {
	t.Helper()
	return snapshotDataIn(t, tenantNS, n)
}

// snapshotDataIn is snapshotData in namespace ns.
func snapshotDataIn(t *testing.T, ns string, n names.Objects) keptData {
	t.Helper()
	k := keptData{ns: ns, claims: map[string]types.UID{}, secret: n.Secret}
	for _, c := range []string{n.DataClaim, n.DatabaseClaim} {
		var pvc corev1.PersistentVolumeClaim
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: k.ns, Name: c}, &pvc); err != nil {
			t.Fatal(err)
		}
		k.claims[c] = pvc.UID
	}
	var sec corev1.Secret
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: n.Secret}, &sec); err != nil {
		t.Fatal(err)
	}
	k.data = sec.Data
	return k
}

// sameClaims fails unless every recorded claim still exists with its UID, and returns them.
func (k keptData) sameClaims(t *testing.T, when string) []corev1.PersistentVolumeClaim {
	t.Helper()
	var out []corev1.PersistentVolumeClaim
	for c, uid := range k.claims {
		var pvc corev1.PersistentVolumeClaim
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: k.ns, Name: c}, &pvc); err != nil {
			t.Fatalf("claim %s %s: %v", c, when, err)
		}
		if pvc.UID != uid {
			t.Errorf("claim %s %s was recreated: uid %s, was %s", c, when, pvc.UID, uid)
		}
		out = append(out, pvc)
	}
	return out
}

// sameSecret fails when a recorded Secret value changed (a regenerated password or key).
func (k keptData) sameSecret(t *testing.T, when string) {
	t.Helper()
	var sec corev1.Secret
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: k.ns, Name: k.secret}, &sec); err != nil {
		t.Fatal(err)
	}
	for key, v := range k.data {
		if string(sec.Data[key]) != string(v) {
			t.Errorf("Secret %s key %s changed %s", k.secret, key, when)
		}
	}
}

func getInstance(t *testing.T, name string) *v1alpha1.TiledInstance {
	t.Helper()
	var ti v1alpha1.TiledInstance
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: name}, &ti); err != nil {
		t.Fatalf("TiledInstance %s: %v", name, err)
	}
	return &ti
}

func podsIn(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "client-") {
			continue
		}
		out = append(out, p)
	}
	return out
}

func podReady(p *corev1.Pod) bool { return podstatus.Ready(p) }
