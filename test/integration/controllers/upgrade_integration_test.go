package controllers_test

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	objnames "github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The upgrade procedure on the real apiserver. kube-controller-manager runs the job controller
// (TestMain): it creates each step's pod and turns the pod's end into the Job's conditions. No
// kubelet, scheduler or StatefulSet controller runs: the tests play them, creating the Tiled pods a
// StatefulSet would, writing the step pods' termination (the step's report, or its log's tail) and
// the StatefulSets' readiness.

const (
	upgradeFrom = "ghcr.io/bluesky/tiled:0.2.14"
	upgradeTo   = "ghcr.io/bluesky/tiled:0.2.20"
	// revOld is the catalog revision Tiled 0.2.14 serves at; revNew the one 0.2.20 requires.
	revOld           = "b93c79d197f4"
	revNew           = "917dbbcfc4b1"
	upgradeReplicas  = 2
	upgradeWithin    = time.Minute
	upgradePoll      = 200 * time.Millisecond
	checkReport      = `{"catalog":{"current":"` + revOld + `","known":true,"required":"` + revNew + `"},"version":"0.2.20"}`
	migratedReport   = `{"catalog":{"current":"` + revNew + `","known":true,"required":"` + revNew + `"},"version":"0.2.20"}`
	migrationFailure = `INFO  [alembic.runtime.migration] Running upgrade 3bc110ce44e9 -> 917dbbcfc4b1, rename access tag tables
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/site-packages/sqlalchemy/engine/base.py", line 1967, in _exec_single_context
sqlalchemy.exc.ProgrammingError: (psycopg.errors.DuplicateTable) relation "access_grants" already exists
[tiled-operator] tiled catalog upgrade-database failed with exit code 1: ProgrammingError: relation "access_grants" already exists`
)

// upgradeFixture is a standalone instance serving upgradeFrom with upgradeReplicas ready pods and a
// ready managed database.
type upgradeFixture struct {
	t    *testing.T
	g    Gomega
	op   *runningOperator
	ns   string
	name string
	n    objnames.Objects
	pods []*corev1.Pod
}

func newUpgradeFixture(t *testing.T, g Gomega, prefix string) *upgradeFixture {
	ns := newNamespace(t, g, prefix)
	f := &upgradeFixture{t: t, g: g, op: startOperator(t, ns), ns: ns, name: "solo"}
	ti := soloInstance(ns, f.name, upgradeFrom, nil)
	createAll(t, g, ti)
	f.n = fleet.NamesOf(ti)
	g.Eventually(func(g Gomega) {
		s := f.tiledSTS(g)
		g.Expect(containerImage(s, "tiled")).To(Equal(upgradeFrom))
		g.Expect(exists(t, &appsv1.StatefulSet{}, ns, f.n.Postgres)).To(BeTrue())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	// What the StatefulSet controller and the kubelet would do: the pods, running and ready.
	cur := getInstance(t, g, ns, f.name)
	for i := range upgradeReplicas {
		p := createPod(t, g, cur, render.ComponentServer, f.n.Tiled+"-"+itoa(i), "tiled")
		setPodStatus(t, g, p, runningStatus("tiled", true, time.Now()))
		f.pods = append(f.pods, p)
	}
	markReady(t, g, ns, f.n.Postgres)
	markReady(t, g, ns, f.n.Tiled)
	condition(t, g, ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	waitQuiet(t, f.op)
	return f
}

// soloInstance is the fixtures' standalone instance ns/name: image, upgradeReplicas replicas on a
// ReadWriteMany data claim, a managed database, and backup (nil: none).
func soloInstance(ns, name, image string, backup *tiledv1alpha1.BackupSpec) *tiledv1alpha1.TiledInstance {
	return &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tiledv1alpha1.TiledInstanceSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{Image: image, Replicas: ptr.To[int32](upgradeReplicas)},
			Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{
				Size: "5Gi", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			}},
			Database: &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Size: "1Gi"}},
			Backup:   backup,
			// No streaming cache: see smallFleet.
			Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(false)},
		}},
	}
}

func (f *upgradeFixture) instance(g Gomega) *tiledv1alpha1.TiledInstance {
	return getInstance(f.t, g, f.ns, f.name)
}

