package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// The golden files of testdata/backups are the table of `kubectl tiled backups`; -update (the flag
// of importhelm_test.go) rewrites them too.

const backupNS = "nsls2"

// testNow is the clock of the tests: AGE is measured against it.
var testNow = time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC)

// useClient makes the backup commands use c, and the clock testNow, until the test ends.
func useClient(t *testing.T, c client.WithWatch) {
	t.Helper()
	oldClient, oldClock := clientFor, clock
	clientFor = func(*genericclioptions.ConfigFlags) (client.WithWatch, error) { return c, nil }
	clock = func() time.Time { return testNow }
	t.Cleanup(func() { clientFor, clock = oldClient, oldClock })
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func fakeClient(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

// instance is a TiledInstance of cluster nsls2 (short name short) with the given backup spec and
// status.
func instance(short string, spec *v1alpha1.BackupSpec, status *v1alpha1.BackupStatus) *v1alpha1.TiledInstance {
	ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: backupNS, Name: names.Instance("nsls2", short),
		Labels: map[string]string{v1alpha1.LabelCluster: "nsls2", v1alpha1.LabelInstance: short}}}
	ti.Spec.Backup = spec
	ti.Status.Backup = status
	return ti
}

func claimTarget(schedule string) *v1alpha1.BackupSpec {
	return &v1alpha1.BackupSpec{Schedule: schedule, Claim: &v1alpha1.BackupClaimTarget{ClaimName: "tiled-backups"}}
}

// backupCronJobOf is the CronJob the operator would render for instance ti (as far as these tests
// need it).
func backupCronJobOf(ti *v1alpha1.TiledInstance) *batchv1.CronJob {
	labels := map[string]string{
		v1alpha1.LabelAppName: "tiled", v1alpha1.LabelAppInstance: ti.Name, v1alpha1.LabelAppComponent: "backups",
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelInstance: ti.Labels[v1alpha1.LabelInstance],
	}
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ti.Namespace, Name: names.For(ti.Namespace, ti.Name).BackupCronJob,
			UID: "cronjob-uid", Labels: labels},
		Spec: batchv1.CronJobSpec{
			Schedule: "30 2 * * *",
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"tiled.blueskyproject.io/target": "claim"}},
				Spec: batchv1.JobSpec{
					BackoffLimit:          ptr.To[int32](0),
					ActiveDeadlineSeconds: ptr.To[int64](3600),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Containers:    []corev1.Container{{Name: "backup", Image: "postgres:17", Command: []string{"/bin/sh", "-c", "backup"}}},
						},
					},
				},
			},
		},
	}
}

// manifestJSON is the report render/dbtool.sh backup leaves as termination message: the backup's
// manifest, plus the whole backups after pruning.
const manifestJSON = `{"name":"20261203T093000Z","instance":"nsls2/nsls2-chx","tiledVersion":"0.2.20","revisions":{"catalog":"ed3aab71aad8"},` +
	`"time":"2026-12-03T09:30:03Z","seconds":3,"bytes":12897485,` +
	`"files":[{"database":"catalog","file":"catalog.dump","bytes":12582912,"sha256":"ab"},{"database":"auth","file":"auth.dump","bytes":314573,"sha256":"cd"}],` +
	`"available":"20261203T093000Z:12897485,20261202T093000Z:12000000"}`

// olderManifest is a manifest without "bytes" (the upgrade's backup before dbtool.sh): its files add up.
const olderManifest = `{"name":"20261203T093000Z","instance":"nsls2/nsls2-chx","tiledVersion":"0.2.20","time":"2026-12-03T09:30:03Z","seconds":3,` +
	`"files":[{"database":"catalog","file":"catalog.dump","bytes":12582912,"sha256":"ab"},{"database":"auth","file":"auth.dump","bytes":314573,"sha256":"cd"}]}`

