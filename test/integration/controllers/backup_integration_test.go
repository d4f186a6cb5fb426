package controllers_test

import (
	"maps"
	"slices"
	"strconv"
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
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// Backups and the restore of a new instance on the real apiserver. kube-controller-manager runs the
// job controller (TestMain) but not the cronjob controller: the tests create the backup Jobs from
// the CronJob's jobTemplate as the cronjob controller (or `kubectl tiled backup`) would, and play
// the kubelet for their pods with the upgrade test's helpers (upgradeFixture's jobs, finish and
// events), writing dbtool.sh's report as the pod's termination message.

const (
	backupClaim = "tiled-backups"
	// backupName and olderBackup are two whole backups on the target.
	backupName  = "20261203T023000Z"
	olderBackup = "20261202T023000Z"
)

// backupTarget is status.backup.target of instance ns/name backing up to backupClaim.
func backupTarget(ns, name string) string {
	return "claim:" + backupClaim + "/tiled-backups/" + ns + "/" + name
}

// updateInstance changes the instance's spec with change, retried on conflicts.
func (f *upgradeFixture) updateInstance(change func(*tiledv1alpha1.TiledInstance)) {
	f.g.Eventually(func() error {
		ti := f.instance(f.g)
		change(ti)
		return env.Client.Update(ctxT(f.t), ti)
	}, upgradeWithin, upgradePoll).Should(Succeed())
}

// cronJob waits for the instance's backup CronJob and returns it once check passes on it.
func (f *upgradeFixture) cronJob(check func(g Gomega, cj *batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(f.t), client.ObjectKey{Namespace: f.ns, Name: f.n.BackupCronJob}, cj)).To(Succeed())
		check(g, cj)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	return cj
}

// backupContainer is the one container of the CronJob's pod template.
func backupContainer(g Gomega, cj *batchv1.CronJob) corev1.Container {
	cs := cj.Spec.JobTemplate.Spec.Template.Spec.Containers
	g.Expect(cs).To(HaveLen(1))
	return cs[0]
}

// envOf is the container's environment as a map (values only; references are "").
func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// jobFromCronJob creates the Job the cronjob controller makes for a run scheduled at t: named
// <cronjob>-<minutes since the epoch>, the jobTemplate's labels, annotations and spec, and a
// controller reference to the CronJob. managedBy, when not "", hands the Job to another controller
// (spec.managedBy): the job controller then leaves it, and its pods, to the test.
func (f *upgradeFixture) jobFromCronJob(cj *batchv1.CronJob, t time.Time, managedBy string) *batchv1.Job {
	annotations := maps.Clone(cj.Spec.JobTemplate.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"] = t.UTC().Format(time.RFC3339)
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cj.Namespace, Name: cj.Name + "-" + strconv.FormatInt(t.Unix()/60, 10),
			Labels: maps.Clone(cj.Spec.JobTemplate.Labels), Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))},
		},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	if managedBy != "" {
		j.Spec.ManagedBy = ptr.To(managedBy)
	}
	f.g.Expect(env.Client.Create(ctxT(f.t), j)).To(Succeed())
	return j
}

// lastBackup waits until status.backup.last is the record of Job job and returns the instance.
func (f *upgradeFixture) lastBackup(job string) *tiledv1alpha1.TiledInstance {
	var ti *tiledv1alpha1.TiledInstance
	f.g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Backup).NotTo(BeNil(), "no status.backup")
		g.Expect(ti.Status.Backup.Last).NotTo(BeNil(), "no status.backup.last")
		g.Expect(ti.Status.Backup.Last.Job).To(Equal(job))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	return ti
}

