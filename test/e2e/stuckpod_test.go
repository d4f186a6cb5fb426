//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The stuck-pod cases: a pod that fails on a broken template and is not Ready is left on it by a
// StatefulSet with OrderedReady pod management once the template is fixed (Kubernetes' "forced
// rollback"); the operator deletes it, once, with an Event StuckPodReplaced and a record in
// status.replacedPods (controllers/tiledinstance_stuckpods.go). Each case makes a namespace and a
// one-beamline fleet of its own, breaks one StatefulSet's template through the TiledCluster,
// checks that nothing deletes the failing pod while the template stays broken, fixes the template
// and follows the pod's replacement to the instance Ready again. The test itself deletes none of
// the instance's pods: the audit log says who did.
//
// The Tiled StatefulSet is broken with an environment variable from a Secret key that does not
// exist (the container cannot be created), not with an image: a new spec.tiled.image is a Tiled
// upgrade, whose check Job on the new image fails (UpgradeCheckFailed) while the StatefulSet keeps
// the image that serves, so an image typo never reaches its template. Its pod management is
// Parallel, under which the StatefulSet controller deletes an unavailable pod of an old revision
// itself (Kubernetes 1.37's stateful_set_control.go, with or without MaxUnavailableStatefulSet):
// the case requires the pod replaced exactly once, by the StatefulSet controller or the operator,
// and records which. The PostgreSQL StatefulSet (OrderedReady) cannot be broken with an image
// either: a new database image is run by an image check Job first (controllers/
// tiledinstance_imagecheck.go), and one that cannot be pulled (from loopback) leaves the StatefulSet
// and its serving pod as they are, which the case checks first (no pod replaced, the beamline
// serving, the typo removed with no pod deleted). It is then broken with a memory limit its
// container cannot start under (no new image, so no check: the kubelet starts it, and it is
// killed): there only the operator can replace the pod, and the case requires it did, once.

const (
	stuckTiledNS    = "e2e-stuck-tiled"
	stuckPostgresNS = "e2e-stuck-postgres"
	stuckCluster    = "stk"
	stuckBeamline   = "s1"
	// stuckWait bounds each wait of the cases (the fleet, the failure named, the instance Ready
	// again): alone each takes well under a minute; beside the long cases a pod's start can take
	// minutes on the node's two cores.
	stuckWait = 5 * time.Minute
	// stuckHold bounds the watch of a stuck pod left alone (holdWhileStuck).
	stuckHold = 30 * time.Second
	// stuckEnv is the Tiled overrides that break its pod template: the kubelet cannot create the
	// containers (CreateContainerConfigError), the Secret does not exist.
	stuckEnv = "env: [{name: E2E_STUCK, valueFrom: {secretKeyRef: {name: e2e-stuck-missing, key: typo}}}]"
	// stuckPostgresImage is a PostgreSQL image on a registry at a loopback address that refuses the
	// connection: a real pull that fails, and nothing contacted outside the node. Its image check
	// fails, and the database is never handed it.
	stuckPostgresImage = "127.0.0.1:1/local/postgres:typo"
	// stuckPostgresResources are the database overrides' resources that break its pod after it
	// starts: a memory limit PostgreSQL (and its entrypoint) cannot start under, killed by the
	// kernel (OOMKilled, or the runtime's StartError), then CrashLoopBackOff.
	stuckPostgresResources = "{limits: {memory: 8Mi}, requests: {memory: 8Mi}}"
	// statefulSetController is the StatefulSet controller's user in the audit log (kube-controller-
	// manager runs with --use-service-account-credentials, hack/node/cluster.sh).
	statefulSetController = "system:serviceaccount:kube-system:statefulset-controller"
)

func stuckClusterSpec(ns string) upgradeClusterSpec {
	return upgradeClusterSpec{ns: ns, name: stuckCluster, facility: ns, beamlines: []string{stuckBeamline}}
}

