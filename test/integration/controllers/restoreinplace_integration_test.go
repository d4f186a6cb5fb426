package controllers_test

import (
	"maps"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/inplace"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The restore in place of a serving instance on the real apiserver (the upgrade tests' fixture; the
// test plays the kubelet for the Jobs' pods and the StatefulSet controller for Tiled's).

const (
	// olderWhole and newerWhole are the whole backups on the fixture's target.
	olderWhole = "20261203T023000Z"
	newerWhole = "20261204T023000Z"
	// preRestoreName matches the name of the backup a restore in place takes first.
	preRestoreName = `^\d{8}T\d{6}Z-pre-restore$`
)

// withWholeBackups gives the fixture's instance a claim target and two whole backups listed in
// status.backup.available, and returns the CronJob.
func (f *upgradeFixture) withWholeBackups() *batchv1.CronJob {
	cj := f.withTarget()
	bj := f.jobFromCronJob(cj, time.Now().Add(-time.Minute), "")
	f.finish(bj, 0, `{"name":"`+newerWhole+`","instance":"`+f.ns+`/`+f.name+`","tiledVersion":"0.2.14","seconds":3,"bytes":2048,"files":[],"available":"`+
		newerWhole+`:2048,`+olderWhole+`:1024"}`)
	f.lastBackup(bj.Name)
	waitQuiet(f.t, f.op)
	return cj
}

// requestRestore sets the restore annotations, as `kubectl tiled restore` does.
func (f *upgradeFixture) requestRestore(backupName, id, by string) {
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		a := maps.Clone(ti.Annotations)
		if a == nil {
			a = map[string]string{}
		}
		a[tiledv1alpha1.AnnotationRestore] = backupName
		a[tiledv1alpha1.AnnotationRestoreRequest] = id
		a[tiledv1alpha1.AnnotationRestoreRequestedBy] = by
		ti.Annotations = a
	})
}

