package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/catalog"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// A lost catalog on the real apiserver (package catalog decides; tiledinstance_lostcatalog.go
// records). The tests play the kubelet and the StatefulSet controller as the upgrade tests do: the
// Tiled pods, their migrate step's report, the StatefulSets' readiness; kube-controller-manager
// (TestMain) runs the job controller and releases a claim no pod uses.

// servingPods creates n Tiled pods of the instance whose migrate step reported report, running and
// ready, as the StatefulSet controller and the kubelet would.
func (f *upgradeFixture) servingPods(n int, suffix, report string) []*corev1.Pod {
	cur := f.instance(f.g)
	var out []*corev1.Pod
	for i := range n {
		p := createPod(f.t, f.g, cur, render.ComponentServer, f.n.Tiled+"-"+suffix+itoa(i), "tiled")
		st := runningStatus("tiled", true, time.Now())
		st.InitContainerStatuses = []corev1.ContainerStatus{{
			Name: "migrate", Image: upgradeTo, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: report}},
		}}
		setPodStatus(f.t, f.g, p, st)
		out = append(out, p)
	}
	return out
}

// databaseClaim is the managed database's claim (waiting for one not being deleted).
func (f *upgradeFixture) databaseClaim() *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(f.t), client.ObjectKey{Namespace: f.ns, Name: f.n.DatabaseClaim}, c)).To(Succeed())
		g.Expect(c.DeletionTimestamp).To(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	return c
}

// configMapData is the instance's ConfigMap's data.
func configMapData(t *testing.T, g Gomega, ns, name string) map[string]string {
	cm := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, cm)).To(Succeed())
	return cm.Data
}

