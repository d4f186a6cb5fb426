package kubectltiled_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// The API server of these tests runs no kube-controller-manager: a Job stays as created, with no
// pod, until a test writes its pod and status as the Job controller and the kubelet would.

const backupsNS = "backups"

var jobCreatedLine = regexp.MustCompile(`^job\.batch/(\S+) created$`)

// backupInstance creates the TiledInstance backups/nsls2-<short> of cluster nsls2, with a claim as
// backup target when target is set, and, when cronJob is set, the backup CronJob the operator would
// render for it (the labels of every object of the instance; a Job template of one container).
func backupInstance(t *testing.T, short string, target, cronJob bool) (*v1alpha1.TiledInstance, *batchv1.CronJob) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: backupsNS, Name: names.Instance("nsls2", short),
		Labels: map[string]string{v1alpha1.LabelCluster: "nsls2", v1alpha1.LabelInstance: short}}}
	if target {
		ti.Spec.Backup = &v1alpha1.BackupSpec{Claim: &v1alpha1.BackupClaimTarget{ClaimName: "tiled-backups"}}
	}
	g.Expect(env.Client.Create(ctx, ti)).To(Succeed())
	if !cronJob {
		return ti, nil
	}
	labels := map[string]string{
		v1alpha1.LabelAppName: "tiled", v1alpha1.LabelAppInstance: ti.Name, v1alpha1.LabelAppComponent: "backups",
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelCluster: "nsls2", v1alpha1.LabelInstance: short,
	}
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: backupsNS, Name: names.For(backupsNS, ti.Name).BackupCronJob, Labels: labels},
		Spec: batchv1.CronJobSpec{
			Schedule:          "30 2 * * *",
			ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"tiled.blueskyproject.io/target": "claim:tiled-backups"}},
				Spec: batchv1.JobSpec{
					BackoffLimit:          ptr.To[int32](0),
					ActiveDeadlineSeconds: ptr.To[int64](3600),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Containers: []corev1.Container{{Name: "backup", Image: "postgres:17", Command: []string{"/bin/sh", "-c", "backup"},
								Env: []corev1.EnvVar{{Name: "INSTANCE", Value: backupsNS + "/" + ti.Name}}}},
						},
					},
				},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, cj)).To(Succeed())
	return ti, cj
}

// renderedInstance creates the standalone TiledInstance backups/<name>, expanded with the built-in
// defaults (a managed database) and a claim as backup target, and applies the backup CronJob the
// operator renders for it (render.BackupCronJob), under the operator's field manager.
func renderedInstance(t *testing.T, name string) *batchv1.CronJob {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: backupsNS, Name: name}}
	ti.Spec.Backup = &v1alpha1.BackupSpec{Schedule: "30 2 * * *", Claim: &v1alpha1.BackupClaimTarget{ClaimName: "tiled-backups"}}
	expanded, err := expansion.ExpandInstance(ti, nil, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Create(ctx, expanded)).To(Succeed())
	ac, err := render.BackupCronJob(expanded, render.Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ac).NotTo(BeNil())
	g.Expect(env.Client.Apply(ctx, ac, client.FieldOwner(v1alpha1.FieldOwner), client.ForceOwnership)).To(Succeed())
	cj := &batchv1.CronJob{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: backupsNS, Name: names.For(backupsNS, name).BackupCronJob}, cj)).To(Succeed())
	return cj
}

// getJob reads the Job named name of the backups namespace.
func getJob(t *testing.T, name string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	NewWithT(t).Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: backupsNS, Name: name}, job)).To(Succeed())
	return job
}