// inPlace waits until status.inPlaceRestore is request id at phase p and returns it.
func (f *upgradeFixture) inPlace(id string, p tiledv1alpha1.InPlaceRestorePhase) *tiledv1alpha1.InPlaceRestoreStatus {
	var st *tiledv1alpha1.InPlaceRestoreStatus
	f.g.Eventually(func(g Gomega) {
		st = f.instance(g).Status.InPlaceRestore
		g.Expect(st).NotTo(BeNil(), "no status.inPlaceRestore")
		g.Expect(st.Request).To(Equal(id))
		g.Expect(st.Phase).To(Equal(p), "message: %s", st.Message)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	return st
}

// TestRestoreInPlace: a serving instance with two whole backups is asked to restore the older one.
// The databases are backed up first on the target, pruning nothing, while Tiled serves and the
// CronJob is suspended; then Tiled stops, the restore Job replaces the databases (refusing a backup
// from a newer Tiled), a restarted operator carries on without a second Job or Event, Tiled starts,
// and status.inPlaceRestore and one Normal Event name who restored what. Reconciles after it (and
// the annotations left in place) restore nothing again; a new request id restores again.
func TestRestoreInPlace(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "restore-in-place")
	f.withWholeBackups()
	target := backupTarget(f.ns, f.name)
	t.Logf("instance ready with backups after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()

	// The request: the databases are backed up as they are, Tiled serves.
	f.requestRestore(olderWhole, "r1", "alice@example.org")
	st := f.inPlace("r1", tiledv1alpha1.InPlaceRestoreBackingUp)
	g.Expect(st.Backup).To(Equal(olderWhole))
	g.Expect(st.RequestedBy).To(Equal("alice@example.org"))
	g.Expect(st.Target).To(Equal(target))
	g.Expect(st.PreRestoreBackup).To(MatchRegexp(preRestoreName))
	dump := f.job(render.StepBackup)
	e := envOf(dump.Spec.Template.Spec.Containers[0])
	g.Expect(e).To(HaveKeyWithValue("BACKUP", st.PreRestoreBackup))
	g.Expect(e).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled-backups/"+f.ns+"/"+f.name))
	g.Expect(e).To(HaveKeyWithValue("TILED_VERSION", "0.2.14"))
	g.Expect(e).NotTo(HaveKey("RETAIN_COUNT"), "prunes nothing: not the backup about to be restored")
	f.cronJobSuspended(true, "no scheduled backup beside the restore")
	f.expectServing(upgradeFrom, upgradeReplicas)
	condition(t, g, f.ns, f.name, controllers.ConditionReconciling, metav1.ConditionTrue, inplace.ReasonRestoringInPlace, upgradeWithin,
		"restoring TiledInstance "+f.ns+"/"+f.name+" from backup "+olderWhole, "request r1 by alice@example.org", "backing up the databases as they are")
	condition(t, g, f.ns, f.name, inplace.ConditionRestored, metav1.ConditionUnknown, inplace.ReasonRestoringInPlace, upgradeWithin)
	note := f.eventOnce(inplace.ReasonRestoreRequested, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("alice@example.org asked to restore TiledInstance " + f.ns + "/" + f.name + " from backup " + olderWhole))

	// Backed up: listed at once; Tiled stops, and the restore waits for its pods to go.
	f.finish(dump, 0, `{"name":"`+st.PreRestoreBackup+`","instance":"`+f.ns+`/`+f.name+`","tiledVersion":"0.2.14","seconds":3,"bytes":4096,"files":[],"available":"`+
		st.PreRestoreBackup+`:4096,`+newerWhole+`:2048,`+olderWhole+`:1024"}`)
	st = f.inPlace("r1", tiledv1alpha1.InPlaceRestoreStopping)
	g.Expect(st.StopTime).NotTo(BeNil())
	ti := f.instance(g)
	g.Expect(ti.Status.Backup.Last.Name).To(Equal(st.PreRestoreBackup))
	g.Expect(ti.Status.Backup.Available).To(HaveLen(3))
	f.expectServing(upgradeFrom, 0)
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepRestore)).To(BeEmpty(), "no restore while Tiled pods exist")
	for _, p := range f.pods {
		g.Expect(env.Client.Delete(ctxT(t), p)).To(Succeed())
	}

	// Stopped: the restore Job replaces the databases.
	f.inPlace("r1", tiledv1alpha1.InPlaceRestoreRestoring)
	restore := f.job(render.StepRestore)
	e = envOf(restore.Spec.Template.Spec.Containers[0])
	g.Expect(e).To(HaveKeyWithValue("BACKUP", olderWhole))
	g.Expect(e).To(HaveKeyWithValue("TILED_VERSION", "0.2.14"), "a backup from a newer Tiled is refused")
	g.Expect(e).NotTo(HaveKey("RESTORE_IF_EMPTY"), "the databases are replaced")
	f.jobGone(dump.Name)
	f.cronJobSuspended(true, "suspended while Tiled is stopped")

	// A restarted operator carries on: the same Job, no second Event.
	f.op.stop()
	f.op = startOperator(t, f.ns)
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepRestore)).To(HaveLen(1))
	g.Expect(f.jobs(g, render.StepRestore)[0].Name).To(Equal(restore.Name))
	g.Expect(f.events(g, inplace.ReasonRestoreRequested)).To(HaveLen(1))
	f.expectServing(upgradeFrom, 0)

	// Restored: Tiled starts on the serving image; ready, the record and one Event.
	f.finish(restore, 0, `{"restored":"`+olderWhole+`","tiledVersion":"0.2.14","seconds":2}`)
	f.inPlace("r1", tiledv1alpha1.InPlaceRestoreStarting)
	f.expectServing(upgradeFrom, upgradeReplicas)
	markReady(t, g, f.ns, f.n.Tiled)
	st = f.inPlace("r1", tiledv1alpha1.InPlaceRestoreSucceeded)
	g.Expect(st.CompletionTime).NotTo(BeNil())
	g.Expect(st.Message).To(BeEmpty())
	note = f.eventOnce(inplace.ReasonRestoredInPlace, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("restored TiledInstance " + f.ns + "/" + f.name + " from backup " + olderWhole))
	g.Expect(note).To(ContainSubstring("request r1 by alice@example.org"))
	g.Expect(note).To(ContainSubstring(st.PreRestoreBackup))
	condition(t, g, f.ns, f.name, inplace.ConditionRestored, metav1.ConditionTrue, inplace.ReasonRestoredInPlace, upgradeWithin)
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	f.cronJobSuspended(false, "resumed once Tiled serves")
	f.jobGone(restore.Name)
	t.Logf("restore in place took %v: %s", time.Since(start).Round(time.Millisecond), note)

	// Reconciles after it, and a restarted operator, restore nothing again.
	recorded := f.instance(g).Status.InPlaceRestore.DeepCopy()
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) { ti.Spec.Tiled.Replicas = ptr.To[int32](upgradeReplicas + 1) })
	f.expectServing(upgradeFrom, upgradeReplicas+1)
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		c := meta.FindStatusCondition(ti.Status.Conditions, inplace.ConditionRestored)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.ObservedGeneration).To(Equal(ti.Generation), "the outcome holds at the new generation")
	}, upgradeWithin, upgradePoll).Should(Succeed())
	f.op.stop()
	f.op = startOperator(t, f.ns)
	waitQuiet(t, f.op)
	g.Expect(f.instance(g).Status.InPlaceRestore).To(Equal(recorded))
	g.Expect(f.jobs(g, render.StepBackup)).To(BeEmpty())
	g.Expect(f.jobs(g, render.StepRestore)).To(BeEmpty())
	g.Expect(f.events(g, inplace.ReasonRestoreRequested)).To(HaveLen(1))
	g.Expect(f.events(g, inplace.ReasonRestoredInPlace)).To(HaveLen(1))

	// A new request id is a new restore, of the same backup.
	f.requestRestore(olderWhole, "r2", "bob")
	f.inPlace("r2", tiledv1alpha1.InPlaceRestoreBackingUp)
	g.Expect(f.job(render.StepBackup).Name).NotTo(Equal(dump.Name))
}

