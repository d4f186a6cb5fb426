package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/render"
)

// The upgrade of an instance with a backup target, on the real apiserver (the upgrade tests'
// fixture and helpers; no cronjob controller runs: the tests make the scheduled Jobs from the
// CronJob as it would).

// preUpgradeName matches the name of the upgrade's backup on the target, from 0.2.14 to 0.2.20.
const preUpgradeName = `^\d{8}T\d{6}Z-pre-upgrade-0\.2\.14-to-0\.2\.20$`

// withTarget gives the fixture's instance a claim target with a schedule and a retention, and
// returns its CronJob once it is rendered, not suspended.
func (f *upgradeFixture) withTarget() *batchv1.CronJob {
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup = &tiledv1alpha1.BackupSpec{Schedule: "30 2 * * *", Retention: &tiledv1alpha1.BackupRetention{Count: ptr.To[int32](5)},
			Claim: &tiledv1alpha1.BackupClaimTarget{ClaimName: backupClaim}}
	})
	cj := f.cronJob(func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse())) })
	condition(f.t, f.g, f.ns, f.name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin)
	waitQuiet(f.t, f.op)
	return cj
}

// cronJobSuspended waits until the backup CronJob's suspend is want.
func (f *upgradeFixture) cronJobSuspended(want bool, why string) {
	f.t.Helper()
	f.cronJob(func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(Equal(want)), why) })
}

// onTargetJob checks that the upgrade's backup or restore Job j runs dbtool.sh on the claim target,
// as the CronJob's Jobs do, with backup name, and not on the backup claim.
func (f *upgradeFixture) onTargetJob(j *batchv1.Job, mode, name string) {
	g := f.g
	c := j.Spec.Template.Spec.Containers[0]
	g.Expect(c.Command).To(Equal([]string{"sh", "-c", render.DBTool, "dbtool.sh", mode}))
	e := envOf(c)
	g.Expect(e).To(HaveKeyWithValue("TARGET", "dir"))
	g.Expect(e).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled-backups/"+f.ns+"/"+f.name))
	g.Expect(e).To(HaveKeyWithValue("BACKUP", name))
	if mode == "backup" {
		g.Expect(e).To(HaveKeyWithValue("RETAIN_COUNT", "5"), "the scheduled backups' retention")
		g.Expect(e).To(HaveKeyWithValue("TILED_VERSION", "0.2.14"))
	}
	g.Expect(j.Annotations).To(HaveKeyWithValue(render.AnnotationBackup, name))
	var claims []string
	for _, v := range j.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	g.Expect(claims).To(Equal([]string{backupClaim}), "the target's claim, not %s", f.n.BackupClaim)
}

// endScheduled ends the scheduled backup Job j (handed to another controller: the test plays the job
// controller and the kubelet) as a whole backup name.
func (f *upgradeFixture) endScheduled(j *batchv1.Job, name string) {
	pod := f.podOf(f.getJob(j.Name))
	began := metav1.NewTime(time.Now().Add(-5 * time.Second).Truncate(time.Second))
	ended := metav1.NewTime(time.Now().Truncate(time.Second))
	setPodStatus(f.t, f.g, pod, corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Started: ptr.To(false),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: began, FinishedAt: ended,
			Message: `{"name":"` + name + `","instance":"` + f.ns + `/` + f.name + `","tiledVersion":"0.2.14","seconds":4,"bytes":2048,"files":[],"available":"` + name + `:2048"}`,
		}},
	}}})
	f.g.Eventually(func() error {
		cur := f.getJob(j.Name)
		cur.Status = batchv1.JobStatus{
			StartTime: &began, CompletionTime: &ended, Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
			UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
			Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastProbeTime: ended, LastTransitionTime: ended},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastProbeTime: ended, LastTransitionTime: ended},
			},
		}
		return env.Client.Status().Update(ctxT(f.t), cur)
	}, upgradeWithin, upgradePoll).Should(Succeed())
}