func TestBackupCreatesTheJobKubectlWould(t *testing.T) {
	g := NewWithT(t)
	ensureBackupsNamespace(t)
	_, cj := backupInstance(t, "chx", true, true)
	_, short := backupInstance(t, "csx", true, true)

	code, out, errOut := runPlugin(t, "backup", "nsls2-chx", "-n", backupsNS, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(errOut).To(BeEmpty())
	m := jobCreatedLine.FindStringSubmatch(strings.TrimSuffix(out, "\n"))
	g.Expect(m).NotTo(BeNil(), out)
	g.Expect(m[1]).To(MatchRegexp(`^nsls2-chx-backup-manual-[0-9]{10}$`))
	ours := getJob(t, m[1])

	// kubectl's own, from the same CronJob.
	kubectl := exec.Command("kubectl", "create", "job", "--from=cronjob/"+cj.Name, "kubectl-made", "-n", backupsNS, "--kubeconfig", env.Kubeconfig)
	kout, err := kubectl.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(kout))
	theirs := getJob(t, "kubectl-made")

	g.Expect(ours.OwnerReferences).To(Equal([]metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptr.To(true)}}))
	g.Expect(ours.OwnerReferences).To(Equal(theirs.OwnerReferences))
	g.Expect(ours.Annotations).To(Equal(map[string]string{"cronjob.kubernetes.io/instantiate": "manual", "tiled.blueskyproject.io/target": "claim:tiled-backups"}))
	g.Expect(ours.Annotations).To(Equal(theirs.Annotations))
	g.Expect(ours.Labels).To(Equal(cj.Spec.JobTemplate.Labels))
	g.Expect(ours.Labels).To(Equal(theirs.Labels))
	// The API server adds the Job's own labels (controller-uid, job-name) to its pod template's: the
	// backup's pod is found by them.
	for k, v := range cj.Spec.JobTemplate.Spec.Template.Labels {
		g.Expect(ours.Spec.Template.Labels).To(HaveKeyWithValue(k, v))
	}
	g.Expect(ours.Spec.Template.Labels).To(HaveKeyWithValue(batchv1.JobNameLabel, ours.Name))
	g.Expect(ours.Spec.Template.Spec).To(Equal(cj.Spec.JobTemplate.Spec.Template.Spec))
	g.Expect(ours.Spec.Template.Spec).To(Equal(theirs.Spec.Template.Spec))
	g.Expect(ours.Spec.BackoffLimit).To(Equal(cj.Spec.JobTemplate.Spec.BackoffLimit))
	g.Expect(ours.Spec.ActiveDeadlineSeconds).To(Equal(cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds))
	// Everything else of the spec is kubectl's, but the selector (of the Job's own uid).
	a, b := ours.Spec.DeepCopy(), theirs.Spec.DeepCopy()
	a.Selector, b.Selector = nil, nil
	a.Template.Labels, b.Template.Labels = nil, nil
	g.Expect(a).To(Equal(b))

	// From the CronJob the operator renders.
	rendered := renderedInstance(t, "rendered")
	code, out, errOut = runPlugin(t, "backup", "rendered", "-n", backupsNS, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	m = jobCreatedLine.FindStringSubmatch(strings.TrimSuffix(out, "\n"))
	g.Expect(m).NotTo(BeNil(), out)
	job := getJob(t, m[1])
	g.Expect(job.OwnerReferences).To(Equal([]metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: rendered.Name, UID: rendered.UID, Controller: ptr.To(true)}}))
	g.Expect(job.Labels).To(Equal(rendered.Spec.JobTemplate.Labels))
	g.Expect(job.Spec.Template.Spec).To(Equal(rendered.Spec.JobTemplate.Spec.Template.Spec))
	g.Expect(job.Spec.ActiveDeadlineSeconds).To(Equal(rendered.Spec.JobTemplate.Spec.ActiveDeadlineSeconds))
	g.Expect(job.Spec.BackoffLimit).To(Equal(rendered.Spec.JobTemplate.Spec.BackoffLimit))
	g.Expect(job.Spec.PodFailurePolicy).NotTo(BeNil())
	g.Expect(job.Spec.PodFailurePolicy).To(Equal(rendered.Spec.JobTemplate.Spec.PodFailurePolicy), "a pod that could not reach S3 runs again")

	// By short name.
	code, out, errOut = runPlugin(t, "backup", "csx", "-n", backupsNS, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	m = jobCreatedLine.FindStringSubmatch(strings.TrimSuffix(out, "\n"))
	g.Expect(m).NotTo(BeNil(), out)
	g.Expect(getJob(t, m[1]).OwnerReferences[0].UID).To(Equal(short.UID))
}