// TestRestoreInPlaceRefused: a request during an upgrade is refused, recorded once with the
// Restored condition False and one Warning Event naming the instance, the annotation and the
// reason, and nothing is changed; so is a request for a backup the target does not hold.
func TestRestoreInPlaceRefused(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "restore-refused")
	f.withWholeBackups()

	// A backup the target does not hold.
	f.requestRestore("20261101T000000Z", "r0", "alice")
	st := f.inPlace("r0", tiledv1alpha1.InPlaceRestoreRefused)
	g.Expect(st.Message).To(ContainSubstring("holds no whole backup named 20261101T000000Z"))
	condition(t, g, f.ns, f.name, inplace.ConditionRestored, metav1.ConditionFalse, inplace.ReasonRestoreRefused, upgradeWithin, "20261101T000000Z")
	f.eventOnce(inplace.ReasonRestoreRefused, corev1.EventTypeWarning)
	g.Expect(f.jobs(g, render.StepBackup)).To(BeEmpty())
	f.expectServing(upgradeFrom, upgradeReplicas)
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)

	// An upgrade runs: refused, and the upgrade goes on.
	f.startUpgrade()
	f.requestRestore(olderWhole, "r1", "alice")
	st = f.inPlace("r1", tiledv1alpha1.InPlaceRestoreRefused)
	for _, s := range []string{"TiledInstance " + f.ns + "/" + f.name, "annotation " + tiledv1alpha1.AnnotationRestore + "=" + olderWhole,
		"request r1 by alice", "an upgrade of Tiled 0.2.14 -> 0.2.20", "nothing was changed"} {
		g.Expect(st.Message).To(ContainSubstring(s))
	}
	g.Expect(st.CompletionTime).NotTo(BeNil())
	ti := condition(t, g, f.ns, f.name, inplace.ConditionRestored, metav1.ConditionFalse, inplace.ReasonRestoreRefused, upgradeWithin, "an upgrade of Tiled")
	g.Expect(ti.Status.Upgrade).NotTo(BeNil())
	g.Expect(ti.Status.Upgrade.Phase).To(Equal(tiledv1alpha1.UpgradeChecking))
	g.Eventually(func(g Gomega) []string {
		var notes []string
		for _, e := range f.events(g, inplace.ReasonRestoreRefused) {
			notes = append(notes, e.Note)
		}
		return notes
	}, upgradeWithin, upgradePoll).Should(ContainElement(ContainSubstring("an upgrade of Tiled 0.2.14 -> 0.2.20")))
	waitQuiet(t, f.op)
	g.Expect(f.events(g, inplace.ReasonRestoreRefused)).To(HaveLen(2), "one per request")
	g.Expect(f.jobs(g, render.StepBackup)).To(BeEmpty(), "no backup of the restore")
	g.Expect(f.jobs(g, render.StepRestore)).To(BeEmpty())
	g.Expect(meta.FindStatusCondition(f.instance(g).Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	f.expectServing(upgradeFrom, upgradeReplicas)
}

// TestRestoreInPlaceFlushesTheCache: an instance with a managed streaming cache restored in place
// has its cache emptied (the cache's pod deleted, for its StatefulSet to make again on a new
// emptyDir) once the databases are restored and before Tiled starts; status.inPlaceRestore says so.
func TestRestoreInPlaceFlushesTheCache(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "restore-cache")
	f := &upgradeFixture{t: t, g: g, op: startOperator(t, ns), ns: ns, name: "cached"}
	ti := soloInstance(ns, f.name, upgradeFrom, nil)
	ti.Spec.Streaming = &tiledv1alpha1.StreamingSpec{Managed: &tiledv1alpha1.ManagedCache{}}
	createAll(t, g, ti)
	f.n = fleet.NamesOf(ti)
	g.Eventually(func() bool { return exists(t, &appsv1.StatefulSet{}, ns, f.n.Cache) }, upgradeWithin, upgradePoll).Should(BeTrue())
	cache := createPod(t, g, getInstance(t, g, ns, f.name), render.ComponentCache, f.n.Cache+"-0", "cache")
	f.withWholeBackups()

	f.requestRestore(olderWhole, "r1", "carol")
	st := f.inPlace("r1", tiledv1alpha1.InPlaceRestoreBackingUp)
	dump := f.job(render.StepBackup)
	f.finish(dump, 0, `{"name":"`+st.PreRestoreBackup+`","instance":"`+ns+`/`+f.name+`","tiledVersion":"0.2.14","seconds":1,"bytes":10,"files":[]}`)
	f.inPlace("r1", tiledv1alpha1.InPlaceRestoreRestoring) // no Tiled pod here: stopped at once
	g.Expect(exists(t, &corev1.Pod{}, ns, cache.Name)).To(BeTrue(), "the cache is left alone until the databases are restored")
	restore := f.job(render.StepRestore)
	f.finish(restore, 0, `{"restored":"`+olderWhole+`","tiledVersion":"0.2.14","seconds":1}`)
	st = f.inPlace("r1", tiledv1alpha1.InPlaceRestoreStarting)
	g.Expect(st.CacheFlushed).To(BeTrue())
	g.Eventually(func() bool {
		p := &corev1.Pod{}
		err := env.Client.Get(ctxT(t), client.ObjectKeyFromObject(cache), p)
		return apierrors.IsNotFound(err) || (err == nil && (p.UID != cache.UID || p.DeletionTimestamp != nil))
	}, upgradeWithin, upgradePoll).Should(BeTrue(), "the cache's pod deleted")
	f.expectServing(upgradeFrom, upgradeReplicas)
}