func (f *upgradeFixture) tiledSTS(g Gomega) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{}
	g.Expect(env.Client.Get(ctxT(f.t), client.ObjectKey{Namespace: f.ns, Name: f.n.Tiled}, s)).To(Succeed())
	return s
}

// setImage sets spec.tiled.image.
func (f *upgradeFixture) setImage(image string) {
	f.g.Eventually(func() error {
		ti := f.instance(f.g)
		ti.Spec.Tiled.Image = image
		return env.Client.Update(ctxT(f.t), ti)
	}, upgradeWithin, upgradePoll).Should(Succeed())
}

// phase waits until status.upgrade is at phase p and returns the instance.
func (f *upgradeFixture) phase(p tiledv1alpha1.UpgradePhase) *tiledv1alpha1.TiledInstance {
	var ti *tiledv1alpha1.TiledInstance
	f.g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Upgrade).NotTo(BeNil(), "no upgrade in status")
		g.Expect(ti.Status.Upgrade.Phase).To(Equal(p), "message: %s", ti.Status.Upgrade.Message)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	return ti
}

// expectServing checks that the Tiled StatefulSet renders image with replicas, now and for a moment
// (once the operator is quiet).
func (f *upgradeFixture) expectServing(image string, replicas int32) {
	f.g.Eventually(func(g Gomega) {
		s := f.tiledSTS(g)
		g.Expect(containerImage(s, "tiled")).To(Equal(image))
		g.Expect(s.Spec.Replicas).To(HaveValue(Equal(replicas)))
	}, upgradeWithin, upgradePoll).Should(Succeed())
}

// jobs lists the instance's Jobs of step (those being deleted left out).
func (f *upgradeFixture) jobs(g Gomega, step render.StepKind) []batchv1.Job {
	var list batchv1.JobList
	g.Expect(env.Client.List(ctxT(f.t), &list, client.InNamespace(f.ns), client.MatchingLabels{
		tiledv1alpha1.LabelAppInstance: f.name, tiledv1alpha1.LabelStep: string(step),
	})).To(Succeed())
	var out []batchv1.Job
	for _, j := range list.Items {
		if j.DeletionTimestamp == nil {
			out = append(out, j)
		}
	}
	return out
}

// job waits for the one Job of step and returns it.
func (f *upgradeFixture) job(step render.StepKind) *batchv1.Job {
	var j *batchv1.Job
	f.g.Eventually(func(g Gomega) {
		list := f.jobs(g, step)
		g.Expect(list).To(HaveLen(1), "Jobs of step %s", step)
		j = &list[0]
	}, upgradeWithin, upgradePoll).Should(Succeed())
	f.g.Expect(j.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelAppComponent, render.ComponentJob))
	f.g.Expect(j.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(render.JobRetries)), "only a pod that exits with render.ExitTryAgain runs again")
	f.g.Expect(j.Spec.PodFailurePolicy).NotTo(BeNil())
	f.g.Expect(j.Spec.Template.Spec.Containers).To(HaveLen(1))
	f.g.Expect(j.Spec.Template.Spec.Containers[0].Name).To(Equal(string(step)))
	return j
}

// jobGone waits until the Job name no longer exists.
func (f *upgradeFixture) jobGone(name string) {
	f.g.Eventually(func() bool {
		err := env.Client.Get(ctxT(f.t), client.ObjectKey{Namespace: f.ns, Name: name}, &batchv1.Job{})
		return apierrors.IsNotFound(err)
	}, upgradeWithin, upgradePoll).Should(BeTrue(), "Job %s still exists", name)
}

// finish plays the kubelet for the pod the job controller created for j: its container ends with
// exitCode and leaves message as its termination message.
func (f *upgradeFixture) finish(j *batchv1.Job, exitCode int32, message string) {
	f.endPod(f.jobPods(j, 1)[0], exitCode, message)
	// The job controller turns the pod's end into the Job's; the operator then moves on and deletes
	// the Job, which may be gone by the time it is read.
	want := batchv1.JobComplete
	if exitCode != 0 {
		want = batchv1.JobFailed
	}
	f.g.Eventually(func(g Gomega) {
		cur := &batchv1.Job{}
		err := env.Client.Get(ctxT(f.t), client.ObjectKeyFromObject(j), cur)
		if apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		ok := false
		for _, cond := range cur.Status.Conditions {
			ok = ok || (cond.Type == want && cond.Status == corev1.ConditionTrue)
		}
		g.Expect(ok).To(BeTrue(), "Job %s conditions: %v", j.Name, cur.Status.Conditions)
	}, upgradeWithin, upgradePoll).Should(Succeed())
}