func TestJobFromCronJob(t *testing.T) {
	at := time.Unix(1796290200, 0)
	for _, tc := range []struct {
		name, instance, want string
	}{
		{name: "short", instance: "nsls2-chx", want: "nsls2-chx-backup-manual-1796290200"},
		{name: "CronJob name of 52 characters", instance: strings.Repeat("a", 60),
			want: names.Object(names.For(backupNS, strings.Repeat("a", 60)).BackupCronJob, "manual-1796290200", 63)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := instance("chx", claimTarget(""), nil)
			ti.Name = tc.instance
			cj := backupCronJobOf(ti)
			job := jobFromCronJob(cj, at)
			g.Expect(job.Name).To(Equal(tc.want))
			g.Expect(len(job.Name)).To(BeNumerically("<=", 63), "a label value of its pods")
			g.Expect(job.Name).To(ContainSubstring("-manual-1796290200"))
			g.Expect(job.Namespace).To(Equal(backupNS))
			g.Expect(job.Labels).To(Equal(cj.Spec.JobTemplate.Labels))
			g.Expect(job.Annotations).To(Equal(map[string]string{
				"cronjob.kubernetes.io/instantiate": "manual", "tiled.blueskyproject.io/target": "claim"}))
			// As kubectl create job --from=cronjob sets it: a controller, without blockOwnerDeletion.
			g.Expect(job.OwnerReferences).To(Equal([]metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob",
				Name: cj.Name, UID: "cronjob-uid", Controller: ptr.To(true)}}))
			g.Expect(job.Spec).To(Equal(cj.Spec.JobTemplate.Spec))
			// A copy: the CronJob is not changed through the Job.
			job.Spec.Template.Spec.Containers[0].Image = "other"
			job.Labels["x"] = "y"
			g.Expect(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image).To(Equal("postgres:17"))
			g.Expect(cj.Spec.JobTemplate.Labels).NotTo(HaveKey("x"))
		})
	}
	// The template's own instantiate annotation wins, as in kubectl.
	cj := backupCronJobOf(instance("chx", claimTarget(""), nil))
	cj.Spec.JobTemplate.Annotations["cronjob.kubernetes.io/instantiate"] = "other"
	NewWithT(t).Expect(jobFromCronJob(cj, at).Annotations).To(HaveKeyWithValue("cronjob.kubernetes.io/instantiate", "other"))
}

var jobCreated = regexp.MustCompile(`^job\.batch/(nsls2-chx-backup-manual-[0-9]+) created\n`)

func TestBackupCreatesJob(t *testing.T) {
	for _, arg := range []string{"nsls2-chx", "chx"} {
		t.Run(arg, func(t *testing.T) {
			g := NewWithT(t)
			ti := instance("chx", claimTarget("30 2 * * *"), nil)
			cj := backupCronJobOf(ti)
			c := fakeClient(t, nil, ti, cj)
			useClient(t, c)
			before := time.Now().Unix()
			code, out, errOut := runCmd("", "backup", arg, "-n", backupNS)
			g.Expect(errOut).To(BeEmpty())
			g.Expect(code).To(Equal(0))
			m := jobCreated.FindStringSubmatch(out)
			g.Expect(m).NotTo(BeNil(), out)
			g.Expect(out).To(Equal(m[0]), "only the Job's name without --wait")

			var job batchv1.Job
			g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: m[1]}, &job)).To(Succeed())
			g.Expect(job.Name).To(BeElementOf(manualJobName(cj.Name, time.Unix(before, 0)), manualJobName(cj.Name, time.Unix(before+1, 0))))
			g.Expect(job.OwnerReferences).To(HaveLen(1))
			g.Expect(job.OwnerReferences[0].Kind).To(Equal("CronJob"))
			g.Expect(job.Annotations).To(HaveKeyWithValue("cronjob.kubernetes.io/instantiate", "manual"))
			g.Expect(job.Spec.Template.Spec.Containers).To(Equal(cj.Spec.JobTemplate.Spec.Template.Spec.Containers))
		})
	}
}