// stuckFleet makes namespace ns (deleted at the end unless the case failed), the profile of
// profileYAMLIn (facility: the namespace's name) and a one-beamline TiledCluster, and waits for it
// Ready; it returns the instance.
func stuckFleet(t *testing.T, ns string) *v1alpha1.TiledInstance {
	t.Helper()
	mustKubectl(t, []byte(namespaceYAML(ns)), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("namespace %s is kept for inspection", ns)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", ns, "--wait=false")
	})
	requireFreeVolumes(t, 2) // data and database
	mustKubectl(t, []byte(profileYAMLIn(ns, "stuck-defaults", ns, tiledImg())), "apply", "--server-side", "-f", "-")
	start := time.Now()
	mustKubectl(t, []byte(stuckClusterSpec(ns).yaml()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tc/"+stuckCluster, "--timeout="+stuckWait.String())
	t.Logf("fleet %s Ready %.1fs after apply", ns, time.Since(start).Seconds())
	return getInstanceIn(t, ns, upgInstance(stuckCluster, stuckBeamline))
}

// stuckPod is a pod failing on the current revision of its StatefulSet.
type stuckPod struct {
	name     string
	uid      types.UID
	revision string
	reason   string         // podstatus.Failing's: the kubelet's, when it was seen stuck
	reasons  *regexp.Regexp // the kubelet's reasons of this failure (they alternate: ErrImagePull, ImagePullBackOff)
}

// waitStuck waits until the instance names the failure of pod on its Stalled, Ready or
// DatabaseReady condition (reason and message matching want), and returns the pod: failing (podstatus.Failing) on the
// update revision of its StatefulSet sts, the template as it is now.
func waitStuck(t *testing.T, ns, instance, sts, pod string, want, reasons *regexp.Regexp) stuckPod {
	t.Helper()
	var named string
	eventually(t, stuckWait, time.Second, instance+" names the failure of pod "+pod, func() (bool, string) {
		ti := getInstanceIn(t, ns, instance)
		var all []string
		for _, c := range ti.Status.Conditions {
			all = append(all, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
			if (c.Type == "Stalled" && c.Status == metav1.ConditionTrue) || (c.Type == "Ready" && c.Status == metav1.ConditionFalse) ||
				(c.Type == "DatabaseReady" && c.Status == metav1.ConditionFalse) {
				if msg := c.Reason + " " + c.Message; strings.Contains(msg, pod) && want.MatchString(msg) {
					named = all[len(all)-1]
					return true, ""
				}
			}
		}
		return false, strings.Join(all, "; ")
	})
	t.Logf("%s: %s", instance, named)
	var s stuckPod
	eventually(t, time.Minute, time.Second, "pod "+pod+" failing on the update revision of StatefulSet "+sts, func() (bool, string) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pod}, &p); err != nil {
			return false, err.Error()
		}
		rev, err := updateRevisionOf(ns, sts)
		if err != nil {
			return false, err.Error()
		}
		reason, container := podstatus.Failing(&p)
		s = stuckPod{name: pod, uid: p.UID, revision: p.Labels[appsv1.ControllerRevisionHashLabelKey], reason: reason, reasons: reasons}
		return p.DeletionTimestamp == nil && reasons.MatchString(reason) && s.revision == rev,
			fmt.Sprintf("revision %s (update revision %s), failing %q (container %q), deleting %v", s.revision, rev, reason, container, p.DeletionTimestamp != nil)
	})
	return s
}

// updateRevisionOf is the StatefulSet's status.updateRevision once its controller has seen its
// generation.
func updateRevisionOf(ns, name string) (string, error) {
	var sts appsv1.StatefulSet
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &sts); err != nil {
		return "", err
	}
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" {
		return "", fmt.Errorf("StatefulSet %s: generation %d not observed yet (%d)", name, sts.Generation, sts.Status.ObservedGeneration)
	}
	return sts.Status.UpdateRevision, nil
}