// jobPods waits until Job j has n pods (the job controller makes them: no kubelet runs them) and
// returns them, oldest first.
func (f *upgradeFixture) jobPods(j *batchv1.Job, n int) []corev1.Pod {
	var pods corev1.PodList
	f.g.Eventually(func(g Gomega) {
		g.Expect(env.Client.List(ctxT(f.t), &pods, client.InNamespace(f.ns), client.MatchingLabels{batchv1.JobNameLabel: j.Name})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(n), "pods of Job %s", j.Name)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods.Items
}

// endPod ends pod as the kubelet would: its container terminated with exitCode and message (the
// termination log).
func (f *upgradeFixture) endPod(p corev1.Pod, exitCode int32, message string) {
	pod := &p
	f.g.Expect(pod.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelAppInstance, f.name))
	c := pod.Spec.Containers[0]
	phase, reason := corev1.PodSucceeded, "Completed"
	if exitCode != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	started := metav1.NewTime(time.Now().Add(-2 * time.Second))
	setPodStatus(f.t, f.g, pod, corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image, Started: ptr.To(false),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: reason, Message: message, StartedAt: started, FinishedAt: metav1.Now(),
		}},
	}}})
}

// events are the Events about the instance with reason.
func (f *upgradeFixture) events(g Gomega, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctxT(f.t), &list, client.InNamespace(f.ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "TiledInstance" && e.Regarding.Name == f.name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// eventOnce waits for the Event reason of type typ, and checks (once the operator is quiet) that it
// was sent once: one Event, no series. It returns its note.
func (f *upgradeFixture) eventOnce(reason, typ string) string {
	f.g.Eventually(func(g Gomega) []eventsv1.Event { return f.events(g, reason) }, upgradeWithin, upgradePoll).ShouldNot(BeEmpty(), "no %s Event", reason)
	waitQuiet(f.t, f.op)
	evs := f.events(f.g, reason)
	f.g.Expect(evs).To(HaveLen(1), "%s Events", reason)
	f.g.Expect(evs[0].Series).To(BeNil(), "%s sent more than once", reason)
	f.g.Expect(evs[0].DeprecatedCount).To(BeNumerically("<=", 1))
	f.g.Expect(evs[0].Type).To(Equal(typ))
	return evs[0].Note
}

// startUpgrade changes the image to upgradeTo and checks the Checking phase: the old version serves,
// the check Job runs the new image. It returns the check Job.
func (f *upgradeFixture) startUpgrade() *batchv1.Job {
	g := f.g
	f.setImage(upgradeTo)
	ti := f.phase(tiledv1alpha1.UpgradeChecking)
	u := ti.Status.Upgrade
	g.Expect(u.FromImage).To(Equal(upgradeFrom))
	g.Expect(u.ToImage).To(Equal(upgradeTo))
	g.Expect(u.FromVersion).To(Equal("0.2.14"))
	g.Expect(u.ToVersion).To(Equal("0.2.20"))
	g.Expect(u.PhaseTime).NotTo(BeNil())
	g.Expect(u.StartTime.IsZero()).To(BeFalse())
	condition(f.t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionFalse, upgrade.ReasonUpgrading, upgradeWithin,
		"checking the databases' revisions with the new image")
	check := f.job(render.StepCheck)
	c := check.Spec.Template.Spec.Containers[0]
	g.Expect(c.Image).To(Equal(upgradeTo))
	g.Expect(c.Command).To(ContainElement("revisions"))
	g.Expect(check.Spec.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	f.expectServing(upgradeFrom, upgradeReplicas)
	note := f.eventOnce(upgrade.ReasonUpgrading, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("spec.tiled.image changed from " + upgradeFrom + " to " + upgradeTo))
	return check
}

// toMigrating drives an upgrade from Checking to Migrating: the check reports an older catalog, the
// backup completes, the Tiled pods go. It returns the instance at Migrating and the migrate Job.
func (f *upgradeFixture) toMigrating(check *batchv1.Job) (*tiledv1alpha1.TiledInstance, *batchv1.Job) {
	g := f.g
	// The check finds the catalog at an older revision: a backup comes first.
	f.finish(check, 0, checkReport)
	ti := f.phase(tiledv1alpha1.UpgradeBackingUp)
	u := ti.Status.Upgrade
	g.Expect(u.Backup).To(HavePrefix("pre-upgrade-"))
	g.Expect(u.FromRevision).To(Equal(revOld))
	g.Expect(u.ToRevision).To(Equal(revNew))
	g.Expect(u.FromImage).To(Equal(upgradeFrom))
	g.Expect(u.ToImage).To(Equal(upgradeTo))
	backup := f.job(render.StepBackup)
	pg := &appsv1.StatefulSet{}
	g.Expect(env.Client.Get(ctxT(f.t), client.ObjectKey{Namespace: f.ns, Name: f.n.Postgres}, pg)).To(Succeed())
	g.Expect(backup.Spec.Template.Spec.Containers[0].Image).To(Equal(pg.Spec.Template.Spec.Containers[0].Image), "the PostgreSQL image")
	g.Expect(backup.Annotations).To(HaveKeyWithValue(render.AnnotationBackup, u.Backup))
	g.Expect(backup.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "BACKUP", Value: u.Backup}))
	g.Eventually(func() bool { return exists(f.t, &corev1.PersistentVolumeClaim{}, f.ns, f.n.BackupClaim) }, upgradeWithin, upgradePoll).
		Should(BeTrue(), "backup claim %s", f.n.BackupClaim)
	f.jobGone(check.Name)
	f.expectServing(upgradeFrom, upgradeReplicas)
	condition(f.t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionFalse, upgrade.ReasonUpgrading, upgradeWithin,
		"backing up the databases to "+u.Backup)

	// The backup completes: the old pods are told to stop, and the upgrade waits for them to go.
	f.finish(backup, 0, `{"name":"`+u.Backup+`","instance":"`+f.ns+`/`+f.name+`","tiledVersion":"0.2.14","files":[]}`)
	ti = f.phase(tiledv1alpha1.UpgradeStopping)
	g.Expect(ti.Status.Upgrade.StopTime).NotTo(BeNil())
	f.expectServing(upgradeFrom, 0)
	waitQuiet(f.t, f.op)
	g.Expect(f.instance(g).Status.Upgrade.Phase).To(Equal(tiledv1alpha1.UpgradeStopping), "waits while Tiled pods exist")
	g.Expect(f.jobs(g, render.StepMigrate)).To(BeEmpty(), "no migration while Tiled pods exist")
	// What the StatefulSet controller would do at 0 replicas (unscheduled pods go at once).
	for _, p := range f.pods {
		g.Expect(env.Client.Delete(ctxT(f.t), p)).To(Succeed())
	}
	ti = f.phase(tiledv1alpha1.UpgradeMigrating)
	g.Expect(ti.Status.Image).To(Equal(upgradeFrom), "status.image: the image the pods are rendered with")
	migrate := f.job(render.StepMigrate)
	c := migrate.Spec.Template.Spec.Containers[0]
	g.Expect(c.Image).To(Equal(upgradeTo))
	g.Expect(c.Command).To(ContainElement("migrate"))
	f.jobGone(backup.Name)
	f.expectServing(upgradeFrom, 0)
	condition(f.t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionFalse, upgrade.ReasonUpgrading, upgradeWithin,
		"migrating the catalog from revision "+revOld+" to "+revNew)
	return ti, migrate
}

// TestUpgradeMigratesWithBackup: spec.tiled.image moves from 0.2.14 to 0.2.20 on an instance whose
// catalog is at 0.2.14's revision: check, backup, stop, migrate, start, each step's Job with its
// image, the old version serving until the stop, the record and one Migrated Event at the end.
func TestUpgradeMigratesWithBackup(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "upgrade")
	t.Logf("instance ready after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()

	ti, migrate := f.toMigrating(f.startUpgrade())
	backup := ti.Status.Upgrade.Backup

	// The migration succeeds: the new version starts with the spec's replicas.
	f.finish(migrate, 0, migratedReport)
	ti = f.phase(tiledv1alpha1.UpgradeStarting)
	g.Expect(ti.Status.Upgrade.ToRevision).To(Equal(revNew))
	g.Expect(ti.Status.Upgrade.MigrationSeconds).NotTo(BeEmpty())
	f.expectServing(upgradeTo, upgradeReplicas)
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionFalse, upgrade.ReasonUpgrading, upgradeWithin,
		"starting the new version on the migrated databases")
	waitQuiet(t, f.op)
	g.Expect(f.instance(g).Status.Upgrade).NotTo(BeNil(), "waits for the new version to be ready")

	// Ready at the new generation: done.
	markReady(t, g, f.ns, f.n.Tiled)
	g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Upgrade).To(BeNil())
		g.Expect(ti.Status.LastMigration).NotTo(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	m := ti.Status.LastMigration
	g.Expect(m.Result).To(Equal(upgrade.ResultSucceeded))
	g.Expect(m.FromVersion).To(Equal("0.2.14"))
	g.Expect(m.ToVersion).To(Equal("0.2.20"))
	g.Expect(m.FromRevision).To(Equal(revOld))
	g.Expect(m.ToRevision).To(Equal(revNew))
	g.Expect(m.Backup).To(Equal(backup))
	g.Expect(m.MigrationSeconds).NotTo(BeEmpty())
	g.Expect(m.DowntimeSeconds).NotTo(BeEmpty())
	g.Expect(m.CompletionTime.Time).NotTo(BeTemporally("<", m.StartTime.Time))
	g.Eventually(func(g Gomega) string { return f.instance(g).Status.Image }, upgradeWithin, upgradePoll).Should(Equal(upgradeTo))
	note := f.eventOnce(upgrade.ReasonMigrated, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("catalog migrated from revision " + revOld + " to " + revNew))
	g.Expect(note).To(ContainSubstring("backup " + backup))
	f.jobGone(migrate.Name)
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	g.Expect(meta.FindStatusCondition(f.instance(g).Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	f.expectServing(upgradeTo, upgradeReplicas)

	// Nothing of the procedure is left but the backups' claim.
	waitQuiet(t, f.op)
	g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, f.ns, f.n.BackupClaim)).To(BeTrue(), "the backup claim is kept")
	for _, step := range []render.StepKind{render.StepCheck, render.StepBackup, render.StepMigrate, render.StepRestore} {
		g.Expect(f.jobs(g, step)).To(BeEmpty(), "Jobs of step %s", step)
	}
	g.Expect(f.events(g, upgrade.ReasonMigrationFailed)).To(BeEmpty())
	expectMigrationCounted(t, g, f.ns, f.name, "succeeded")
	t.Logf("upgrade %s -> %s took %v: %s", upgradeFrom, upgradeTo, time.Since(start).Round(time.Millisecond), note)
}