// expectReplicas checks that the Tiled StatefulSet renders replicas (waiting for it).
func (f *upgradeFixture) expectReplicas(replicas int32) *appsv1.StatefulSet {
	var s *appsv1.StatefulSet
	f.g.Eventually(func(g Gomega) {
		s = f.tiledSTS(g)
		g.Expect(s.Spec.Replicas).To(HaveValue(Equal(replicas)))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	return s
}

// TestBackupCronJob: a backup target gives the instance its CronJob, owned by it, with the
// schedule, time zone, retention and claim; a changed schedule changes it, no schedule suspends it
// (@daily, for `kubectl tiled backup`), no target prunes it. BackedUp says NoBackupTarget without a
// target on the managed database and NoBackupYet with one.
func TestBackupCronJob(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "backup-cronjob")
	ns, name := f.ns, f.name
	g.Expect(f.n.BackupCronJob).To(Equal(name + "-backup"))

	// No target on a managed database: no CronJob, BackedUp False.
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionFalse, backup.ReasonNoBackupTarget, upgradeWithin,
		"TiledInstance "+ns+"/"+name, "spec.backup has no target")
	g.Expect(exists(t, &batchv1.CronJob{}, ns, f.n.BackupCronJob)).To(BeFalse())
	g.Expect(f.instance(g).Status.Backup).To(BeNil())

	// A claim target with a schedule, a time zone and a retention.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup = &tiledv1alpha1.BackupSpec{
			Schedule: "30 2 * * *", TimeZone: "America/New_York",
			Retention: &tiledv1alpha1.BackupRetention{Count: ptr.To[int32](14), Days: ptr.To[int32](30)},
			Claim:     &tiledv1alpha1.BackupClaimTarget{ClaimName: backupClaim},
		}
	})
	ti := f.instance(g)
	cj := f.cronJob(func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Schedule).To(Equal("30 2 * * *")) })
	owner := metav1.GetControllerOf(cj)
	g.Expect(owner).NotTo(BeNil(), "the CronJob has no controller")
	g.Expect(owner.Kind).To(Equal("TiledInstance"))
	g.Expect(owner.Name).To(Equal(name))
	g.Expect(owner.UID).To(Equal(ti.UID))
	g.Expect(cj.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelAppInstance, name))
	g.Expect(cj.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelManagedBy, tiledv1alpha1.ManagedByValue))
	g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse()))
	g.Expect(cj.Spec.TimeZone).To(HaveValue(Equal("America/New_York")))
	g.Expect(cj.Spec.ConcurrencyPolicy).To(Equal(batchv1.ForbidConcurrent))
	g.Expect(cj.Spec.StartingDeadlineSeconds).To(HaveValue(BeEquivalentTo(render.BackupStartingDeadlineSeconds)))
	g.Expect(cj.Spec.SuccessfulJobsHistoryLimit).To(HaveValue(BeEquivalentTo(render.BackupJobsHistory)))
	g.Expect(cj.Spec.FailedJobsHistoryLimit).To(HaveValue(BeEquivalentTo(render.BackupJobsHistory)))
	jt := cj.Spec.JobTemplate
	g.Expect(jt.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelStep, render.LabelStepScheduledBackup))
	g.Expect(jt.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelAppInstance, name))
	g.Expect(jt.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelManagedBy, tiledv1alpha1.ManagedByValue))
	g.Expect(jt.Spec.Template.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelStep, render.LabelStepScheduledBackup))
	g.Expect(jt.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(render.JobRetries)), "only a backup that could not reach S3 runs again")
	g.Expect(jt.Spec.PodFailurePolicy).NotTo(BeNil())
	g.Expect(jt.Spec.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	c := backupContainer(g, cj)
	e := envOf(c)
	g.Expect(e).To(HaveKeyWithValue("RETAIN_COUNT", "14"))
	g.Expect(e).To(HaveKeyWithValue("RETAIN_DAYS", "30"))
	g.Expect(e).To(HaveKeyWithValue("TARGET", "dir"))
	g.Expect(e).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled-backups/"+ns+"/"+name))
	g.Expect(e).To(HaveKeyWithValue("TILED_VERSION", "0.2.14"))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "target", MountPath: "/target"}))
	var claim *corev1.PersistentVolumeClaimVolumeSource
	for _, v := range jt.Spec.Template.Spec.Volumes {
		if v.Name == "target" {
			claim = v.PersistentVolumeClaim
		}
	}
	g.Expect(claim).NotTo(BeNil(), "no claim volume named target")
	g.Expect(claim.ClaimName).To(Equal(backupClaim))
	g.Expect(claim.ReadOnly).To(BeFalse())
	pg := &appsv1.StatefulSet{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: f.n.Postgres}, pg)).To(Succeed())
	g.Expect(c.Image).To(Equal(pg.Spec.Template.Spec.Containers[0].Image), "the managed database's image")
	ti = condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin,
		"no backup to "+backupTarget(ns, name)+" has ended yet", `the schedule is "30 2 * * *"`)
	g.Expect(ti.Status.Backup).NotTo(BeNil())
	g.Expect(ti.Status.Backup.Target).To(Equal(backupTarget(ns, name)))
	g.Expect(ti.Status.Backup.Last).To(BeNil())
	g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "a target changes nothing of Tiled")

	// Another schedule and retention: the same CronJob changes.
	uid := cj.UID
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup.Schedule = "15 4 * * 0"
		ti.Spec.Backup.Retention = nil
	})
	cj = f.cronJob(func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("15 4 * * 0"))
		e := envOf(backupContainer(g, cj))
		g.Expect(e).To(HaveKeyWithValue("RETAIN_COUNT", strconv.Itoa(render.DefaultBackupRetainCount)))
		g.Expect(e).NotTo(HaveKey("RETAIN_DAYS"))
	})
	g.Expect(cj.UID).To(Equal(uid), "changed in place")
	g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse()))
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin,
		`the schedule is "15 4 * * 0"`)

	// No schedule: suspended, daily (on demand only), and no time zone.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup.Schedule = ""
		ti.Spec.Backup.TimeZone = ""
	})
	cj = f.cronJob(func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("@daily"))
		g.Expect(cj.Spec.Suspend).To(HaveValue(BeTrue()))
		g.Expect(cj.Spec.TimeZone).To(BeNil())
	})
	g.Expect(cj.UID).To(Equal(uid))
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin,
		"no schedule is set (spec.backup.schedule)", "kubectl tiled backup "+name)

	// A schedule suspended by spec.backup.suspend.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup.Schedule = "@hourly"
		ti.Spec.Backup.Suspend = ptr.To(true)
	})
	f.cronJob(func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("@hourly"))
		g.Expect(cj.Spec.Suspend).To(HaveValue(BeTrue()))
	})
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin,
		`the schedule is "@hourly", suspended (spec.backup.suspend)`)

	// No target: the CronJob is pruned, BackedUp False again, status.backup gone.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) { ti.Spec.Backup = nil })
	g.Eventually(func() bool {
		err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: f.n.BackupCronJob}, &batchv1.CronJob{})
		return apierrors.IsNotFound(err)
	}, upgradeWithin, upgradePoll).Should(BeTrue(), "CronJob %s still exists", f.n.BackupCronJob)
	ti = condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionFalse, backup.ReasonNoBackupTarget, upgradeWithin)
	g.Eventually(func(g Gomega) { g.Expect(f.instance(g).Status.Backup).To(BeNil()) }, upgradeWithin, upgradePoll).Should(Succeed())
	g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue())
	f.expectServing(upgradeFrom, upgradeReplicas)
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestBackupResults: backups taken by Jobs made from the CronJob end, and the instance records
// them: a whole one (status.backup.last, lastSuccessful, available; BackedUp True; Event BackedUp),
// then a failed one (last Failed with its message, lastSuccessful kept; BackedUp False; Event
// BackupFailed), neither touching Tiled. Last, a Job whose pod the test ends before the Job does
// shows that the Job's end alone (the Job watch) reaches the instance.
func TestBackupResults(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newUpgradeFixture(t, g, "backup-results")
	ns, name := f.ns, f.name
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup = &tiledv1alpha1.BackupSpec{Schedule: "30 2 * * *", Claim: &tiledv1alpha1.BackupClaimTarget{ClaimName: backupClaim}}
	})
	cj := f.cronJob(func(Gomega, *batchv1.CronJob) {})
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin)
	waitQuiet(t, f.op)
	sts := f.tiledSTS(g)
	stsGeneration := sts.Generation
	g.Expect(sts.Spec.Replicas).To(HaveValue(BeEquivalentTo(upgradeReplicas)))
	backupJobs := func(g Gomega) []batchv1.Job { return f.jobs(g, render.LabelStepScheduledBackup) }

	// A whole backup: the report is recorded, BackedUp True, one BackedUp Event.
	scheduled := time.Date(2026, 12, 3, 7, 30, 0, 0, time.UTC)
	first := f.jobFromCronJob(cj, scheduled, "")
	g.Expect(backupJobs(g)).To(HaveLen(1), "the CronJob's Job carries the step label")
	report := `{"name":"` + backupName + `","instance":"` + ns + `/` + name + `","tiledVersion":"0.2.20","seconds":3,"bytes":1234,"files":[],` +
		`"available":"` + backupName + `:1234,` + olderBackup + `:999"}`
	f.finish(first, 0, report)
	ti := f.lastBackup(first.Name)
	st := ti.Status.Backup
	g.Expect(st.Target).To(Equal(backupTarget(ns, name)))
	last := st.Last
	g.Expect(last.Result).To(Equal(backup.ResultSucceeded))
	g.Expect(last.Name).To(Equal(backupName))
	g.Expect(last.Bytes).To(BeEquivalentTo(1234))
	g.Expect(last.Seconds).To(BeEquivalentTo(3))
	g.Expect(last.TiledVersion).To(Equal("0.2.20"))
	g.Expect(last.Message).To(BeEmpty())
	g.Expect(last.CompletionTime.Time).To(BeTemporally("~", time.Now(), time.Minute))
	g.Expect(st.LastSuccessful).To(Equal(last))
	g.Expect(st.Available).To(Equal([]tiledv1alpha1.AvailableBackup{{Name: backupName, Bytes: 1234}, {Name: olderBackup, Bytes: 999}}))
	g.Expect(st.Restore).To(BeNil())
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionTrue, backup.ReasonBackedUp, upgradeWithin,
		"backup "+backupName+" (1234 bytes) ended at", "on "+backupTarget(ns, name))
	note := f.eventOnce(backup.ReasonBackedUp, corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("backup " + backupName))
	g.Expect(exists(t, &batchv1.Job{}, ns, first.Name)).To(BeTrue(), "the CronJob's Jobs are not the operator's to prune")

	// A failed backup: recorded with its message, the last whole one kept, one BackupFailed Event.
	failure := "pg_dump of the catalog database failed: pg_dump: error: connection to server at \"solo-postgres\" (10.0.0.7), port 5432 failed: FATAL:  the database system is starting up"
	second := f.jobFromCronJob(cj, scheduled.Add(24*time.Hour), "")
	f.finish(second, 1, failure)
	ti = f.lastBackup(second.Name)
	st = ti.Status.Backup
	g.Expect(st.Last.Result).To(Equal(backup.ResultFailed))
	g.Expect(st.Last.Message).To(Equal(failure))
	g.Expect(st.Last.Name).To(BeEmpty())
	g.Expect(st.Last.CompletionTime.Time).NotTo(BeTemporally("<", last.CompletionTime.Time))
	g.Expect(st.LastSuccessful).To(Equal(last), "the last whole backup is kept")
	g.Expect(st.Available).To(HaveLen(2), "a failed backup leaves the list as it was")
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionFalse, backup.ReasonBackupFailed, upgradeWithin,
		"backup Job "+second.Name+" failed at", failure, "the last whole backup is "+backupName, "Tiled is not affected")
	note = f.eventOnce(backup.ReasonBackupFailed, corev1.EventTypeWarning)
	g.Expect(note).To(ContainSubstring("pg_dump of the catalog database failed"))
	g.Expect(f.events(g, backup.ReasonBackedUp)).To(HaveLen(1), "no second BackedUp Event")

	// Tiled is untouched: same StatefulSet generation and replicas, still Ready, not Stalled.
	waitQuiet(t, f.op)
	sts = f.tiledSTS(g)
	g.Expect(sts.Generation).To(Equal(stsGeneration), "the Tiled StatefulSet changed")
	g.Expect(sts.Spec.Replicas).To(HaveValue(BeEquivalentTo(upgradeReplicas)))
	ti = f.instance(g)
	g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "a failed backup never makes the instance unready")
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	for _, p := range f.pods {
		g.Expect(exists(t, &corev1.Pod{}, ns, p.Name)).To(BeTrue(), "Tiled pod %s", p.Name)
	}

	// The Job's end alone reaches the instance. This Job is handed to another controller
	// (spec.managedBy), so the test plays the job controller too: its pod ends first (a pod update
	// the operator hears, with the Job still running: nothing to record), the operator goes quiet,
	// and then only the Job's status changes, as the job controller would write it.
	third := f.jobFromCronJob(cj, scheduled.Add(48*time.Hour), "example.org/kubelet-player")
	third = f.getJob(third.Name)
	pod := f.podOf(third)
	thirdName := "20261205T023000Z"
	began := metav1.NewTime(time.Now().Add(-5 * time.Second).Truncate(time.Second))
	ended := metav1.NewTime(time.Now().Truncate(time.Second))
	setPodStatus(t, g, pod, corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Started: ptr.To(false),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: began, FinishedAt: ended,
			Message: `{"name":"` + thirdName + `","instance":"` + ns + `/` + name + `","tiledVersion":"0.2.20","seconds":4,"bytes":2048,"files":[],` +
				`"available":"` + thirdName + `:2048,` + backupName + `:1234"}`,
		}},
	}}})
	waitQuiet(t, f.op)
	g.Expect(f.instance(g).Status.Backup.Last.Job).To(Equal(second.Name), "recorded before the Job ended")
	g.Eventually(func() error {
		j := f.getJob(third.Name)
		j.Status = batchv1.JobStatus{
			StartTime: &began, CompletionTime: &ended, Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
			UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
			Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastProbeTime: ended, LastTransitionTime: ended},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastProbeTime: ended, LastTransitionTime: ended},
			},
		}
		return env.Client.Status().Update(ctxT(t), j)
	}, upgradeWithin, upgradePoll).Should(Succeed())
	ti = f.lastBackup(third.Name)
	st = ti.Status.Backup
	g.Expect(st.Last.Result).To(Equal(backup.ResultSucceeded))
	g.Expect(st.Last.Name).To(Equal(thirdName))
	g.Expect(st.Last.CompletionTime.Time).To(BeTemporally("==", ended.Time))
	g.Expect(st.LastSuccessful.Name).To(Equal(thirdName))
	g.Expect(st.Available).To(Equal([]tiledv1alpha1.AvailableBackup{{Name: thirdName, Bytes: 2048}, {Name: backupName, Bytes: 1234}}))
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionTrue, backup.ReasonBackedUp, upgradeWithin, "backup "+thirdName)
	g.Eventually(func(g Gomega) {
		g.Expect(f.events(g, backup.ReasonBackedUp)).To(HaveLen(2))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	waitQuiet(t, f.op)
	g.Expect(f.events(g, backup.ReasonBackedUp)).To(HaveLen(2))
	g.Expect(f.events(g, backup.ReasonBackupFailed)).To(HaveLen(1))
	g.Expect(f.tiledSTS(g).Generation).To(Equal(stsGeneration))
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// getJob reads Job name.
func (f *upgradeFixture) getJob(name string) *batchv1.Job {
	j := &batchv1.Job{}
	f.g.Expect(env.Client.Get(ctxT(f.t), client.ObjectKey{Namespace: f.ns, Name: name}, j)).To(Succeed())
	return j
}

// podOf creates the pod the job controller would for j (which another controller manages): the
// template's labels and spec, the Job's name and uid as labels, a controller reference to it.
func (f *upgradeFixture) podOf(j *batchv1.Job) *corev1.Pod {
	labels := maps.Clone(j.Spec.Template.Labels)
	labels[batchv1.JobNameLabel] = j.Name
	labels[batchv1.ControllerUidLabel] = string(j.UID)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: j.Namespace, Name: j.Name + "-x7k2p", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
	f.g.Expect(env.Client.Create(ctxT(f.t), p)).To(Succeed())
	return p
}

// newRestoreFixture creates a new standalone instance backing up to backupClaim, with
// spec.backup.restoreFrom from, and returns it as an upgradeFixture (for its helpers).
func newRestoreFixture(t *testing.T, g Gomega, prefix, from string) *upgradeFixture {
	ns := newNamespace(t, g, prefix)
	f := &upgradeFixture{t: t, g: g, op: startOperator(t, ns), ns: ns, name: "solo"}
	ti := soloInstance(ns, f.name, upgradeTo, &tiledv1alpha1.BackupSpec{Claim: &tiledv1alpha1.BackupClaimTarget{ClaimName: backupClaim}, RestoreFrom: from})
	createAll(t, g, ti)
	f.n = fleet.NamesOf(ti)
	return f
}

// bootstrapJob waits for the one bootstrap Job, other than the Jobs named not, and checks it
// restores backup from the target into empty databases only.
func (f *upgradeFixture) bootstrapJob(backup string, not ...string) *batchv1.Job {
	var j *batchv1.Job
	f.g.Eventually(func(g Gomega) {
		var list []batchv1.Job
		for _, x := range f.jobs(g, render.StepBootstrap) {
			if !slices.Contains(not, x.Name) {
				list = append(list, x)
			}
		}
		g.Expect(list).To(HaveLen(1), "bootstrap Jobs")
		j = &list[0]
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g := f.g
	g.Expect(j.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelStep, string(render.StepBootstrap)))
	g.Expect(j.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelAppComponent, render.ComponentJob))
	g.Expect(j.Annotations).To(HaveKeyWithValue(render.AnnotationBackup, backup))
	owner := metav1.GetControllerOf(j)
	g.Expect(owner).NotTo(BeNil())
	g.Expect(owner.Kind).To(Equal("TiledInstance"))
	g.Expect(j.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(render.JobRetries)))
	g.Expect(j.Spec.PodFailurePolicy).NotTo(BeNil())
	g.Expect(j.Spec.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	g.Expect(j.Spec.Template.Spec.Containers).To(HaveLen(1))
	c := j.Spec.Template.Spec.Containers[0]
	e := envOf(c)
	g.Expect(e).To(HaveKeyWithValue("BACKUP", backup))
	g.Expect(e).To(HaveKeyWithValue("RESTORE_IF_EMPTY", "1"))
	g.Expect(e).To(HaveKeyWithValue("TILED_VERSION", "0.2.20"))
	g.Expect(e).To(HaveKeyWithValue("TARGET", "dir"))
	g.Expect(e).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled-backups/"+f.ns+"/"+f.name))
	g.Expect(c.Command).To(ContainElement("restore"))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "target", MountPath: "/target"}))
	return j
}