// TestUpgradeBackupWaitsForScheduledBackup: an instance backing up to a claim target upgrades while
// a scheduled backup Job runs. The CronJob is suspended from the check on; the upgrade's dump waits
// for the scheduled Job (Reconciling says so, no backup Job meanwhile), then goes to the target
// through dbtool.sh as the scheduled ones do, named <time>-pre-upgrade-0.2.14-to-0.2.20, and is
// listed in status.backup. The migration fails: the restore reads the backup from the target, the
// CronJob stays suspended through the migration and the restore, and is resumed once the old
// version serves again; status.lastMigration says where the backup is. No backup claim is made.
func TestUpgradeBackupWaitsForScheduledBackup(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "upgrade-target")
	cj := f.withTarget()
	target := backupTarget(f.ns, f.name)

	// A scheduled backup runs (its Job is another controller's: it runs until the test ends it).
	scheduled := f.jobFromCronJob(cj, time.Now().Add(-time.Minute), "example.org/kubelet-player")

	check := f.startUpgrade()
	f.cronJobSuspended(true, "suspended from the check on")
	f.finish(check, 0, checkReport)
	ti := f.phase(tiledv1alpha1.UpgradeBackingUp)
	u := ti.Status.Upgrade
	g.Expect(u.Backup).To(MatchRegexp(preUpgradeName))
	g.Expect(u.BackupTarget).To(Equal(target))
	condition(t, g, f.ns, f.name, controllers.ConditionReconciling, metav1.ConditionTrue, upgrade.ReasonUpgrading, upgradeWithin,
		"waiting for the scheduled backup Job "+scheduled.Name+" to end before backing up the databases to "+u.Backup+" on "+target)
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepBackup)).To(BeEmpty(), "no dump beside the scheduled one")
	f.cronJobSuspended(true, "suspended while the upgrade waits")
	f.expectServing(upgradeFrom, upgradeReplicas)

	// The scheduled backup ends: the upgrade's dump goes to the target.
	f.endScheduled(scheduled, "20261207T023000Z")
	dump := f.job(render.StepBackup)
	f.onTargetJob(dump, "backup", u.Backup)
	condition(t, g, f.ns, f.name, controllers.ConditionReconciling, metav1.ConditionTrue, upgrade.ReasonUpgrading, upgradeWithin,
		"backing up the databases to "+u.Backup+" on "+target)
	f.cronJobSuspended(true, "suspended while the upgrade's dump runs")
	f.finish(dump, 0, `{"name":"`+u.Backup+`","instance":"`+f.ns+`/`+f.name+`","tiledVersion":"0.2.14","seconds":3,"bytes":4096,"files":[],`+
		`"available":"`+u.Backup+`:4096,20261207T023000Z:2048"}`)
	ti = f.phase(tiledv1alpha1.UpgradeStopping)
	st := ti.Status.Backup
	g.Expect(st).NotTo(BeNil())
	g.Expect(st.Last.Name).To(Equal(u.Backup), "listed as the scheduled backups are")
	g.Expect(st.Last.Job).To(Equal(dump.Name))
	g.Expect(st.Available).To(Equal([]tiledv1alpha1.AvailableBackup{{Name: u.Backup, Bytes: 4096}, {Name: "20261207T023000Z", Bytes: 2048}}))
	f.cronJobSuspended(true, "suspended while Tiled stops")

	// Stopped, migrating: the migration fails, the backup is restored from the target.
	for _, p := range f.pods {
		g.Expect(env.Client.Delete(ctxT(t), p)).To(Succeed())
	}
	f.phase(tiledv1alpha1.UpgradeMigrating)
	migrate := f.job(render.StepMigrate)
	f.cronJobSuspended(true, "suspended while the databases migrate")
	f.finish(migrate, 1, migrationFailure)
	f.phase(tiledv1alpha1.UpgradeRestoring)
	restore := f.job(render.StepRestore)
	f.onTargetJob(restore, "restore", u.Backup)
	f.cronJobSuspended(true, "suspended while the backup is restored")
	g.Expect(f.instance(g).Status.Backup.Last.Name).To(Equal(u.Backup), "kept")

	// Restored: the old version serves, the CronJob is resumed, the record says where the backup is.
	f.finish(restore, 0, `{"restored":"`+u.Backup+`"}`)
	f.phase(tiledv1alpha1.UpgradeFailed)
	f.cronJobSuspended(false, "resumed once the old version serves again")
	ti = condition(t, g, f.ns, f.name, controllers.ConditionStalled, metav1.ConditionTrue, upgrade.ReasonMigrationFailed, upgradeWithin,
		"backup "+u.Backup+" was restored")
	m := ti.Status.LastMigration
	g.Expect(m).NotTo(BeNil())
	g.Expect(m.Result).To(Equal(upgrade.ResultRolledBack))
	g.Expect(m.Backup).To(Equal(u.Backup))
	g.Expect(m.BackupTarget).To(Equal(target))
	f.expectServing(upgradeFrom, upgradeReplicas)
	waitQuiet(t, f.op)
	g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, f.ns, f.n.BackupClaim)).To(BeFalse(), "no backup claim: the backup is on the target")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestUpgradeBackupToTarget: with no scheduled backup running, an upgrade of an instance with a