// A backup is taken beside an upgrade that failed and was undone (the old version serves again), and
// after a restore in place or a lost catalog's restore ended.
func TestBackupAfterALifecycleStep(t *testing.T) {
	undone := instance("chx", claimTarget(""), nil)
	undone.Status.Upgrade = &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeFailed, FromImage: "tiled:0.2.14", ToImage: "tiled:0.2.20"}
	restored := instance("chx", claimTarget(""), nil)
	restored.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{Phase: v1alpha1.InPlaceRestoreSucceeded}
	refused := instance("chx", claimTarget(""), nil)
	refused.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{Phase: v1alpha1.InPlaceRestoreRefused}
	recovered := instance("chx", claimTarget(""), nil)
	recovered.Status.CatalogLost = &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostRestored}
	for name, ti := range map[string]*v1alpha1.TiledInstance{"upgrade undone": undone, "restored in place": restored,
		"restore refused": refused, "catalog restored": recovered} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(backupRefusal(ti)).To(Succeed())
			useClient(t, fakeClient(t, nil, ti, backupCronJobOf(ti)))
			code, out, errOut := runCmd("", "backup", "chx", "-n", backupNS)
			g.Expect(errOut).To(BeEmpty())
			g.Expect(code).To(Equal(0))
			g.Expect(jobCreated.FindStringSubmatch(out)).NotTo(BeNil(), out)
		})
	}
}

func TestBackupErrors(t *testing.T) {
	chx := instance("chx", claimTarget(""), nil)
	foreign := backupCronJobOf(chx)
	foreign.Labels = nil
	twin := instance("chx", nil, nil)
	twin.Name = "other-chx"
	upgrading := instance("chx", claimTarget(""), nil)
	upgrading.Status.Upgrade = &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeMigrating, FromImage: "tiled:0.2.14", ToImage: "tiled:0.2.20", FromVersion: "0.2.14", ToVersion: "0.2.20"}
	restoring := instance("chx", claimTarget(""), nil)
	restoring.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{Phase: v1alpha1.InPlaceRestoreRestoring}
	lost := instance("chx", claimTarget(""), nil)
	lost.Status.CatalogLost = &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled}
	for _, tc := range []struct {
		name   string
		objs   []client.Object
		args   []string
		stderr string
		usage  bool
	}{
		{name: "no instance", args: []string{"nsls2-chx"},
			stderr: `error: TiledInstance "nsls2-chx" not found in namespace "nsls2"` + "\n"},
		{name: "no target", objs: []client.Object{instance("chx", &v1alpha1.BackupSpec{Schedule: ""}, nil)}, args: []string{"chx"},
			stderr: "error: TiledInstance nsls2/nsls2-chx has no backup target: its spec.backup sets neither claim nor s3, so the operator takes no backups of it\n"},
		{name: "no spec.backup", objs: []client.Object{instance("chx", nil, nil)}, args: []string{"nsls2-chx"},
			stderr: "error: TiledInstance nsls2/nsls2-chx has no backup target: its spec.backup sets neither claim nor s3, so the operator takes no backups of it\n"},
		{name: "no CronJob yet", objs: []client.Object{chx}, args: []string{"nsls2-chx"},
			stderr: "error: TiledInstance nsls2/nsls2-chx has a backup target but no backup CronJob (nsls2-chx-backup): the operator has not created it (yet); see kubectl describe tiledinstance nsls2-chx -n nsls2\n"},
		{name: "not the operator's CronJob", objs: []client.Object{chx, foreign}, args: []string{"nsls2-chx"},
			stderr: "error: CronJob nsls2/nsls2-chx-backup is not the operator's backup CronJob (it has no label app.kubernetes.io/managed-by=tiled-operator)\n"},
		{name: "upgrading", objs: []client.Object{upgrading, backupCronJobOf(upgrading)}, args: []string{"chx"},
			stderr: "error: TiledInstance nsls2/nsls2-chx is upgrading from 0.2.14 to 0.2.20 (status.upgrade.phase Migrating): its backups wait until the upgrade ends, and the upgrade takes its own backup before it migrates; take one after it (kubectl tiled status nsls2-chx -n nsls2)\n"},
		{name: "restoring in place", objs: []client.Object{restoring, backupCronJobOf(restoring)}, args: []string{"chx"},
			stderr: "error: TiledInstance nsls2/nsls2-chx is being restored in place (status.inPlaceRestore.phase Restoring): its backups wait until the restore ends, and the restore takes its own backup first; take one after it (kubectl tiled status nsls2-chx -n nsls2)\n"},
		{name: "catalog lost", objs: []client.Object{lost, backupCronJobOf(lost)}, args: []string{"chx"},
			stderr: "error: TiledInstance nsls2/nsls2-chx has lost its catalog (status.catalogLost.phase Stalled): a backup now would dump the database that replaced it, and its pruning could delete the backups that restore it; restore first (kubectl tiled status nsls2-chx -n nsls2 names the backup)\n"},
		{name: "ambiguous short name", objs: []client.Object{chx, twin}, args: []string{"chx"},
			stderr: `error: instance "chx" is ambiguous in namespace "nsls2": name one of nsls2-chx, other-chx` + "\n"},
		{name: "no argument", args: []string{}, stderr: "error: expected INSTANCE, got 0 argument(s)", usage: true},
		{name: "timeout without wait", args: []string{"chx", "--timeout", "1m"}, stderr: "error: --timeout is how long --wait waits: give --wait too", usage: true},
		{name: "zero timeout", args: []string{"chx", "--wait", "--timeout", "0s"}, stderr: "error: --timeout must be positive", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			useClient(t, fakeClient(t, nil, tc.objs...))
			expectRefused(g, "backup", tc.args, tc.stderr, tc.usage)
		})
	}
}

