//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The operator-upgrade cases (issue 31; docs/upgrading.md, "What an operator upgrade is tested
// against"). The suite installs the previous release (hack/previous-release, built by
// hack/images/build.sh from its own tree, installed from its own config/default), stamps out a
// fleet with it and writes data, then upgrades the operator three times under that running fleet:
//
//  1. previous release -> this checkout (the install case: this checkout's config/default applied
//     over the previous release's);
//  2. this checkout -> a prime build of it (the same code as another version);
//  3. prime -> this checkout, the leader killed in the middle of the manager's rolling update.
//
// (and, last in the suite, to a build that renders one more Tiled pod annotation, on the first
// fleet: operator_render_test.go).
//
// After each: no Tiled, PostgreSQL or cache pod replaced or restarted, no StatefulSet revision
// changed, no write by the operator to any object of the fleet's namespace but status and Events
// (the apiserver's audit log), and, from when the new manager leads and four reads agree, every
// object the operator owns at the same resourceVersion for at least two minutes (cluster-api's
// clusterctl upgrade test). Upgrades 1 to 3 share one window: it opens when the first one's manager
// settles, each later upgrade checks that nothing changed since then, and its end ("(end)") checks
// again at least two minutes after the last one settled — every upgrade watched for two minutes
// or more, and the time between them too. The window runs beside the other cases, which never
// touch the upgrade fleet's namespace, so the upgrades can run one after another, before the long
// cases, instead of each waiting out a window of its own.
//
// The one exception to "no write": the upgrade from the previous release may make the writes
// listed, each with its reason, in test/e2e/testdata/operator-upgrade-writes.yaml (what this release
// deliberately adds to a running fleet, e.g. the instances' NetworkPolicies), reviewed for the
// commit of hack/previous-release the file records. Every write must match a listed pattern and
// every pattern must match a write; a list recorded for another commit is not applied and fails
// the case (upgradewrites.go). The upgrades to the prime build and back write nothing.
const (
	opupNS       = "e2e-opup"
	opupCluster  = "opup"
	opupFacility = "e2e-opup"
	// opupWindow is how long every owned object must keep its resourceVersion after an upgrade.
	opupWindow = 2 * time.Minute
	// fromPrevious labels the upgrade from the previous release, the only one whose writes are
	// judged against the reviewed list.
	fromPrevious = "previous release -> this build"
)

// opupBeamlines of the upgrade fleet: two, so that the fleet costs the node little through the cases
// its windows span.
var opupBeamlines = []string{"o1", "o2"}

// opup is what the operator-upgrade cases hand on to one another.
var opup struct {
	installed  bool              // the previous release stamped the fleet out
	data       map[string]string // instance -> the E2E-DATA line read back after writing
	pods       map[string]podMark
	revisions  map[string]string // StatefulSet -> currentRevision/updateRevision
	label      string            // the latest upgrade
	from       time.Time         // when that upgrade's apply was sent
	windowFrom time.Time         // when the window's first upgrade's new manager led and four reads agreed
	windowRVs  map[string]string // every owned object's resourceVersion then
	lastFrom   time.Time         // when the latest upgrade's new manager led and four reads agreed
	// rolled are the StatefulSets the reviewed list rolls in the upgrade from the previous release
	// (ReviewedWrite.Rolls), and rollSampler samples their pods' readiness from before its apply.
	rolled      map[string]bool
	rollSampler *unreadySampler
}

// podMark is what says a pod is the same one: its UID and its containers' restarts.
type podMark struct {
	uid      types.UID
	restarts int32
}

func previousTree(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("E2E_PREVIOUS_RELEASE")
	if dir == "" {
		t.Fatal("E2E_PREVIOUS_RELEASE is not set: hack/e2e/run.sh names the previous release's tree (hack/images/build.sh extracts it)")
	}
	if _, err := os.Stat(filepath.Join(dir, "config/default/kustomization.yaml")); err != nil {
		t.Fatalf("the previous release's tree %s: %v", dir, err)
	}
	return dir
}