// TestUpgradeFailedMigrationIsRolledBack: the migration fails part-way (a table already there); the
// backup is restored, the old version serves again with its replicas, the instance is Stalled
// quoting the failure, the record says RolledBack, and one MigrationFailed Event says so.
func TestUpgradeFailedMigrationIsRolledBack(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "upgrade-fail")
	t.Logf("instance ready after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()

	ti, migrate := f.toMigrating(f.startUpgrade())
	backup := ti.Status.Upgrade.Backup

	// The migration fails: the backup is restored, Tiled still stopped.
	f.finish(migrate, 1, migrationFailure)
	ti = f.phase(tiledv1alpha1.UpgradeRestoring)
	g.Expect(ti.Status.Upgrade.Message).To(ContainSubstring(`relation "access_grants" already exists`))
	restore := f.job(render.StepRestore)
	g.Expect(restore.Annotations).To(HaveKeyWithValue(render.AnnotationBackup, backup))
	g.Expect(restore.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "BACKUP", Value: backup}))
	f.jobGone(migrate.Name)
	f.expectServing(upgradeFrom, 0)
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionFalse, upgrade.ReasonUpgrading, upgradeWithin,
		"restoring backup "+backup)

	// Restored: the old version serves again; the instance waits for a person.
	f.finish(restore, 0, `{"restored":"`+backup+`"}`)
	f.phase(tiledv1alpha1.UpgradeFailed)
	ti = condition(t, g, f.ns, f.name, controllers.ConditionStalled, metav1.ConditionTrue, upgrade.ReasonMigrationFailed, upgradeWithin,
		"already exists", revOld, revNew, "backup "+backup+" was restored")
	ready := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(upgrade.ReasonMigrationFailed))
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReconciling)).To(BeNil())
	f.expectServing(upgradeFrom, upgradeReplicas)
	g.Expect(ti.Status.Image).To(Equal(upgradeFrom), "status.image: the image the pods are rendered with")
	m := ti.Status.LastMigration
	g.Expect(m).NotTo(BeNil())
	g.Expect(m.Result).To(Equal(upgrade.ResultRolledBack))
	g.Expect(m.FromRevision).To(Equal(revOld))
	g.Expect(m.ToRevision).To(Equal(revNew))
	g.Expect(m.Backup).To(Equal(backup))
	g.Expect(m.DowntimeSeconds).NotTo(BeEmpty())
	f.jobGone(restore.Name)
	note := f.eventOnce(upgrade.ReasonMigrationFailed, corev1.EventTypeWarning)
	g.Expect(note).To(ContainSubstring(`relation "access_grants" already exists`))
	g.Expect(f.events(g, upgrade.ReasonMigrated)).To(BeEmpty())

	// It stays so: no step runs again, the phase and the stall stay.
	ti = f.instance(g)
	g.Expect(ti.Status.Upgrade.Phase).To(Equal(tiledv1alpha1.UpgradeFailed))
	for _, step := range []render.StepKind{render.StepCheck, render.StepBackup, render.StepMigrate, render.StepRestore} {
		g.Expect(f.jobs(g, step)).To(BeEmpty(), "Jobs of step %s", step)
	}
	g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, f.ns, f.n.BackupClaim)).To(BeTrue(), "the backup claim is kept")
	expectMigrationCounted(t, g, f.ns, f.name, "failed")
	t.Logf("failed upgrade rolled back in %v: %s", time.Since(start).Round(time.Millisecond), note)
}