// finishing is a fake client whose backup Jobs finish as they are created: their pod (when pod is
// not nil) terminates with the given state, and the Job's condition follows. With record, the
// instance's status.backup.last then names the Job, as the operator records it.
func finishing(t *testing.T, pod *corev1.ContainerStateTerminated, condition batchv1.JobCondition, record *v1alpha1.TiledInstance, objs ...client.Object) client.WithWatch {
	t.Helper()
	return fakeClient(t, &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return c.Create(ctx, obj, opts...)
		}
		if err := c.Create(ctx, job, opts...); err != nil {
			return err
		}
		if pod != nil {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x1", Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
				Spec:       job.Spec.Template.Spec,
			}
			if err := c.Create(ctx, p); err != nil {
				return err
			}
			p.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "backup", State: corev1.ContainerState{Terminated: pod}}}}
			if pod.ExitCode != 0 {
				p.Status.Phase = corev1.PodFailed
			}
			if err := c.Status().Update(ctx, p); err != nil {
				return err
			}
		}
		done := job.DeepCopy()
		done.Status.Conditions = []batchv1.JobCondition{condition}
		if err := c.Status().Update(ctx, done); err != nil {
			return err
		}
		if record != nil {
			ti := &v1alpha1.TiledInstance{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(record), ti); err != nil {
				return err
			}
			ti.Status.Backup.Last.Job = job.Name
			return c.Update(ctx, ti)
		}
		return nil
	}}, objs...)
}