// installOverlay writes a kustomization under the state folder that is configDefault with the
// manager's image pointed at docker.io/local/tiled-operator:tag (as test/e2e/testdata/install is
// for this checkout), and returns its folder.
func installOverlay(t *testing.T, name, configDefault, tag string) string {
	t.Helper()
	dir := filepath.Join(e.state, "install-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, configDefault)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: ghcr.io/bluesky/tiled-operator
  newName: docker.io/local/tiled-operator
  newTag: %s
`, rel, tag)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func managerImage(tag string) string { return "docker.io/local/tiled-operator:" + tag }

// testPreviousRelease installs the previous release from its own config/default, stamps out the
// upgrade fleet with it, writes data to every beamline and records the fleet's pods.
func testPreviousRelease(t *testing.T) {
	tree := previousTree(t)
	mustKubectl(t, nil, "apply", "--server-side", "-k", installOverlay(t, "previous", filepath.Join(tree, "config/default"), "previous"))
	mustKubectl(t, nil, "-n", operatorNS, "rollout", "status", "deploy/"+operatorDep, "--timeout=4m")
	mustKubectl(t, []byte(namespaceYAML(opupNS)), "apply", "--server-side", "-f", "-")
	profile := profileYAMLIn(opupNS, "opup-defaults", opupFacility, tiledImg())
	eventually(t, 2*time.Minute, time.Second, "the previous release's webhooks answering", func() (bool, string) {
		out, err := kubectl([]byte(profile), "apply", "--server-side", "-f", "-")
		return err == nil, out
	})
	mustKubectl(t, []byte(opupClusterYAML()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", opupNS, "wait", "--for=condition=Ready", "tc/"+opupCluster, "--timeout=8m")
	var runs []clientRun
	for i, b := range opupBeamlines {
		runs = append(runs, clientRun{pod: "opup-write-" + b, instance: upgInstance(opupCluster, b), image: tiledImg(), mode: "write", seed: 100 + i})
	}
	opup.data = runClientsIn(t, opupNS, runs)
	for inst, line := range opup.data {
		checkWritten(t, inst, line)
	}
	opup.pods, opup.revisions = fleetPods(t), fleetRevisions(t)
	if len(opup.pods) != podsPerBeamline*len(opupBeamlines) {
		t.Fatalf("%d pods in %s under the previous release, want %d: %v", len(opup.pods), opupNS, podsPerBeamline*len(opupBeamlines), sortedKeys(opup.pods))
	}
	opup.installed = true
	t.Logf("previous release %s: %d beamlines Ready with data, %d pods", filepath.Base(tree), len(opupBeamlines), len(opup.pods))
}

func opupClusterYAML() string {
	return upgradeClusterSpec{ns: opupNS, name: opupCluster, facility: opupFacility, beamlines: opupBeamlines}.yaml()
}

// upgradeOperator applies the install overlay dir and waits for the manager's rolling update to end
// and for a pod of the new image to lead. With failover, the leader is deleted as soon as the first
// new pod is Ready and an old one still runs: in the middle of the rolling update. It returns when
// the new manager led.
func upgradeOperator(t *testing.T, label, dir, tag string, failover bool) {
	t.Helper()
	opup.label, opup.from = label, time.Now()
	image := managerImage(tag)
	mustKubectl(t, nil, "apply", "--server-side", "-k", dir)
	if failover {
		var killed string
		eventually(t, 3*time.Minute, 200*time.Millisecond, "a new manager pod Ready while an old one runs", func() (bool, string) {
			newReady, old := 0, 0
			for _, p := range operatorPods(t) {
				switch {
				case p.Spec.Containers[0].Image != image:
					old++
				case podReady(&p):
					newReady++
				}
			}
			return newReady >= 1 && old >= 1, fmt.Sprintf("%d new Ready, %d old", newReady, old)
		})
		killed = leaderPod(t)
		mustKubectl(t, nil, "-n", operatorNS, "delete", "pod", killed, "--grace-period=0", "--force")
		t.Logf("%s: leader %s killed in the middle of the rolling update", label, killed)
	}
	mustKubectl(t, nil, "-n", operatorNS, "rollout", "status", "deploy/"+operatorDep, "--timeout=4m")
	eventually(t, 2*time.Minute, 200*time.Millisecond, "a manager of "+image+" leads", func() (bool, string) {
		var l coordinationv1.Lease
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: operatorNS, Name: leaseName}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return false, fmt.Sprint("no holder ", err)
		}
		id, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		for _, p := range operatorPods(t) {
			if p.Name == id {
				return p.Spec.Containers[0].Image == image && p.DeletionTimestamp == nil, id + " runs " + p.Spec.Containers[0].Image
			}
		}
		return false, "holder " + id + " is no manager pod"
	})
	t.Logf("%s: the new manager leads %.1fs after the apply", label, time.Since(opup.from).Seconds())
}

func operatorPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := cl.List(context.Background(), &l, client.InNamespace(operatorNS), client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// testOperatorUpgraded checks the fleet right after an upgrade: the same pods, no restart, the same
// StatefulSet revisions, no write to its objects but status and Events; then starts the window.
func testOperatorUpgraded(t *testing.T) {
	if !opup.installed {
		t.Fatal("the previous release did not stamp out the upgrade fleet (see its case)")
	}
	// The objects as the previous release stored them are read and written through this release's
	// CRDs: typed reads, and the same apply again (admitted by this release's webhooks).
	for _, o := range []client.Object{&v1alpha1.TiledProfile{}, &v1alpha1.TiledCluster{}} {
		name := "opup-defaults"
		if _, ok := o.(*v1alpha1.TiledCluster); ok {
			name = opupCluster
		}
		if err := cl.Get(ctxT(t), types.NamespacedName{Namespace: opupNS, Name: name}, o); err != nil {
			t.Errorf("%T %s/%s stored by the previous release: %v", o, opupNS, name, err)
		}
	}
	for _, b := range opupBeamlines {
		getInstanceIn(t, opupNS, upgInstance(opupCluster, b))
	}
	mustKubectl(t, []byte(profileYAMLIn(opupNS, "opup-defaults", opupFacility, tiledImg())), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(opupClusterYAML()), "apply", "--server-side", "-f", "-")
	if opup.label == fromPrevious && opup.rollSampler != nil {
		waitReviewedRollout(t)
	}
	// The owned objects settle first (the upgrade from the previous release creates objects, which
	// takes the new leader a few seconds), then the fleet is compared: the writes counted run to
	// the start of the window, so that every write the reviewed list expects has been made.
	rvs, from := stableOwnedRVs(t)
	opup.lastFrom = from
	if opup.windowRVs == nil {
		// The window opens: from here until opupWindow after the last upgrade it spans, every owned
		// object keeps this resourceVersion.
		opup.windowRVs, opup.windowFrom = rvs, from
	} else if changed := fleet.Changed(opup.windowRVs, rvs); len(changed) > 0 {
		// A window is open (an earlier upgrade's): this upgrade, and everything since that one's
		// manager settled, changed nothing.
		t.Errorf("%s: %d owned objects changed since the window opened %.0fs ago: %v", opup.label, len(changed), time.Since(opup.windowFrom).Seconds(), changed)
	}
	checkFleetUndisturbed(t, time.Now())
	if opup.label == fromPrevious && len(opup.rolled) > 0 {
		// The later upgrades replace nothing: they are judged against the pods the rollout made.
		opup.pods, opup.revisions = fleetPods(t), fleetRevisions(t)
	}
	t.Logf("%s: %d owned objects stable from %.1fs after the apply", opup.label, len(rvs), from.Sub(opup.from).Seconds())
}

// startReviewedRollout, called before the upgrade from the previous release, reads which of the
// upgrade fleet's StatefulSets the reviewed list rolls (ReviewedWrite.Rolls: a pod template this
// release renders differently) and samples their pods' readiness from then on. None: nothing rolls,
// and no pod may be replaced.
func startReviewedRollout(t *testing.T) {
	t.Helper()
	r, err := LoadReviewedWrites(filepath.Join(e.repo, ReviewedWritesFile))
	if err != nil {
		return // judged, and reported, with the upgrade's writes
	}
	prev, err := PreviousReleaseCommit(filepath.Join(e.repo, PreviousReleaseFile))
	if err != nil {
		return
	}
	rolling := r.Rolling(prev, sortedKeys(opup.revisions))
	if len(rolling) == 0 {
		return
	}
	opup.rolled = map[string]bool{}
	var pods []string
	for _, sts := range rolling {
		opup.rolled[sts] = true
	}
	for name := range opup.pods {
		if opup.rolled[statefulSetOf(name)] {
			pods = append(pods, name)
		}
	}
	sort.Strings(pods)
	opup.rollSampler = startSamplerIn(t, opupNS, pods)
	t.Logf("the reviewed list rolls %v in the upgrade from the previous release: their pods %v sampled", rolling, pods)
}

// waitReviewedRollout waits for the rollout the reviewed list declares to end: each rolled
// StatefulSet on a new revision, every replica updated and Ready, every instance Ready with no
// rollout pending; and checks that it kept the cluster's budget (maxUnavailable 1).
func waitReviewedRollout(t *testing.T) {
	t.Helper()
	s := opup.rollSampler
	opup.rollSampler = nil
	eventually(t, 8*time.Minute, time.Second, "the reviewed rollout of "+strings.Join(sortedKeys(opup.rolled), ", "), func() (bool, string) {
		var why []string
		for name := range opup.rolled {
			var sts appsv1.StatefulSet
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: opupNS, Name: name}, &sts); err != nil {
				return false, err.Error()
			}
			st, want := sts.Status, int32(1)
			if sts.Spec.Replicas != nil {
				want = *sts.Spec.Replicas
			}
			rev := st.CurrentRevision + "/" + st.UpdateRevision
			if st.ObservedGeneration != sts.Generation || st.CurrentRevision != st.UpdateRevision || rev == opup.revisions[name] ||
				st.UpdatedReplicas != want || st.ReadyReplicas != want {
				why = append(why, fmt.Sprintf("%s: revisions %s (were %s), %d updated, %d ready of %d", name, rev, opup.revisions[name], st.UpdatedReplicas, st.ReadyReplicas, want))
			}
		}
		for _, b := range opupBeamlines {
			ti := getInstanceIn(t, opupNS, upgInstance(opupCluster, b))
			if !isTrue(ti, "Ready") || ti.Status.PendingRollout != nil {
				why = append(why, fmt.Sprintf("%s: Ready %+v, pendingRollout %v", ti.Name, condition(ti, "Ready"), ti.Status.PendingRollout != nil))
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
	maxUnready, samples := s.finish()
	figMu.Lock()
	fig.OperatorUpgradeReviewedRolloutMaxUnready = maxUnready
	figMu.Unlock()
	t.Logf("%s: the reviewed rollout ended %.1fs after the apply; unready pods sampled: %v", opup.label, time.Since(opup.from).Seconds(), samples)
	if maxUnready > 1 {
		t.Errorf("%s: up to %d pods of the rolled StatefulSets unready at once; the cluster's rollout.maxUnavailable is 1 (samples %v)", opup.label, maxUnready, samples)
	}
}

// statefulSetOf is the StatefulSet a pod of the upgrade fleet belongs to: its name without the
// ordinal.
func statefulSetOf(pod string) string {
	if i := strings.LastIndex(pod, "-"); i > 0 {
		return pod[:i]
	}
	return pod
}

// checkFleetUndisturbed compares the fleet with what the previous release left and counts the
// operator's writes to it since the current upgrade's apply.
func checkFleetUndisturbed(t *testing.T, to time.Time) {
	t.Helper()
	replaced, restarts, rolled := 0, 0, 0
	now := fleetPods(t)
	rolls := func(sts string) bool { return opup.label == fromPrevious && opup.rolled[sts] }
	for name, was := range opup.pods {
		is, ok := now[name]
		switch {
		case ok && is.uid != was.uid && rolls(statefulSetOf(name)):
			// Replaced by the rollout the reviewed list declares: a new pod, never restarted.
			rolled++
			if is.restarts != 0 {
				restarts += int(is.restarts)
				t.Errorf("%s: pod %s/%s, replaced by the reviewed rollout, restarted %d times", opup.label, opupNS, name, is.restarts)
			}
		case !ok || is.uid != was.uid:
			replaced++
			t.Errorf("%s: pod %s/%s replaced (uid %s, now %v)", opup.label, opupNS, name, was.uid, is.uid)
		case is.restarts != was.restarts:
			restarts += int(is.restarts - was.restarts)
			t.Errorf("%s: pod %s/%s restarted %d times", opup.label, opupNS, name, is.restarts-was.restarts)
		}
	}
	for name := range now {
		if _, ok := opup.pods[name]; !ok {
			t.Errorf("%s: a new pod %s/%s", opup.label, opupNS, name)
		}
	}
	for sts, rev := range fleetRevisions(t) {
		if opup.revisions[sts] != rev && !rolls(sts) {
			t.Errorf("%s: StatefulSet %s/%s revisions %s, were %s", opup.label, opupNS, sts, rev, opup.revisions[sts])
		}
	}
	writes := childWrites(t, opup.from, to)
	unexpected, reviewed := writes, 0
	if opup.label == fromPrevious {
		unexpected, reviewed = judgeReviewedWrites(t, writes)
	}
	figMu.Lock()
	fig.OperatorUpgradePodsReplaced += replaced
	fig.OperatorUpgradeReviewedPodsReplaced = max(fig.OperatorUpgradeReviewedPodsReplaced, rolled)
	fig.OperatorUpgradeRestarts += restarts
	fig.OperatorUpgradeChildWrites += len(unexpected)
	// The "(end)" check counts the upgrade's writes again from its apply: the largest count is the
	// upgrade's.
	fig.OperatorUpgradeReviewedWrites = max(fig.OperatorUpgradeReviewedWrites, reviewed)
	figMu.Unlock()
	if len(unexpected) > 0 && opup.label != fromPrevious {
		t.Errorf("%s: the operator wrote %d times to the fleet's objects: %v", opup.label, len(unexpected), unexpected)
	}
}

// judgeReviewedWrites compares the writes of the upgrade from the previous release with the reviewed
// list (ReviewedWritesFile), fails the case for each problem (a write on no pattern, a pattern that
// matched no write, a list reviewed for another previous release) and returns the writes on no
// pattern (all of them when the list was not applied) and the number on the list.
func judgeReviewedWrites(t *testing.T, writes []string) ([]string, int) {
	t.Helper()
	r, err := LoadReviewedWrites(filepath.Join(e.repo, ReviewedWritesFile))
	if err != nil {
		t.Errorf("%s: the reviewed list: %v; every write counts as unexpected: %v", opup.label, err, writes)
		return writes, 0
	}
	prev, err := PreviousReleaseCommit(filepath.Join(e.repo, PreviousReleaseFile))
	if err != nil {
		t.Errorf("%s: %v; every write counts as unexpected: %v", opup.label, err, writes)
		return writes, 0
	}
	v := r.Judge(prev, writes)
	for _, p := range v.Problems() {
		t.Errorf("%s: %s", opup.label, p)
	}
	if v.Stale != "" {
		t.Logf("%s: the operator's %d writes to the fleet, for the review: %v", opup.label, len(writes), writes)
	}
	t.Logf("%s: %d writes on the reviewed list of %s (by pattern: %v), %d not on it", opup.label, v.Reviewed(), r.PreviousRelease[:12], v.Matched, len(v.Unexpected))
	return v.Unexpected, v.Reviewed()
}

// childWrites lists the operator's writes in [from, to) to objects of the upgrade fleet's namespace
// other than status and Events (its Lease and Events live in its own namespace), from the audit log.
func childWrites(t *testing.T, from, to time.Time) []string {
	t.Helper()
	var out []string
	for _, ev := range auditSince(t, operatorUser, from, to) {
		if !isWrite(ev.Verb) || ev.ObjectRef == nil {
			continue
		}
		rk := resourceKey(ev)
		// The namespace's objects, and its PersistentVolumes (cluster-scoped, named after it).
		inFleet := ev.ObjectRef.Namespace == opupNS || ev.ObjectRef.Namespace == "" && strings.HasPrefix(ev.ObjectRef.Name, opupNS+"-")
		if !inFleet {
			continue
		}
		if ev.ObjectRef.Subresource == "status" || rk == "events" {
			continue
		}
		out = append(out, ev.Verb+" "+rk+"/"+ev.ObjectRef.Name)
	}
	sort.Strings(out)
	return out
}

// testOperatorUpgradeWindow ends the window the upgrades before it opened: at least opupWindow after
// the last of them settled, every owned object still at the resourceVersion it had when the first
// settled, no pod replaced, no write to the fleet since the last upgrade's apply.
func testOperatorUpgradeWindow(t *testing.T) {
	if opup.windowRVs == nil {
		t.Fatal("no window was started (the upgrade case before this one failed)")
	}
	defer func() { opup.windowRVs = nil }()
	if wait := opupWindow - time.Since(opup.lastFrom); wait > 0 {
		t.Logf("%s: waiting %.0fs more for the two-minute window", opup.label, wait.Seconds())
		time.Sleep(wait)
	}
	now := ownedRVs(t)
	// The shortest time any upgrade of the window was watched after it settled: the last one's.
	stable := time.Since(opup.lastFrom).Seconds()
	if changed := fleet.Changed(opup.windowRVs, now); len(changed) > 0 {
		t.Errorf("%s: %d owned objects changed in the window (opened %.0fs ago, %.0fs after the last upgrade): %v", opup.label, len(changed), time.Since(opup.windowFrom).Seconds(), stable, changed)
	} else {
		figMu.Lock()
		if fig.OperatorUpgradeRVStableSeconds == 0 || stable < fig.OperatorUpgradeRVStableSeconds {
			fig.OperatorUpgradeRVStableSeconds = stable
		}
		figMu.Unlock()
	}
	checkFleetUndisturbed(t, time.Now())
	t.Logf("%s: %d owned objects at the same resourceVersion for %.0fs (%.0fs after the last upgrade); 0 pods replaced", opup.label, len(now), time.Since(opup.windowFrom).Seconds(), stable)
}

// testOperatorUpgradePrime upgrades this checkout's manager to its prime build.
func testOperatorUpgradePrime(t *testing.T) {
	upgradeOperator(t, "this build -> prime", installOverlay(t, "prime", filepath.Join(e.repo, "config/default"), "prime"), "prime", false)
	testOperatorUpgraded(t)
}

// testOperatorUpgradeFailover goes back from the prime build to this checkout's, killing the
// leader in the middle of the rolling update.
func testOperatorUpgradeFailover(t *testing.T) {
	upgradeOperator(t, "prime -> this build, leader killed mid-roll", filepath.Join(e.repo, "test/e2e/testdata/install"), "e2e", true)
	testOperatorUpgraded(t)
}

// testOperatorUpgradeData reads back, under this build after three operator upgrades, what was
// written under the previous release.
func testOperatorUpgradeData(t *testing.T) {
	if !opup.installed {
		t.Fatal("the previous release did not stamp out the upgrade fleet")
	}
	var runs []clientRun
	for _, b := range opupBeamlines {
		runs = append(runs, clientRun{pod: "opup-read-" + b, instance: upgInstance(opupCluster, b), image: tiledImg(), mode: "read"})
	}
	for inst, line := range runClientsIn(t, opupNS, runs) {
		if line != opup.data[inst] {
			t.Errorf("%s: read after the operator upgrades\n  %s\nwritten under the previous release\n  %s", inst, line, opup.data[inst])
		}
	}
	if t.Failed() {
		t.Logf("namespace %s is kept for inspection", opupNS)
		return
	}
	// Done with the upgrade fleet: the later cases get the node's two cores.
	_, _ = kubectl(nil, "delete", "namespace", opupNS, "--wait=false")
}

// fleetPods marks every pod of the upgrade fleet's namespace but the test's client pods.
func fleetPods(t *testing.T) map[string]podMark {
	t.Helper()
	out := map[string]podMark{}
	for _, p := range podsIn(t, opupNS) {
		if strings.HasPrefix(p.Name, "opup-write-") || strings.HasPrefix(p.Name, "opup-read-") {
			continue
		}
		var r int32
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			r += cs.RestartCount
		}
		out[p.Name] = podMark{uid: p.UID, restarts: r}
	}
	return out
}

func fleetRevisions(t *testing.T) map[string]string {
	t.Helper()
	var l appsv1.StatefulSetList
	if err := cl.List(context.Background(), &l, client.InNamespace(opupNS)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range l.Items {
		out[s.Name] = s.Status.CurrentRevision + "/" + s.Status.UpdateRevision
	}
	return out
}

// ownedRVs maps every object of the upgrade fleet's namespace that the operator owns (each child
// kind it renders, labelled as managed by it, the NetworkPolicies among them, and the TiledInstances)
// and its PersistentVolumes, "Kind/name", to its resourceVersion.
func ownedRVs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	var gvks []schema.GroupVersionKind
	for _, k := range controllers.ChildKinds() {
		gvk, err := apiutil.GVKForObject(k, cl.Scheme())
		if err != nil {
			t.Fatal(err)
		}
		gvks = append(gvks, gvk)
	}
	// The instances' NetworkPolicies (issue 33), whether or not ChildKinds lists them: the window
	// must see them, which the upgrade from the previous release creates.
	if np := networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"); !slices.Contains(gvks, np) {
		gvks = append(gvks, np)
	}
	for _, gvk := range gvks {
		listRVs(t, out, gvk.Kind, gvk.GroupVersion().WithKind(gvk.Kind+"List"), client.InNamespace(opupNS),
			client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	}
	listRVs(t, out, "TiledInstance", v1alpha1.GroupVersion.WithKind("TiledInstanceList"), client.InNamespace(opupNS))
	pvs := map[string]string{}
	listRVs(t, pvs, "PersistentVolume", corev1.SchemeGroupVersion.WithKind("PersistentVolumeList"),
		client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	for k, v := range pvs {
		if strings.HasPrefix(k, "PersistentVolume/"+opupNS+"-") {
			out[k] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("no object of %s owned by the operator", opupNS)
	}
	return out
}

// listRVs lists the metadata of the objects of listGVK and files each resourceVersion under
// "kind/name".
func listRVs(t *testing.T, into map[string]string, kind string, listGVK schema.GroupVersionKind, opts ...client.ListOption) {
	t.Helper()
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(listGVK)
	if err := cl.List(context.Background(), l, opts...); err != nil {
		t.Fatalf("listing %s: %v", listGVK.Kind, err)
	}
	for _, o := range l.Items {
		into[kind+"/"+o.Name] = o.ResourceVersion
	}
}

// stableOwnedRVs reads the owned objects until four reads a second apart agree, and returns them and
// when the first of the four was read.
func stableOwnedRVs(t *testing.T) (map[string]string, time.Time) {
	t.Helper()
	var last map[string]string
	var since time.Time
	agree := 0
	deadline := time.Now().Add(3 * time.Minute)
	for agree < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the operator's objects kept changing for 3 minutes after the new manager led; last changes: %v", opup.label, fleet.Changed(last, ownedRVs(t)))
		}
		at := time.Now()
		now := ownedRVs(t)
		if last != nil && len(fleet.Changed(last, now)) == 0 {
			agree++
		} else {
			agree, since = 1, at
		}
		last = now
		if agree < 4 {
			time.Sleep(time.Second)
		}
	}
	return last, since
}