// TestBackupRestoreNewInstance: a new instance with restoreFrom: latest keeps Tiled stopped while
// a bootstrap Job restores it; a corrupt backup stalls it (Tiled still stopped); another backup
// named is a new Job, which restores it: recorded once with an Event, Tiled started, the Job
// pruned, and never run again.
func TestBackupRestoreNewInstance(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newRestoreFixture(t, g, "backup-restore", "latest")
	ns, name := f.ns, f.name

	// Restoring: Tiled rendered with no replicas, the bootstrap Job restores latest.
	latest := f.bootstrapJob("latest")
	f.expectReplicas(0)
	g.Expect(containerImage(f.tiledSTS(g), "tiled")).To(Equal(upgradeTo))
	ti := condition(t, g, ns, name, controllers.ConditionReconciling, metav1.ConditionTrue, backup.ReasonRestoring, upgradeWithin,
		ns+"/"+name, "backup latest", backupTarget(ns, name))
	g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeFalse())
	g.Expect(exists(t, &batchv1.CronJob{}, ns, f.n.BackupCronJob)).To(BeTrue(), "the backup CronJob exists from the start")
	condition(t, g, ns, name, backup.ConditionBackedUp, metav1.ConditionUnknown, backup.ReasonNoBackupYet, upgradeWithin)

	// The latest backup is corrupt: Stalled, naming the instance, the field and the reason; Tiled
	// still stopped; the Job is kept.
	corrupt := "backup " + backupName + " is corrupt: catalog.dump: FAILED (sha256 mismatch); nothing was restored"
	f.finish(latest, 1, corrupt)
	ti = condition(t, g, ns, name, controllers.ConditionStalled, metav1.ConditionTrue, backup.ReasonRestoreFailed, upgradeWithin,
		"TiledInstance "+ns+"/"+name, "spec.backup.restoreFrom=latest", "(Job "+latest.Name+")", corrupt, "kubectl tiled backups "+name)
	g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeFalse())
	g.Expect(ti.Status.Backup).NotTo(BeNil())
	g.Expect(ti.Status.Backup.Restore).To(BeNil())
	note := f.eventOnce(backup.ReasonRestoreFailed, corev1.EventTypeWarning)
	g.Expect(note).To(ContainSubstring(corrupt))
	f.expectReplicas(0)
	g.Expect(exists(t, &batchv1.Job{}, ns, latest.Name)).To(BeTrue(), "the failed Job stays while restoreFrom names it")
	g.Expect(f.jobs(g, render.StepBootstrap)).To(HaveLen(1), "a failed restore is not retried")

	// Another backup named: a new Job; the failed one goes.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) { ti.Spec.Backup.RestoreFrom = olderBackup })
	named := f.bootstrapJob(olderBackup, latest.Name)
	g.Expect(named.Name).NotTo(Equal(latest.Name))
	f.jobGone(latest.Name)
	condition(t, g, ns, name, controllers.ConditionReconciling, metav1.ConditionTrue, backup.ReasonRestoring, upgradeWithin, "backup "+olderBackup)
	g.Expect(meta.FindStatusCondition(f.instance(g).Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	f.expectReplicas(0)

	// Restored: recorded, one Restored Event, Tiled starts, the Job is pruned.
	f.finish(named, 0, `{"restored":"`+olderBackup+`","tiledVersion":"0.2.20","seconds":2}`)
	g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Backup).NotTo(BeNil())
		g.Expect(ti.Status.Backup.Restore).NotTo(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	rec := *ti.Status.Backup.Restore
	g.Expect(rec.Backup).To(Equal(olderBackup))
	g.Expect(rec.Result).To(Equal(backup.ResultRestored))
	g.Expect(rec.CompletionTime.Time).To(BeTemporally("~", time.Now(), time.Minute))
	g.Expect(rec.Seconds).To(BeNumerically("<", 60), "the Job's run time")
	g.Expect(ti.Status.Backup.Target).To(Equal(backupTarget(ns, name)))
	note = f.eventOnce("Restored", corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("restored the databases of " + ns + "/" + name + " from backup " + olderBackup))
	f.expectReplicas(upgradeReplicas)
	f.jobGone(named.Name)
	g.Eventually(func(g Gomega) {
		ti := f.instance(g)
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
		if c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReconciling); c != nil {
			g.Expect(c.Reason).NotTo(Equal(backup.ReasonRestoring))
		}
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g.Expect(f.instance(g).Status.Upgrade).To(BeNil(), "a restore is not an upgrade")

	// Never again: a later change of restoreFrom, and of anything else, runs no bootstrap Job.
	f.updateInstance(func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup.RestoreFrom = "latest"
		ti.Spec.Tiled.Replicas = ptr.To[int32](upgradeReplicas + 1)
	})
	f.expectReplicas(upgradeReplicas + 1)
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepBootstrap)).To(BeEmpty())
	ti = f.instance(g)
	g.Expect(ti.Status.Backup.Restore).To(HaveValue(Equal(rec)), "the record stays as it was")
	g.Expect(f.events(g, "Restored")).To(HaveLen(1))
	g.Expect(f.events(g, backup.ReasonRestoreFailed)).To(HaveLen(1))

	// Nor after the operator restarts.
	f.op.stop()
	f.op = startOperator(t, ns)
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepBootstrap)).To(BeEmpty())
	f.expectReplicas(upgradeReplicas + 1)
	g.Expect(f.instance(g).Status.Backup.Restore).To(HaveValue(Equal(rec)))
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestBackupRestoreSkipped: the databases of a re-added instance already hold a catalog: the
// bootstrap Job reports the restore skipped; it is recorded as Skipped with an Event RestoreSkipped,
// and Tiled starts on the catalog it had.
func TestBackupRestoreSkipped(t *testing.T) {
	g := NewWithT(t)
	f := newRestoreFixture(t, g, "backup-skip", "latest")
	ns, name := f.ns, f.name
	j := f.bootstrapJob("latest")
	f.expectReplicas(0)
	f.finish(j, 0, `{"skipped":"`+backupName+`","tables":12}`)
	var ti *tiledv1alpha1.TiledInstance
	g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Backup).NotTo(BeNil())
		g.Expect(ti.Status.Backup.Restore).NotTo(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	rec := ti.Status.Backup.Restore
	g.Expect(rec.Result).To(Equal(backup.ResultSkipped))
	g.Expect(rec.Backup).To(Equal(backupName))
	note := f.eventOnce("RestoreSkipped", corev1.EventTypeNormal)
	g.Expect(note).To(ContainSubstring("the databases of " + ns + "/" + name + " already hold a catalog"))
	g.Expect(note).To(ContainSubstring("backup " + backupName + " was not restored"))
	g.Expect(f.events(g, "Restored")).To(BeEmpty())
	f.expectReplicas(upgradeReplicas)
	f.jobGone(j.Name)
	waitQuiet(t, f.op)
	g.Expect(f.jobs(g, render.StepBootstrap)).To(BeEmpty())
	g.Expect(meta.FindStatusCondition(f.instance(g).Status.Conditions, controllers.ConditionStalled)).To(BeNil())
}