// holdWhileStuck watches the stuck pod until the kubelet has updated its status twice (each update
// reaches the operator, which judges the pod again: a pull retried, ErrImagePull and
// ImagePullBackOff in turn), or for stuckHold when it does not (a container that cannot be created
// keeps its status), and fails if it is replaced or deleted meanwhile.
func holdWhileStuck(t *testing.T, ns string, s stuckPod) {
	t.Helper()
	deadline := time.Now().Add(stuckHold)
	var last string
	changes := 0
	for changes < 2 && time.Now().Before(deadline) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: s.name}, &p); err != nil {
			t.Fatalf("the stuck pod %s: %v", s.name, err)
		}
		if p.UID != s.uid || p.DeletionTimestamp != nil {
			t.Fatalf("pod %s was replaced or is being deleted while its template is unchanged: uid %s (was %s), deletion %v", s.name, p.UID, s.uid, p.DeletionTimestamp)
		}
		if last != "" && p.ResourceVersion != last {
			changes++
		}
		last = p.ResourceVersion
		time.Sleep(time.Second)
	}
	t.Logf("pod %s left alone while stuck: %d status updates seen", s.name, changes)
}

// checkLeftAlone checks that the stuck pod is still there, the same pod, with no StuckPodReplaced
// Event: while the template is the one it fails on, a new pod would fail alike.
func checkLeftAlone(t *testing.T, ns, instance string, s stuckPod) {
	t.Helper()
	var p corev1.Pod
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: s.name}, &p); err != nil {
		t.Fatalf("the stuck pod %s: %v", s.name, err)
	}
	if p.UID != s.uid || p.DeletionTimestamp != nil {
		t.Errorf("pod %s was replaced or is being deleted while its template is unchanged: uid %s (was %s), deletion %v", s.name, p.UID, s.uid, p.DeletionTimestamp)
	}
	if n, notes := instanceEvents(t, ns, instance, controllers.ReasonStuckPodReplaced); n != 0 {
		t.Errorf("%d %s Events while the template is unchanged: %v", n, controllers.ReasonStuckPodReplaced, notes)
	}
}

// replacedWatch follows an instance through a watch from before the fix: the records of its
// status.replacedPods (a record goes once its pod is Ready on the revision, within seconds, so
// polling could miss it) and when it was first Ready at a generation after the fix.
type replacedWatch struct {
	mu          sync.Mutex
	records     map[string]v1alpha1.ReplacedPod // by pod, the last record seen
	readyAt     time.Time
	closedEarly bool
	cancel      context.CancelFunc
	done        chan struct{}
}

// watchReplaced starts following instance ns/name; afterGeneration is its generation before the
// fix.
func watchReplaced(t *testing.T, ns, name string, afterGeneration int64) *replacedWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &replacedWatch{records: map[string]v1alpha1.ReplacedPod{}, cancel: cancel, done: make(chan struct{})}
	wi, err := cl.Watch(ctx, &v1alpha1.TiledInstanceList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatalf("watch TiledInstances in %s: %v", ns, err)
	}
	go func() {
		defer close(w.done)
		open := followWatch(ctx, wi, func(obj any, at time.Time) {
			ti, ok := obj.(*v1alpha1.TiledInstance)
			if !ok || ti.Name != name {
				return
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, r := range ti.Status.ReplacedPods {
				w.records[r.Pod] = r
			}
			if w.readyAt.IsZero() && ti.Generation > afterGeneration && isTrue(ti, "Ready") {
				w.readyAt = at
			}
		})
		w.mu.Lock()
		w.closedEarly = !open
		w.mu.Unlock()
	}()
	return w
}

// stop ends the watch and returns the records seen and when the instance was first Ready after the
// fix (zero when the watch did not see it).
func (w *replacedWatch) stop(t *testing.T) (map[string]v1alpha1.ReplacedPod, time.Time) {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closedEarly {
		t.Logf("the watch on the TiledInstance was closed by the server before the instance was Ready: records seen until then %v", w.records)
	}
	return w.records, w.readyAt
}