// backup target dumps to it at once and migrates; the CronJob, suspended from the check through the
// migration, is resumed as the new version starts; status.lastMigration names the backup and its
// target. No backup claim is made.
func TestUpgradeBackupToTarget(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "upgrade-target-ok")
	f.withTarget()
	target := backupTarget(f.ns, f.name)

	check := f.startUpgrade()
	f.cronJobSuspended(true, "suspended from the check on")
	f.finish(check, 0, checkReport)
	u := f.phase(tiledv1alpha1.UpgradeBackingUp).Status.Upgrade
	g.Expect(u.Backup).To(MatchRegexp(preUpgradeName))
	dump := f.job(render.StepBackup)
	f.onTargetJob(dump, "backup", u.Backup)
	f.cronJobSuspended(true, "suspended while the upgrade's dump runs")
	f.finish(dump, 0, `{"name":"`+u.Backup+`","instance":"`+f.ns+`/`+f.name+`","tiledVersion":"0.2.14","files":[],"available":"`+u.Backup+`:4096"}`)
	f.phase(tiledv1alpha1.UpgradeStopping)
	for _, p := range f.pods {
		g.Expect(env.Client.Delete(ctxT(t), p)).To(Succeed())
	}
	f.phase(tiledv1alpha1.UpgradeMigrating)
	migrate := f.job(render.StepMigrate)
	f.cronJobSuspended(true, "suspended while the databases migrate")
	f.finish(migrate, 0, migratedReport)
	f.phase(tiledv1alpha1.UpgradeStarting)
	f.cronJobSuspended(false, "resumed as the new version starts on the migrated databases")
	markReady(t, g, f.ns, f.n.Tiled)
	var ti *tiledv1alpha1.TiledInstance
	g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Upgrade).To(BeNil())
		g.Expect(ti.Status.LastMigration).NotTo(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	m := ti.Status.LastMigration
	g.Expect(m.Result).To(Equal(upgrade.ResultSucceeded))
	g.Expect(m.Backup).To(Equal(u.Backup))
	g.Expect(m.BackupTarget).To(Equal(target))
	note := f.eventOnce(upgrade.ReasonMigrated, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("backup " + u.Backup + " on " + target))
	g.Expect(ti.Status.Backup.LastSuccessful.Name).To(Equal(u.Backup))
	condition(t, g, f.ns, f.name, backup.ConditionBackedUp, metav1.ConditionTrue, backup.ReasonBackedUp, upgradeWithin, "backup "+u.Backup)
	f.cronJobSuspended(false, "resumed")
	waitQuiet(t, f.op)
	g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, f.ns, f.n.BackupClaim)).To(BeFalse(), "no backup claim: the backup is on the target")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestUpgradeBackupFollowsANewTarget: spec.backup's target changes while the upgrade's backup Job
// runs (its first target was wrong): the Job goes, and the backup begins again on the new target in
// a Job of its own (named when it begins again: within the same second, the same name); once whole,
// the upgrade goes on with status.upgrade.backupTarget the new one.
func TestUpgradeBackupFollowsANewTarget(t *testing.T) {
	g := NewWithT(t)
	f := newUpgradeFixture(t, g, "upgrade-target-moved")
	f.withTarget()
	check := f.startUpgrade()
	f.finish(check, 0, checkReport)
	first := f.phase(tiledv1alpha1.UpgradeBackingUp).Status.Upgrade
	dump := f.job(render.StepBackup)
	f.onTargetJob(dump, "backup", first.Backup)

	const moved = "facility-backups"
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) { ti.Spec.Backup.Claim.ClaimName = moved })
	target := "claim:" + moved + "/tiled-backups/" + f.ns + "/" + f.name
	var u *tiledv1alpha1.UpgradeStatus
	g.Eventually(func(g Gomega) {
		u = f.instance(g).Status.Upgrade
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.Phase).To(Equal(tiledv1alpha1.UpgradeBackingUp))
		g.Expect(u.BackupTarget).To(Equal(target))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g.Expect(u.Backup).To(MatchRegexp(preUpgradeName))
	f.jobGone(dump.Name)
	again := f.job(render.StepBackup)
	g.Expect(again.Name).NotTo(Equal(dump.Name))
	g.Expect(again.Annotations).To(HaveKeyWithValue(render.AnnotationBackup, u.Backup))
	var claims []string
	for _, v := range again.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	g.Expect(claims).To(Equal([]string{moved}))
	f.cronJobSuspended(true, "suspended while the upgrade's dump runs")

	f.finish(again, 0, `{"name":"`+u.Backup+`","files":[],"available":"`+u.Backup+`:4096"}`)
	ti := f.phase(tiledv1alpha1.UpgradeStopping)
	g.Expect(ti.Status.Upgrade.Backup).To(Equal(u.Backup))
	g.Expect(ti.Status.Upgrade.BackupTarget).To(Equal(target))
	g.Expect(ti.Status.Backup.Target).To(Equal(target))
	g.Expect(ti.Status.Backup.Last.Name).To(Equal(u.Backup))
}