func TestBackupWait(t *testing.T) {
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	failed := batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}
	chx := instance("chx", claimTarget(""), nil)
	recorded := instance("chx", claimTarget(""), &v1alpha1.BackupStatus{Last: &v1alpha1.BackupRecord{
		Name: "20261203T093000Z", Job: "JOB", Result: "Succeeded", Bytes: 2048, Seconds: 7}})
	for _, tc := range []struct {
		name     string
		ti       *v1alpha1.TiledInstance
		pod      *corev1.ContainerStateTerminated
		cond     batchv1.JobCondition
		code     int
		stdout   string // after the Job's line
		stderr   string
		recordAs bool // the instance's status.backup.last names the Job
	}{
		{name: "succeeded", ti: chx, pod: &corev1.ContainerStateTerminated{ExitCode: 0, Message: manifestJSON}, cond: complete,
			stdout: "backup 20261203T093000Z: 12.3 MiB (12897485 bytes) in 3s\n"},
		{name: "manifest with bytes", ti: chx, pod: &corev1.ContainerStateTerminated{ExitCode: 0, Message: `{"name":"20261203T093000Z","bytes":999,"seconds":1}`}, cond: complete,
			stdout: "backup 20261203T093000Z: 999 B (999 bytes) in 1s\n"},
		{name: "failed", ti: chx, pod: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "[tiled-operator] dumping the catalog database\npg_dump: error: connection refused"}, cond: failed,
			code: 1, stderr: "error: backup failed: job.batch/JOB (BackoffLimitExceeded):\n[tiled-operator] dumping the catalog database\npg_dump: error: connection refused\n"},
		{name: "failed without a pod", ti: chx, cond: failed,
			code: 1, stderr: "error: backup failed: job.batch/JOB (BackoffLimitExceeded): Job has reached the specified backoff limit\n"},
		{name: "complete without a manifest", ti: chx, cond: complete,
			stdout: "job.batch/JOB complete; its pod left no manifest (kubectl tiled backups nsls2-chx -n nsls2 lists the backups)\n"},
		{name: "complete without a manifest, recorded", ti: recorded, cond: complete, recordAs: true,
			stdout: "backup 20261203T093000Z: 2.0 KiB (2048 bytes) in 7s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := tc.ti.DeepCopy()
			var record *v1alpha1.TiledInstance
			if tc.recordAs {
				record = ti
			}
			useClient(t, finishing(t, tc.pod, tc.cond, record, ti, backupCronJobOf(ti)))
			code, out, errOut := runCmd("", "backup", "chx", "-n", backupNS, "--wait", "--timeout", "10s")
			m := jobCreated.FindStringSubmatch(out)
			g.Expect(m).NotTo(BeNil(), out)
			g.Expect(code).To(Equal(tc.code), errOut)
			g.Expect(strings.TrimPrefix(out, m[0])).To(Equal(strings.ReplaceAll(tc.stdout, "JOB", m[1])))
			g.Expect(errOut).To(Equal(strings.ReplaceAll(tc.stderr, "JOB", m[1])))
		})
	}
}

func TestBackupWaitTimesOut(t *testing.T) {
	g := NewWithT(t)
	ti := instance("chx", claimTarget(""), nil)
	useClient(t, fakeClient(t, nil, ti, backupCronJobOf(ti)))
	start := time.Now()
	code, out, errOut := runCmd("", "backup", "chx", "-n", backupNS, "--wait", "--timeout", "200ms")
	g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
	g.Expect(code).To(Equal(1))
	m := jobCreated.FindStringSubmatch(out)
	g.Expect(m).NotTo(BeNil(), out)
	g.Expect(errOut).To(Equal("error: timed out after 200ms waiting for job.batch/" + m[1] + " to finish; it keeps running (kubectl get job " + m[1] + " -n nsls2)\n"))
}

func TestParseManifest(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		name  string
		bytes int64
	}{
		{msg: manifestJSON, name: "20261203T093000Z", bytes: 12897485},
		{msg: "  " + manifestJSON + "\n", name: "20261203T093000Z", bytes: 12897485},
		{msg: olderManifest, name: "20261203T093000Z", bytes: 12897485},
		{msg: `{"name":"20261203T093000Z","bytes":5,"files":[{"bytes":7}],"new":{"x":[1]}}`, name: "20261203T093000Z", bytes: 5},
		{msg: `{"instance":"nsls2/x"}`},
		{msg: "pg_dump: error"},
		{msg: ""},
	} {
		g := NewWithT(t)
		m := parseManifest(tc.msg)
		if tc.name == "" {
			g.Expect(m).To(BeNil(), tc.msg)
			continue
		}
		g.Expect(m).NotTo(BeNil(), tc.msg)
		g.Expect(m.Name).To(Equal(tc.name))
		g.Expect(m.bytes()).To(Equal(tc.bytes))
	}
}

func TestHumanBytes(t *testing.T) {
	g := NewWithT(t)
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 12897485: "12.3 MiB",
		1024*1024 - 1: "1.0 MiB", 5 << 30: "5.0 GiB", 3 << 40: "3.0 TiB",
	} {
		g.Expect(humanBytes(n)).To(Equal(want), "%d", n)
	}
}