// fixAndWait applies the cluster without the breaking overrides and waits for the instance Ready
// at a later generation with pod Ready and not the stuck one; it returns when the fix was applied,
// the watch's records and when the instance was Ready.
func fixAndWait(t *testing.T, ns, instance string, s stuckPod) (fixAt, readyAt time.Time, records map[string]v1alpha1.ReplacedPod) {
	t.Helper()
	gen := getInstanceIn(t, ns, instance).Generation
	w := watchReplaced(t, ns, instance, gen)
	fixAt = time.Now()
	mustKubectl(t, []byte(stuckClusterSpec(ns).yaml()), "apply", "--server-side", "-f", "-")
	eventually(t, stuckWait, 500*time.Millisecond, instance+" Ready again, pod "+s.name+" replaced and Ready", func() (bool, string) {
		ti := getInstanceIn(t, ns, instance)
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: s.name}, &p); err != nil {
			return false, err.Error()
		}
		why := fmt.Sprintf("generation %d (was %d), Ready %+v; pod %s uid %s (stuck %s) Ready %v", ti.Generation, gen, condition(ti, "Ready"), s.name, p.UID, s.uid, podReady(&p))
		return ti.Generation > gen && isTrue(ti, "Ready") && p.UID != s.uid && podReady(&p), why
	})
	polledAt := time.Now()
	records, readyAt = w.stop(t)
	if readyAt.IsZero() {
		readyAt = polledAt
	}
	return fixAt, readyAt, records
}

// podDeletions are the requests to delete a pod of ns received in [from, to), but the kubelet's (it
// removes a pod whose graceful deletion has ended: not a decision to replace it).
func podDeletions(t *testing.T, ns string, from, to time.Time) []auditEvent {
	t.Helper()
	return auditWhere(t, from, to, func(ev auditEvent) bool {
		r := ev.ObjectRef
		return ev.Verb == "delete" && r != nil && r.Resource == "pods" && r.Subresource == "" && r.Namespace == ns &&
			!strings.HasPrefix(ev.User.Username, "system:node:")
	})
}

// deletionsBy counts the deletions that succeeded by user, and lists every deletion (done or not)
// for the log.
func deletionsBy(evs []auditEvent) (done map[string]int, all []string) {
	done = map[string]int{}
	for _, ev := range evs {
		code := int32(0)
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		all = append(all, fmt.Sprintf("%s %s by %s: %d", ev.RequestReceived.Format(time.RFC3339Nano), ev.ObjectRef.Name, ev.User.Username, code))
		if ev.succeeded() {
			done[ev.User.Username]++
		}
	}
	return done, all
}