// TestRestoreInPlaceWaitsForScheduledBackup: a restore requested while a scheduled backup Job runs
// makes no backup Job of its own (Reconciling says it waits, Tiled serves) until that Job ends:
// the scheduled backup's pruning could otherwise take the backup about to be restored.
func TestRestoreInPlaceWaitsForScheduledBackup(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "restore-waits")
	cj := f.withWholeBackups()
	scheduled := f.jobFromCronJob(cj, time.Now(), "example.org/kubelet-player")
	waitQuiet(t, f.op)

	f.requestRestore(olderWhole, "r1", "alice")
	f.inPlace("r1", tiledv1alpha1.InPlaceRestoreBackingUp)
	condition(t, g, f.ns, f.name, controllers.ConditionReconciling, metav1.ConditionTrue, inplace.ReasonRestoringInPlace, upgradeWithin,
		"waiting for the scheduled backup Job "+scheduled.Name+" to end")
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepBackup)).To(BeEmpty(), "no backup beside the scheduled one")
	f.cronJobSuspended(true, "no other scheduled backup starts")
	f.expectServing(upgradeFrom, upgradeReplicas)

	f.endScheduled(scheduled, "20261207T023000Z")
	dump := f.job(render.StepBackup)
	g.Expect(envOf(dump.Spec.Template.Spec.Containers[0])).NotTo(HaveKey("RETAIN_COUNT"))
}