func at(s string) metav1.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return metav1.NewTime(t)
}

// backupsCases are instances in the states `kubectl tiled backups` tells apart; each prints
// testdata/backups/<name>.txt.
var backupsCases = []struct {
	name string
	ti   *v1alpha1.TiledInstance
}{
	{name: "last-failed", ti: func() *v1alpha1.TiledInstance {
		spec := claimTarget("30 2 * * *")
		spec.TimeZone = "America/New_York"
		return instance("chx", spec, &v1alpha1.BackupStatus{
			Target: "claim:tiled-backups/tiled-backups/nsls2/nsls2-chx",
			Last: &v1alpha1.BackupRecord{Job: "nsls2-chx-backup-29412345", Result: "Failed", CompletionTime: at("2026-12-03T07:31:02Z"),
				Message: "[tiled-operator] dumping the catalog database\npg_dump: error: connection to server failed"},
			LastSuccessful: &v1alpha1.BackupRecord{Name: "20261202T073000Z", Job: "nsls2-chx-backup-29410905", Result: "Succeeded",
				CompletionTime: at("2026-12-02T07:30:04Z"), Bytes: 12897485, Seconds: 4, TiledVersion: "0.2.20"},
			// Listed newest first whatever the order here.
			Available: []v1alpha1.AvailableBackup{
				{Name: "20261130T073000Z", Bytes: 12000000},
				{Name: "20261202T073000Z", Bytes: 12897485},
				{Name: "20261201T073000Z", Bytes: 1 << 30},
				// An upgrade's backup before its migration: listed by the time it began, its age known.
				{Name: "20261201T150000Z-pre-upgrade-0.2.14-to-0.2.20", Bytes: 12000000},
				{Name: "20251201T073000Z"},
			},
			Restore: &v1alpha1.RestoreRecord{Backup: "20261101T000000Z", Result: "Restored", CompletionTime: at("2026-11-20T10:00:00Z"), Seconds: 45},
		})
	}()},
	{name: "s3-succeeded", ti: func() *v1alpha1.TiledInstance {
		spec := &v1alpha1.BackupSpec{Schedule: "@daily", Suspend: ptr.To(true), S3: &v1alpha1.BackupS3Target{Endpoint: "https://s3.facility.org", Bucket: "tiled"}}
		return instance("csx", spec, &v1alpha1.BackupStatus{
			Target: "s3://tiled/tiled-backups/nsls2/nsls2-csx at https://s3.facility.org",
			Last: &v1alpha1.BackupRecord{Name: "20261203T090000Z", Job: "nsls2-csx-backup-manual-1796288400", Result: "Succeeded",
				CompletionTime: at("2026-12-03T09:00:09Z"), Bytes: 2048, Seconds: 9},
			Available: []v1alpha1.AvailableBackup{{Name: "20261203T090000Z", Bytes: 2048}},
			Restore:   &v1alpha1.RestoreRecord{Backup: "20261203T000000Z", Result: "Skipped", CompletionTime: at("2026-12-03T08:00:00Z"), Seconds: 2},
		})
	}()},
	{name: "first-failed", ti: instance("iss", claimTarget("0 * * * *"), &v1alpha1.BackupStatus{
		Target: "claim:tiled-backups/tiled-backups/nsls2/nsls2-iss",
		Last: &v1alpha1.BackupRecord{Job: "nsls2-iss-backup-29412360", Result: "Failed", CompletionTime: at("2026-12-03T09:00:05Z"),
			Message: "backup claim tiled-backups is full"},
	})},
	{name: "none-yet", ti: instance("amx", claimTarget(""), nil)},
	{name: "no-target", ti: instance("bmm", nil, nil)},
}