// checkReplaced judges the replacement of the stuck pod s after the fix at fixAt (the pod
// deletions of the audit log through now, the Events, the records the watch saw) and returns who deleted it. Exactly one
// deletion of the pod succeeded, by the StatefulSet controller or the operator (only the operator
// when operatorOnly); every deletion the operator made has its Event and its record, for the
// StatefulSet's update revision.
func checkReplaced(t *testing.T, ns, instance, sts string, s stuckPod, deletions []auditEvent, fixAt time.Time, records map[string]v1alpha1.ReplacedPod, operatorOnly bool) (by string, operatorDeletes int) {
	t.Helper()
	done, all := deletionsBy(within(deletions, s.name, "", fixAt, time.Now()))
	t.Logf("deletions of pod %s after the fix: %v", s.name, all)
	total := 0
	for user, n := range done {
		total += n
		by = user
		if user != operatorUser && (operatorOnly || user != statefulSetController) {
			t.Errorf("pod %s deleted %d times by %s", s.name, n, user)
		}
	}
	if total != 1 {
		t.Errorf("pod %s deleted %d times after the fix (%v), want exactly once", s.name, total, done)
	}
	operatorDeletes = done[operatorUser]
	if operatorOnly && operatorDeletes != 1 {
		t.Errorf("the operator deleted the stuck pod %s %d times, want once (a StatefulSet with OrderedReady pod management never replaces it)", s.name, operatorDeletes)
	}
	// The Event is sent after the deletion; the recorder writes it asynchronously.
	var notes []string
	eventually(t, 30*time.Second, 500*time.Millisecond, fmt.Sprintf("%d %s Event(s)", operatorDeletes, controllers.ReasonStuckPodReplaced), func() (bool, string) {
		var n int
		n, notes = instanceEvents(t, ns, instance, controllers.ReasonStuckPodReplaced)
		return n == operatorDeletes, fmt.Sprintf("%d: %v", n, notes)
	})
	for _, note := range notes {
		if !strings.Contains(note, "deleted pod "+s.name) || !strings.Contains(note, s.revision) {
			t.Errorf("%s Event %q does not name pod %s and its revision %s", controllers.ReasonStuckPodReplaced, note, s.name, s.revision)
		}
	}
	rev, err := updateRevisionOf(ns, sts)
	if err != nil {
		t.Fatal(err)
	}
	r, recorded := records[s.name]
	switch {
	case operatorDeletes > 0 && !recorded:
		t.Errorf("the operator deleted pod %s but status.replacedPods never recorded it (records seen: %v)", s.name, records)
	case operatorDeletes > 0 && (r.Revision != rev || !s.reasons.MatchString(r.Reason) || r.Time == nil):
		t.Errorf("status.replacedPods recorded %+v, want pod %s, revision %s, reason %s, a time", r, s.name, rev, s.reasons)
	case operatorDeletes == 0 && recorded:
		t.Errorf("status.replacedPods recorded %+v, but the operator deleted no pod", r)
	}
	if recorded {
		t.Logf("status.replacedPods recorded %s: revision %s, reason %s, at %s", r.Pod, r.Revision, r.Reason, r.Time)
	}
	return by, operatorDeletes
}

// checkNoDeletionBefore checks, among the pod deletions of the audit log, that nothing deleted the
// stuck pod between when it was seen stuck and the fix, and that the operator asked to delete no
// pod of the namespace at all before the fix.
func checkNoDeletionBefore(t *testing.T, s stuckPod, deletions []auditEvent, start, stuckAt, fixAt time.Time) {
	t.Helper()
	if done, all := deletionsBy(within(deletions, s.name, "", stuckAt, fixAt)); len(done) > 0 {
		t.Errorf("pod %s deleted while its template was unchanged: %v", s.name, all)
	}
	if _, all := deletionsBy(within(deletions, "", operatorUser, start, fixAt)); len(all) > 0 {
		t.Errorf("the operator asked to delete pods before the fix: %v", all)
	}
}

// within are the events of evs on pod name (any when "") by user (any when "") received in
// [from, to).
func within(evs []auditEvent, name, user string, from, to time.Time) []auditEvent {
	var out []auditEvent
	for _, ev := range evs {
		if (name == "" || ev.ObjectRef.Name == name) && (user == "" || ev.User.Username == user) &&
			!ev.RequestReceived.Before(from) && ev.RequestReceived.Before(to) {
			out = append(out, ev)
		}
	}
	return out
}

// stuckCase is one stuck-pod case: its namespace, the StatefulSet it breaks and how, and how the
// failure is named.
type stuckCase struct {
	ns string
	// statefulSet names the StatefulSet broken among the instance's.
	statefulSet func(names.Objects) string
	// breakIt changes the cluster's spec so that the StatefulSet's pods cannot start.
	breakIt func(*upgradeClusterSpec)
	// named matches the instance's condition naming the failure; reasons the kubelet's reasons of
	// the pod's failure.
	named, reasons *regexp.Regexp
	// operatorOnly: only the operator may replace the stuck pod (OrderedReady pod management).
	operatorOnly bool
}