// TestBackupRestoreTriesAgain: a bootstrap pod that could not reach its target (dbtool.sh exits with
// render.ExitTryAgain before it changes anything) is run again by the job controller, under the
// Job's pod failure policy: the instance keeps restoring, saying why, and is not Stalled; the next
// pod's report is the one recorded. A pod that fails otherwise fails the Job at once
// (TestBackupRestoreNewInstance).
func TestBackupRestoreTriesAgain(t *testing.T) {
	g := NewWithT(t)
	start := time.Now()
	f := newRestoreFixture(t, g, "backup-again", "latest")
	ns, name := f.ns, f.name
	j := f.bootstrapJob("latest")
	first := f.jobPods(j, 1)[0]
	unanswered := "s3://tiled-backups/" + ns + "/" + name + " at http://s3:7070 did not answer (curl exit 7: Failed to connect to s3 port 7070): a Job's pod that stops here is run again"
	f.endPod(first, render.ExitTryAgain, unanswered)

	// The job controller runs a second pod (after its back-off); the Job is not failed meanwhile.
	pods := f.jobPods(j, 2)
	g.Expect(pods[0].Name).To(Equal(first.Name))
	cur := f.getJob(j.Name)
	for _, c := range cur.Status.Conditions {
		g.Expect(c.Type).NotTo(Equal(batchv1.JobFailed), "Job %s failed after a pod that could not reach S3", j.Name)
	}
	ti := condition(t, g, ns, name, controllers.ConditionReconciling, metav1.ConditionTrue, backup.ReasonRestoring, upgradeWithin,
		"backup latest", "Job "+j.Name+" runs again, its last pod stopped: "+unanswered)
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	f.expectReplicas(0)

	// The second pod restores: its report, not the first pod's message, is recorded.
	f.endPod(pods[1], 0, `{"restored":"`+backupName+`","tiledVersion":"0.2.20","seconds":2}`)
	g.Eventually(func(g Gomega) {
		ti = f.instance(g)
		g.Expect(ti.Status.Backup).NotTo(BeNil())
		g.Expect(ti.Status.Backup.Restore).NotTo(BeNil())
	}, upgradeWithin, upgradePoll).Should(Succeed())
	g.Expect(ti.Status.Backup.Restore.Backup).To(Equal(backupName), "the report of the pod that restored")
	g.Expect(ti.Status.Backup.Restore.Result).To(Equal(backup.ResultRestored))
	g.Expect(f.eventOnce("Restored", corev1.EventTypeNormal)).To(ContainSubstring("from backup " + backupName))
	g.Expect(f.events(g, backup.ReasonRestoreFailed)).To(BeEmpty())
	f.expectReplicas(upgradeReplicas)
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}