func TestBackupsTable(t *testing.T) {
	for _, tc := range backupsCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			useClient(t, fakeClient(t, nil, tc.ti))
			for _, arg := range []string{tc.ti.Name, tc.ti.Labels[v1alpha1.LabelInstance]} {
				code, out, errOut := runCmd("", "backups", arg, "-n", backupNS)
				g.Expect(errOut).To(BeEmpty())
				g.Expect(code).To(Equal(0))
				golden := filepath.Join("testdata", "backups", tc.name+".txt")
				if *update {
					g.Expect(os.MkdirAll(filepath.Dir(golden), 0o755)).To(Succeed())
					g.Expect(os.WriteFile(golden, []byte(out), 0o644)).To(Succeed())
				}
				want, err := os.ReadFile(golden)
				g.Expect(err).NotTo(HaveOccurred(), "run go test -run TestBackupsTable -update to write it")
				g.Expect(out).To(Equal(string(want)), "%s (-update rewrites it)", golden)
			}
		})
	}
}

func TestBackupsJSONAndYAML(t *testing.T) {
	for _, tc := range backupsCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			useClient(t, fakeClient(t, nil, tc.ti))
			want := tc.ti.Status.Backup
			if want == nil {
				want = &v1alpha1.BackupStatus{}
			}
			for format, unmarshal := range map[string]func([]byte, any) error{"json": json.Unmarshal, "yaml": func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) }} {
				code, out, errOut := runCmd("", "backups", tc.ti.Name, "-n", backupNS, "-o", format)
				g.Expect(errOut).To(BeEmpty())
				g.Expect(code).To(Equal(0))
				var got v1alpha1.BackupStatus
				g.Expect(unmarshal([]byte(out), &got)).To(Succeed(), out)
				// Compared as JSON: the times' locations differ.
				gotJSON, err := json.Marshal(got)
				g.Expect(err).NotTo(HaveOccurred())
				wantJSON, err := json.Marshal(want)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(gotJSON)).To(Equal(string(wantJSON)), format)
				if tc.ti.Status.Backup == nil {
					g.Expect(strings.TrimSpace(out)).To(Equal("{}"))
				}
			}
		})
	}
}

func TestBackupsErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
		usage  bool
	}{
		{name: "not found", args: []string{"nsls2-xyz"}, stderr: `error: TiledInstance "nsls2-xyz" not found in namespace "nsls2"` + "\n"},
		{name: "not a name", args: []string{"No Such"}, stderr: `error: TiledInstance "No Such" not found in namespace "nsls2"` + "\n"},
		{name: "output", args: []string{"nsls2-chx", "-o", "wide"},
			stderr: `error: unable to match a printer suitable for the output format "wide", allowed formats are: table,json,yaml`, usage: true},
		{name: "two instances", args: []string{"a", "b"}, stderr: "error: expected INSTANCE, got 2 argument(s)", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			useClient(t, fakeClient(t, nil, instance("chx", nil, nil)))
			expectRefused(g, "backups", tc.args, tc.stderr, tc.usage)
		})
	}
}

func TestBackupCompletion(t *testing.T) {
	g := NewWithT(t)
	useClient(t, fakeClient(t, nil, instance("chx", nil, nil), instance("csx", nil, nil), instance("amx", nil, nil)))
	for _, command := range []string{"backup", "backups"} {
		code, out, _ := runCmd("", "__complete", command, "-n", backupNS, "nsls2-c")
		g.Expect(code).To(Equal(0))
		g.Expect(out).To(HavePrefix("nsls2-chx\nnsls2-csx\n:4\n"))
	}
	code, out, _ := runCmd("", "__complete", "backups", "-n", backupNS, "nsls2-chx", "-o", "")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(HavePrefix("table\njson\nyaml\n:4\n"))
}

// The backup commands read the cluster: without one they fail, naming what they could not reach.
func TestBackupCommandsNeedACluster(t *testing.T) {
	for _, args := range [][]string{{"backup", "chx"}, {"backups", "chx"}} {
		g := NewWithT(t)
		code, out, errOut := runCmd("", append(args, "-n", backupNS, "--server", "http://127.0.0.1:1")...)
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(HavePrefix("error: "))
		g.Expect(errOut).To(ContainSubstring("127.0.0.1:1"))
	}
}