// stuckRun is what run measured: from the fixed spec applied to the instance Ready, who deleted
// the stuck pod, and how many times the operator did.
type stuckRun struct {
	seconds         float64
	by              string
	operatorDeletes int
}

// run makes the fleet, calls before, breaks the template, waits for the pod stuck and checks it left
// alone, calls whileStuck, fixes the template, waits for the instance Ready and judges the pod's
// replacement (the audit log, the Events, status.replacedPods).
func (c stuckCase) run(t *testing.T, before, whileStuck func(ti *v1alpha1.TiledInstance)) stuckRun {
	t.Helper()
	start := time.Now()
	ti := stuckFleet(t, c.ns)
	sts := c.statefulSet(fleet.NamesOf(ti))
	pod := sts + "-0"
	before(ti)

	// 1. The template broken: the StatefulSet replaces the Ready pod with one that cannot start;
	// the instance names it.
	broken := stuckClusterSpec(c.ns)
	c.breakIt(&broken)
	breakAt := time.Now()
	mustKubectl(t, []byte(broken.yaml()), "apply", "--server-side", "-f", "-")
	s := waitStuck(t, c.ns, ti.Name, sts, pod, c.named, c.reasons)
	stuckAt := time.Now()
	t.Logf("pod %s stuck on revision %s (%s), %.1fs after the break", s.name, s.revision, s.reason, stuckAt.Sub(breakAt).Seconds())

	// 2. Left alone while the template is unchanged.
	holdWhileStuck(t, c.ns, s)
	checkLeftAlone(t, c.ns, ti.Name, s)
	whileStuck(ti)

	// 3. The template fixed: the stuck pod replaced once, the instance Ready again.
	fixAt, readyAt, records := fixAndWait(t, c.ns, ti.Name, s)
	deletions := podDeletions(t, c.ns, start, time.Now())
	checkNoDeletionBefore(t, s, deletions, start, stuckAt, fixAt)
	by, n := checkReplaced(t, c.ns, ti.Name, sts, s, deletions, fixAt, records, c.operatorOnly)
	r := stuckRun{seconds: readyAt.Sub(fixAt).Seconds(), by: by, operatorDeletes: n}
	t.Logf("pod %s: fixed spec -> instance Ready in %.1fs; the pod deleted by %s", pod, r.seconds, by)
	return r
}

func testStuckTiledPod(t *testing.T) {
	c := stuckCase{
		ns:          stuckTiledNS,
		statefulSet: func(n names.Objects) string { return n.Tiled },
		breakIt:     func(s *upgradeClusterSpec) { s.tiledExtra = map[string]string{stuckBeamline: stuckEnv} },
		named:       regexp.MustCompile(podstatus.ReasonContainerConfig),
		reasons:     regexp.MustCompile(`^CreateContainerConfigError$`),
	}
	r := c.run(t, func(*v1alpha1.TiledInstance) {}, func(*v1alpha1.TiledInstance) {})
	figMu.Lock()
	fig.StuckPodReplacedSeconds, fig.StuckPodDeletedBy = r.seconds, r.by
	figMu.Unlock()
}