// TestLostCatalog: a serving instance records the claim its catalog lives on, and its ConfigMap
// says a catalog is expected, rolling nothing. Its database claim deleted (and made again, empty):
// Stalled CatalogLost naming the claim, both UIDs, the revision and the newest whole backup; Tiled
// at 0 replicas; the backup CronJob suspended; one Warning Event; a new instance beside it
// unaffected; a restarted operator changes nothing. RestoreLatest then restores that backup with a
// Job of its own, Tiled starts, and once a Tiled pod started after the restore reports the catalog
// the record goes and the new claim is the catalog's.
func TestLostCatalog(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	ns := newNamespace(t, g, "lost-catalog")
	f := &upgradeFixture{t: t, g: g, op: startOperator(t, ns), ns: ns, name: "lost"}
	bk := &tiledv1alpha1.BackupSpec{Schedule: "30 2 * * *", Claim: &tiledv1alpha1.BackupClaimTarget{ClaimName: backupClaim}}
	ti := soloInstance(ns, f.name, upgradeTo, bk)
	fresh := soloInstance(ns, "fresh", upgradeTo, bk.DeepCopy())
	createAll(t, g, ti, fresh)
	f.n = fleet.NamesOf(ti)
	freshNames := fleet.NamesOf(fresh)

	sts := f.expectReplicas(upgradeReplicas)
	stsGeneration, configHash := sts.Generation, sts.Spec.Template.Annotations[render.ConfigHashAnnotation]
	g.Expect(configMapData(t, g, ns, f.n.ConfigMap)).NotTo(HaveKey(render.CatalogExpectedKey), "a new instance initialises its catalog")

	// The first start: the migrate step made the catalog.
	g.Eventually(func() bool { return exists(t, &appsv1.StatefulSet{}, ns, f.n.Postgres) }, upgradeWithin, upgradePoll).Should(BeTrue())
	waitQuiet(t, f.op)
	old := f.servingPods(upgradeReplicas, "", migratedReport)
	markReady(t, g, ns, f.n.Postgres)
	markReady(t, g, ns, f.n.Tiled)

	condition(t, g, ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	claim := f.databaseClaim()
	g.Eventually(func(g Gomega) {
		db := f.instance(g).Status.Database
		g.Expect(db).NotTo(BeNil())
		g.Expect(db.CatalogRevision).To(Equal(revNew))
		g.Expect(db.ClaimUID).To(Equal(string(claim.UID)))
		g.Expect(configMapData(t, g, ns, f.n.ConfigMap)).To(HaveKeyWithValue(render.CatalogExpectedKey, "true"))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	waitQuiet(t, f.op)
	sts = f.tiledSTS(g)
	g.Expect(sts.Generation).To(Equal(stsGeneration), "catalog-expected rolls nothing")
	g.Expect(sts.Spec.Template.Annotations).To(HaveKeyWithValue(render.ConfigHashAnnotation, configHash))

	// A whole backup on the target.
	cj := f.cronJob(func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse())) })
	bj := f.jobFromCronJob(cj, time.Date(2026, 12, 3, 2, 30, 0, 0, time.UTC), "")
	f.finish(bj, 0, `{"name":"`+backupName+`","instance":"`+ns+`/`+f.name+`","tiledVersion":"0.2.20","seconds":3,"bytes":1234,"files":[],"available":"`+backupName+`:1234,`+olderBackup+`:999"}`)
	f.lastBackup(bj.Name)

	// The claim deleted (its pod gone: the claim is released): the operator makes it again, empty.
	g.Expect(env.Client.Delete(ctxT(t), claim)).To(Succeed())
	var lost *tiledv1alpha1.CatalogLost
	var newClaim *corev1.PersistentVolumeClaim
	g.Eventually(func(g Gomega) {
		cur := &corev1.PersistentVolumeClaim{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: f.n.DatabaseClaim}, cur)).To(Succeed())
		g.Expect(cur.UID).NotTo(Equal(claim.UID))
		newClaim = cur
		lost = f.instance(g).Status.CatalogLost
		g.Expect(lost).NotTo(BeNil())
		g.Expect(lost.NewClaimUID).To(Equal(string(cur.UID)))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g.Expect(lost.Phase).To(Equal(tiledv1alpha1.CatalogLostStalled))
	g.Expect(lost.Claim).To(Equal(f.n.DatabaseClaim))
	g.Expect(lost.OldClaimUID).To(Equal(string(claim.UID)))
	g.Expect(lost.Revision).To(Equal(revNew))
	g.Expect(lost.Backup).To(Equal(backupName))
	g.Expect(lost.Reason).To(BeElementOf(catalog.LostClaimDeleted, catalog.LostClaimReplaced))
	ti = condition(t, g, ns, f.name, controllers.ConditionStalled, metav1.ConditionTrue, catalog.ReasonCatalogLost, upgradeWithin,
		"TiledInstance "+ns+"/"+f.name, f.n.DatabaseClaim, string(claim.UID), string(newClaim.UID), "revision "+revNew,
		backupName+" on "+backupTarget(ns, f.name), "onCatalogLost: RestoreLatest", tiledv1alpha1.AnnotationAcceptCatalogLoss+"="+string(newClaim.UID))
	ready := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(catalog.ReasonCatalogLost))
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReconciling)).To(BeNil())
	f.expectReplicas(0)
	f.cronJob(func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(BeTrue())) })
	note := f.eventOnce(catalog.ReasonCatalogLost, corev1.EventTypeWarning)
	g.Expect(note).To(ContainSubstring(f.n.DatabaseClaim))
	g.Expect(configMapData(t, g, ns, f.n.ConfigMap)).To(HaveKeyWithValue(render.CatalogExpectedKey, "true"), "the migrate step still refuses an empty catalog")
	g.Expect(f.jobs(g, render.StepRecover)).To(BeEmpty(), "Stall restores nothing")
	for _, p := range old { // the StatefulSet controller's part: no replicas, no pods
		g.Expect(client.IgnoreNotFound(env.Client.Delete(ctxT(t), p))).To(Succeed())
	}

	// The new instance beside it has no catalog yet: untouched.
	fi := getInstance(t, g, ns, fresh.Name)
	g.Expect(fi.Status.CatalogLost).To(BeNil())
	g.Expect(meta.FindStatusCondition(fi.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	g.Expect(configMapData(t, g, ns, freshNames.ConfigMap)).NotTo(HaveKey(render.CatalogExpectedKey))
	fsts := &batchv1.CronJob{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: freshNames.BackupCronJob}, fsts)).To(Succeed())
	g.Expect(fsts.Spec.Suspend).To(HaveValue(BeFalse()))

	// A restarted operator changes nothing: the same record, no second Event.
	recorded := f.instance(g).Status.CatalogLost.DeepCopy()
	f.op.stop()
	f.op = startOperator(t, ns)
	waitQuiet(t, f.op)
	g.Expect(f.instance(g).Status.CatalogLost).To(Equal(recorded))
	g.Expect(f.events(g, catalog.ReasonCatalogLost)).To(HaveLen(1))
	f.expectReplicas(0)

	// RestoreLatest: a Job of its own restores the backup the record names, Tiled stopped.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup.OnCatalogLost = tiledv1alpha1.CatalogLostRestoreLatest
	})
	var rj *batchv1.Job
	g.Eventually(func(g Gomega) {
		jobs := f.jobs(g, render.StepRecover)
		g.Expect(jobs).To(HaveLen(1))
		rj = &jobs[0]
	}, upgradeWithin, upgradePoll).Should(Succeed())
	e := envOf(rj.Spec.Template.Spec.Containers[0])
	g.Expect(e).To(HaveKeyWithValue("BACKUP", backupName))
	g.Expect(e).To(HaveKeyWithValue("RESTORE_IF_EMPTY", "1"))
	condition(t, g, ns, f.name, controllers.ConditionReconciling, metav1.ConditionTrue, catalog.ReasonRestoringCatalog, upgradeWithin, "backup "+backupName)
	g.Expect(f.instance(g).Status.CatalogLost.Phase).To(Equal(tiledv1alpha1.CatalogLostRestoring))
	f.expectReplicas(0)

	// Restored: Tiled starts; the record stays until a pod started after the restore reports.
	f.finish(rj, 0, `{"restored":"`+backupName+`","tiledVersion":"0.2.20","seconds":2}`)
	f.expectReplicas(upgradeReplicas)
	g.Eventually(func(g Gomega) {
		l := f.instance(g).Status.CatalogLost
		g.Expect(l).NotTo(BeNil())
		g.Expect(l.Phase).To(Equal(tiledv1alpha1.CatalogLostRestored))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	time.Sleep(1100 * time.Millisecond) // the record's time has whole seconds
	f.servingPods(upgradeReplicas, "r", migratedReport)
	markReady(t, g, ns, f.n.Tiled)
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		g.Expect(ti.Status.CatalogLost).To(BeNil())
		g.Expect(ti.Status.Database.ClaimUID).To(Equal(string(newClaim.UID)))
		g.Expect(ti.Status.Database.CatalogRevision).To(Equal(revNew))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	note = f.eventOnce(catalog.ReasonCatalogRestored, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("restored from backup " + backupName))
	condition(t, g, ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	f.cronJob(func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse())) })
	f.jobGone(rj.Name)
	g.Expect(f.events(g, catalog.ReasonCatalogLost)).To(HaveLen(1))
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestLostCatalogAccepted: a lost catalog without a backup target stalls; the annotation naming
// another claim accepts nothing; naming the new claim accepts the loss: the record and the catalog's
// revision go, catalog-expected leaves the ConfigMap, Tiled starts, one Normal Event; the new
// catalog Tiled then reports is recorded on the new claim.
func TestLostCatalogAccepted(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "lost-accepted")
	f := &upgradeFixture{t: t, g: g, op: startOperator(t, ns), ns: ns, name: "lost"}
	ti := soloInstance(ns, f.name, upgradeTo, nil)
	createAll(t, g, ti)
	f.n = fleet.NamesOf(ti)
	f.expectReplicas(upgradeReplicas)
	g.Eventually(func() bool { return exists(t, &appsv1.StatefulSet{}, ns, f.n.Postgres) }, upgradeWithin, upgradePoll).Should(BeTrue())
	old := f.servingPods(upgradeReplicas, "", migratedReport)
	markReady(t, g, ns, f.n.Postgres)
	markReady(t, g, ns, f.n.Tiled)
	claim := f.databaseClaim()
	g.Eventually(func(g Gomega) {
		db := f.instance(g).Status.Database // nil until the operator's first status write
		g.Expect(db).NotTo(BeNil())
		g.Expect(db.ClaimUID).To(Equal(string(claim.UID)))
		g.Expect(configMapData(t, g, ns, f.n.ConfigMap)).To(HaveKey(render.CatalogExpectedKey))
	}, upgradeWithin, upgradePoll).Should(Succeed())

	g.Expect(env.Client.Delete(ctxT(t), claim)).To(Succeed())
	var newUID string
	g.Eventually(func(g Gomega) {
		l := f.instance(g).Status.CatalogLost
		g.Expect(l).NotTo(BeNil())
		g.Expect(l.NewClaimUID).NotTo(BeEmpty())
		newUID = l.NewClaimUID
	}, upgradeWithin, upgradePoll).Should(Succeed())
	condition(t, g, ns, f.name, controllers.ConditionStalled, metav1.ConditionTrue, catalog.ReasonCatalogLost, upgradeWithin,
		"there is no whole backup to restore it from", tiledv1alpha1.AnnotationAcceptCatalogLoss+"="+newUID)
	f.expectReplicas(0)
	for _, p := range old {
		g.Expect(client.IgnoreNotFound(env.Client.Delete(ctxT(t), p))).To(Succeed())
	}

	// Another claim's UID accepts nothing.
	annotate := func(v string) {
		g.Eventually(func() error {
			cur := f.instance(g)
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[tiledv1alpha1.AnnotationAcceptCatalogLoss] = v
			return env.Client.Update(ctxT(t), cur)
		}, upgradeWithin, upgradePoll).Should(Succeed())
	}
	annotate(string(claim.UID))
	waitQuiet(t, f.op)
	g.Expect(f.instance(g).Status.CatalogLost).NotTo(BeNil())
	f.expectReplicas(0)

	// The new claim's: accepted.
	annotate(newUID)
	g.Eventually(func(g Gomega) {
		cur := f.instance(g)
		g.Expect(cur.Status.CatalogLost).To(BeNil())
		g.Expect(cur.Status.Database.CatalogRevision).To(BeEmpty())
		g.Expect(cur.Status.Database.ClaimUID).To(Equal(newUID))
		g.Expect(configMapData(t, g, ns, f.n.ConfigMap)).NotTo(HaveKey(render.CatalogExpectedKey))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	f.expectReplicas(upgradeReplicas)
	note := f.eventOnce(catalog.ReasonCatalogLossAccepted, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("initialises a new catalog"))

	// Tiled initialises a new catalog: recorded, on the new claim, expected again.
	f.servingPods(upgradeReplicas, "n", migratedReport)
	markReady(t, g, ns, f.n.Tiled)
	g.Eventually(func(g Gomega) {
		cur := f.instance(g)
		g.Expect(cur.Status.Database.CatalogRevision).To(Equal(revNew))
		g.Expect(cur.Status.Database.ClaimUID).To(Equal(newUID))
		g.Expect(configMapData(t, g, ns, f.n.ConfigMap)).To(HaveKeyWithValue(render.CatalogExpectedKey, "true"))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	condition(t, g, ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	g.Expect(f.events(g, catalog.ReasonCatalogLost)).To(HaveLen(1))
}