// TestUpgradeCancelledWhileChecking: the image set back while the check runs drops the upgrade: the
// check Job goes, the old version never stopped, one UpgradeCancelled Event.
func TestUpgradeCancelledWhileChecking(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "upgrade-cancel")
	check := f.startUpgrade()

	f.setImage(upgradeFrom)
	g.Eventually(func(g Gomega) { g.Expect(f.instance(g).Status.Upgrade).To(BeNil()) }, upgradeWithin, upgradePoll).Should(Succeed())
	f.jobGone(check.Name)
	note := f.eventOnce(upgrade.ReasonUpgradeCancelled, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("spec.tiled.image is " + upgradeFrom + " again"))
	f.expectServing(upgradeFrom, upgradeReplicas)
	ti := f.instance(g)
	g.Expect(ti.Status.LastMigration).To(BeNil())
	g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, f.ns, f.n.BackupClaim)).To(BeFalse(), "no backup was taken")
	for _, step := range []render.StepKind{render.StepCheck, render.StepBackup, render.StepMigrate, render.StepRestore} {
		g.Expect(f.jobs(g, step)).To(BeEmpty(), "Jobs of step %s", step)
	}
	condition(t, g, f.ns, f.name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, upgradeWithin)
	var reasons []string
	for _, r := range eventReasons(t, g, f.ns) {
		if strings.HasPrefix(r, "Upgrad") || strings.HasPrefix(r, "Migrat") {
			reasons = append(reasons, r)
		}
	}
	sort.Strings(reasons)
	g.Expect(reasons).To(Equal([]string{upgrade.ReasonUpgradeCancelled, upgrade.ReasonUpgrading}))
}

func containerImage(s *appsv1.StatefulSet, name string) string {
	for _, c := range s.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}