func testStuckPostgresPod(t *testing.T) {
	c := stuckCase{
		ns:          stuckPostgresNS,
		statefulSet: func(n names.Objects) string { return n.Postgres },
		breakIt: func(s *upgradeClusterSpec) {
			s.database = map[string]string{stuckBeamline: "managed: {resources: " + stuckPostgresResources + "}"}
		},
		named:        regexp.MustCompile(podstatus.ReasonCrashLoop + "|" + podstatus.ReasonContainerConfig),
		reasons:      regexp.MustCompile(`^(CrashLoopBackOff|OOMKilled|StartError|Error|CreateContainerError)$`),
		operatorOnly: true,
	}
	var written string
	var kept keptData
	var typoReplaced int
	r := c.run(t, func(ti *v1alpha1.TiledInstance) {
		// Data in every database (catalog, SQL storage) and on the data claim, before the break.
		written = runClientsIn(t, c.ns, []clientRun{{pod: "stuck-write", instance: ti.Name, image: tiledImg(), mode: "write", seed: 7}})[ti.Name]
		checkWritten(t, ti.Name, written)
		kept = snapshotDataIn(t, c.ns, fleet.NamesOf(ti))
		// An image typo first: its check holds it, and no pod is replaced.
		typoReplaced = imageTypoHeld(t, c.ns, ti, written)
		kept.sameClaims(t, "after the image typo was removed")
	}, func(*v1alpha1.TiledInstance) {
		kept.sameClaims(t, "while the database pod is stuck")
	})
	kept.sameClaims(t, "after the stuck database pod was replaced")
	kept.sameSecret(t, "after the stuck database pod was replaced")
	ti := getInstanceIn(t, c.ns, upgInstance(stuckCluster, stuckBeamline))
	read := runClientsIn(t, c.ns, []clientRun{{pod: "stuck-read", instance: ti.Name, image: tiledImg(), mode: "read", seed: 7}})[ti.Name]
	if read != written {
		t.Errorf("data read back after the stuck database pod was replaced:\n%s\nwritten before:\n%s", read, written)
	}
	figMu.Lock()
	fig.StuckPostgresPodReplacedSeconds, fig.StuckPostgresPodOperatorDeletes = r.seconds, r.operatorDeletes
	fig.ImageTypoPodsReplaced = &typoReplaced
	figMu.Unlock()
}

// servingPods are the UIDs of the instance's Tiled and PostgreSQL pods, by name.
func servingPods(t *testing.T, ns, instance string) map[string]types.UID {
	t.Helper()
	var list corev1.PodList
	if err := cl.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelAppInstance: instance}); err != nil {
		t.Fatalf("pods of %s: %v", instance, err)
	}
	out := map[string]types.UID{}
	for _, p := range list.Items {
		switch p.Labels[v1alpha1.LabelAppComponent] {
		case render.ComponentServer, render.ComponentDatabase:
			if p.DeletionTimestamp == nil {
				out[p.Name] = p.UID
			}
		}
	}
	return out
}