func TestBackupRefusals(t *testing.T) {
	ensureBackupsNamespace(t)
	backupInstance(t, "amx", true, false)
	backupInstance(t, "bmm", false, false)
	for _, tc := range []struct{ instance, stderr string }{
		{instance: "amx", stderr: "error: TiledInstance backups/nsls2-amx has a backup target but no backup CronJob (nsls2-amx-backup): the operator has not created it (yet)"},
		{instance: "nsls2-bmm", stderr: "error: TiledInstance backups/nsls2-bmm has no backup target: its spec.backup sets neither claim nor s3"},
		{instance: "xyz", stderr: `error: TiledInstance "xyz" not found in namespace "backups"`},
	} {
		for _, command := range []string{"backup", "backups"} {
			if command == "backups" && tc.instance != "xyz" {
				continue
			}
			g := NewWithT(t)
			code, out, errOut := runPlugin(t, command, tc.instance, "-n", backupsNS, "--kubeconfig", env.Kubeconfig)
			g.Expect(code).To(Equal(1))
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(HavePrefix(tc.stderr))
		}
	}
}

func ensureBackupsNamespace(t *testing.T) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: backupsNS}})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

// startBackup starts kubectl-tiled backup --wait with args, and returns the Job it created and a
// function that waits for the command's end.
func startBackup(t *testing.T, args ...string) (*batchv1.Job, func() (int, string, string)) {
	t.Helper()
	g := NewWithT(t)
	cmd := exec.Command(plugin, append([]string{"backup", "-n", backupsNS, "--kubeconfig", env.Kubeconfig, "--wait"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "no-kubeconfig"))
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	r := bufio.NewReader(stdout)
	first, err := r.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred(), errOut.String())
	m := jobCreatedLine.FindStringSubmatch(strings.TrimSuffix(first, "\n"))
	g.Expect(m).NotTo(BeNil(), first)
	return getJob(t, m[1]), func() (int, string, string) {
		rest, _ := io.ReadAll(r)
		err := cmd.Wait()
		var exit *exec.ExitError
		code := 0
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(rest), errOut.String()
	}
}

// finish writes what the Job controller and the kubelet would of a Job whose one pod ended with
// terminated: the pod, its status, and the Job's terminal conditions.
func finish(t *testing.T, job *batchv1.Job, terminated corev1.ContainerStateTerminated) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x7k2p", Labels: job.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = "nowhere"
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	start := metav1.NewTime(time.Now().Add(-5 * time.Second).Truncate(time.Second))
	end := metav1.NewTime(time.Now().Truncate(time.Second))
	terminated.StartedAt, terminated.FinishedAt = start, end
	phase := corev1.PodSucceeded
	if terminated.ExitCode != 0 {
		phase = corev1.PodFailed
	}
	pod.Status = corev1.PodStatus{Phase: phase, StartTime: &start, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "backup", Image: "postgres:17", ImageID: "docker.io/library/postgres@sha256:" + strings.Repeat("0", 64),
		ContainerID: "containerd://" + strings.Repeat("1", 64), State: corev1.ContainerState{Terminated: &terminated}}}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())

	job.Status.StartTime = &start
	now := metav1.Now()
	if phase == corev1.PodSucceeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &end
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastProbeTime: now, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastProbeTime: now, LastTransitionTime: now},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastProbeTime: now, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastProbeTime: now, LastTransitionTime: now},
		}
	}
	g.Expect(env.Client.Status().Update(ctx, job)).To(Succeed())
}