// imageTypoHeld sets the beamline's database.managed.image to stuckPostgresImage (a loopback
// registry that refuses the pull) on the serving beamline ti and checks that its image check
// holds it: the instance names the PostgreSQL StatefulSet, the image and the check pod's reason
// (ImageCheckPending), the StatefulSet keeps its generation and the database pod keeps serving (a
// Tiled client reads the data written); then the typo is removed: the check goes, the condition
// too, the instance Ready at the new generation, and no pod of the beamline was deleted by anyone
// (audit log; the check Job's own pod, removed with it, aside). It returns how many of the
// beamline's Tiled and PostgreSQL pods were replaced meanwhile (figure image_typo_pods_replaced, 0).
func imageTypoHeld(t *testing.T, ns string, ti *v1alpha1.TiledInstance, written string) int {
	t.Helper()
	n := fleet.NamesOf(ti)
	var sts appsv1.StatefulSet
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: n.Postgres}, &sts); err != nil {
		t.Fatal(err)
	}
	gen := sts.Generation
	pods := servingPods(t, ns, ti.Name)
	if _, ok := pods[n.Postgres+"-0"]; !ok {
		t.Fatalf("no PostgreSQL pod among %v", pods)
	}
	job := render.ImageCheckJobName(n, render.ImageCheck{Component: render.ComponentDatabase, Image: stuckPostgresImage})
	typo := stuckClusterSpec(ns)
	typo.database = map[string]string{stuckBeamline: fmt.Sprintf("managed: {image: %q}", stuckPostgresImage)}
	typoAt := time.Now()
	mustKubectl(t, []byte(typo.yaml()), "apply", "--server-side", "-f", "-")
	eventually(t, stuckWait, time.Second, ti.Name+" says the database's new image waits for its check", func() (bool, string) {
		cur := getInstanceIn(t, ns, ti.Name)
		c := condition(cur, controllers.ConditionImageCheckPending)
		if c == nil {
			return false, "no " + controllers.ConditionImageCheckPending + " condition"
		}
		ok := c.Status == metav1.ConditionTrue && c.Reason == podstatus.ReasonImagePull &&
			strings.Contains(c.Message, "StatefulSet "+n.Postgres) && strings.Contains(c.Message, stuckPostgresImage) && strings.Contains(c.Message, job)
		return ok, c.Reason + ": " + c.Message
	})
	t.Logf("%s: %s", ti.Name, condition(getInstanceIn(t, ns, ti.Name), controllers.ConditionImageCheckPending).Message)
	cur := getInstanceIn(t, ns, ti.Name)
	if !isTrue(cur, "Ready") {
		t.Errorf("the instance is not Ready while the image typo waits for its check: %+v", condition(cur, "Ready"))
	}
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: n.Postgres}, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.Generation != gen {
		t.Errorf("StatefulSet %s changed (generation %d, was %d) while its new image had not passed its check", n.Postgres, sts.Generation, gen)
	}
	read := runClientsIn(t, ns, []clientRun{{pod: "typo-read", instance: ti.Name, image: tiledImg(), mode: "read", seed: 7}})[ti.Name]
	if read != written {
		t.Errorf("data read while the image typo waits for its check:\n%s\nwritten before:\n%s", read, written)
	}

	// The typo removed: the check goes, the instance converges, no pod replaced.
	mustKubectl(t, []byte(stuckClusterSpec(ns).yaml()), "apply", "--server-side", "-f", "-")
	eventually(t, stuckWait, time.Second, ti.Name+" Ready with the typo removed, its check gone", func() (bool, string) {
		cur := getInstanceIn(t, ns, ti.Name)
		var j batchv1.Job
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: job}, &j)
		jobGone := apierrors.IsNotFound(err) || (err == nil && j.DeletionTimestamp != nil)
		c := condition(cur, controllers.ConditionImageCheckPending)
		return cur.Status.ObservedGeneration == cur.Generation && isTrue(cur, "Ready") && c == nil && jobGone,
			fmt.Sprintf("observed generation %d of %d, Ready %+v, %s %+v, check Job gone %v", cur.Status.ObservedGeneration, cur.Generation, condition(cur, "Ready"), controllers.ConditionImageCheckPending, c, jobGone)
	})
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: n.Postgres}, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.Generation != gen {
		t.Errorf("StatefulSet %s changed (generation %d, was %d) by an image typo and its removal", n.Postgres, sts.Generation, gen)
	}
	replaced := 0
	after := servingPods(t, ns, ti.Name)
	for name, uid := range pods {
		if after[name] != uid {
			replaced++
			t.Errorf("pod %s replaced by an image typo and its removal (uid %s, was %s)", name, after[name], uid)
		}
	}
	var serving []auditEvent
	for _, ev := range podDeletions(t, ns, typoAt, time.Now()) {
		// The beamline's pods only: not the check Job's own pod, nor the test's client pod.
		if strings.HasPrefix(ev.ObjectRef.Name, ti.Name+"-") && !strings.HasPrefix(ev.ObjectRef.Name, job+"-") {
			serving = append(serving, ev)
		}
	}
	if _, all := deletionsBy(serving); len(all) > 0 {
		t.Errorf("pods deleted while an image typo came and went: %v", all)
	}
	t.Logf("image typo %s held by its check and removed: %d pods of the beamline replaced", stuckPostgresImage, replaced)
	return replaced
}