func TestBackupWaits(t *testing.T) {
	ensureBackupsNamespace(t)
	// As render/dbtool.sh backup reports it: the manifest, plus the whole backups after pruning.
	const manifest = `{"name":"20261203T093000Z","instance":"backups/nsls2-iss","tiledVersion":"0.2.20","revisions":{"catalog":"ed3aab71aad8"},` +
		`"time":"2026-12-03T09:30:03Z","seconds":3,"bytes":12897485,` +
		`"files":[{"database":"catalog","file":"catalog.dump","bytes":12582912,"sha256":"ab"},{"database":"auth","file":"auth.dump","bytes":314573,"sha256":"cd"}],` +
		`"available":"20261203T093000Z:12897485"}`

	t.Run("succeeds", func(t *testing.T) {
		g := NewWithT(t)
		backupInstance(t, "iss", true, true)
		job, wait := startBackup(t, "nsls2-iss")
		// The command watches: the Job finishes after it started waiting.
		time.Sleep(time.Second)
		finish(t, job, corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: manifest})
		code, out, errOut := wait()
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("backup 20261203T093000Z: 12.3 MiB (12897485 bytes) in 3s\n"))
		g.Expect(errOut).To(BeEmpty())
	})
	t.Run("fails", func(t *testing.T) {
		g := NewWithT(t)
		backupInstance(t, "srx", true, true)
		job, wait := startBackup(t, "srx", "--timeout", "2m")
		time.Sleep(time.Second)
		finish(t, job, corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "[tiled-operator] dumping the catalog database\npg_dump: error: connection to server at \"nsls2-srx-postgres\" failed"})
		code, out, errOut := wait()
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(Equal("error: backup failed: job.batch/" + job.Name + " (BackoffLimitExceeded):\n" +
			"[tiled-operator] dumping the catalog database\npg_dump: error: connection to server at \"nsls2-srx-postgres\" failed\n"))
	})
	t.Run("times out", func(t *testing.T) {
		g := NewWithT(t)
		backupInstance(t, "tst", true, true)
		start := time.Now()
		job, wait := startBackup(t, "tst", "--timeout", "3s")
		code, out, errOut := wait()
		g.Expect(time.Since(start)).To(BeNumerically("<", 30*time.Second))
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(Equal("error: timed out after 3s waiting for job.batch/" + job.Name + " to finish; it keeps running (kubectl get job " + job.Name + " -n backups)\n"))
		g.Expect(getJob(t, job.Name).DeletionTimestamp).To(BeNil(), "the Job is left running")
	})
}

func TestBackupsListsTheStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ensureBackupsNamespace(t)
	ti, _ := backupInstance(t, "xpd", true, false)
	completed := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second).UTC())
	ti.Status.Backup = &v1alpha1.BackupStatus{
		Target:         "claim:tiled-backups/tiled-backups/backups/nsls2-xpd",
		Last:           &v1alpha1.BackupRecord{Name: "20261203T073000Z", Job: "nsls2-xpd-backup-29412345", Result: "Succeeded", CompletionTime: completed, Bytes: 12897485, Seconds: 4},
		LastSuccessful: &v1alpha1.BackupRecord{Name: "20261203T073000Z", Job: "nsls2-xpd-backup-29412345", Result: "Succeeded", CompletionTime: completed, Bytes: 12897485, Seconds: 4},
		Available:      []v1alpha1.AvailableBackup{{Name: "20261203T073000Z", Bytes: 12897485}, {Name: "20261202T073000Z", Bytes: 12000000}},
	}
	g.Expect(env.Client.Status().Update(ctx, ti)).To(Succeed())

	code, out, errOut := runPlugin(t, "backups", "xpd", "-n", backupsNS, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(MatchRegexp("^" + regexp.QuoteMeta("Target:          claim:tiled-backups/tiled-backups/backups/nsls2-xpd\n"+
		"Schedule:        none: on demand only (kubectl tiled backup)\n"+
		"Last backup:     Succeeded 20261203T073000Z at "+completed.Format(time.RFC3339)+" (") + `6[01]m` +
		regexp.QuoteMeta(" ago), 12.3 MiB in 4s\n\n")))
	g.Expect(out).To(MatchRegexp(`\nNAME               AGE +SIZE\n20261203T073000Z   \S+ +12\.3 MiB\n20261202T073000Z   \S+ +11\.4 MiB\n$`))

	code, out, errOut = runPlugin(t, "backups", "nsls2-xpd", "-n", backupsNS, "--kubeconfig", env.Kubeconfig, "-o", "json")
	g.Expect(code).To(Equal(0), errOut)
	var got v1alpha1.BackupStatus
	g.Expect(json.Unmarshal([]byte(out), &got)).To(Succeed())
	g.Expect(got.Available).To(Equal(ti.Status.Backup.Available))
	g.Expect(got.Last.Job).To(Equal("nsls2-xpd-backup-29412345"))
}
