package render

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// Backups to spec.backup's target: a CronJob per instance takes them on the schedule (and `kubectl
// tiled backup` makes a Job from it on demand); a StepBootstrap Job restores a new instance from one.

// Defaults of spec.backup.
const (
	// DefaultBackupPath is the directory of a claim target backups go under.
	DefaultBackupPath = "tiled-backups"
	// DefaultBackupPrefix is the key prefix of an S3 target.
	DefaultBackupPrefix = "tiled-backups"
	// DefaultBackupRegion signs S3 requests.
	DefaultBackupRegion = "us-east-1"
	// DefaultBackupRetainCount is how many whole backups are kept when spec.backup.retention.count is
	// not set.
	DefaultBackupRetainCount = 7
	// BackupJobDeadlineSeconds bounds a backup Job: past it the Job fails (and is reported).
	BackupJobDeadlineSeconds = 6 * 3600
	// BackupJobsHistory is how many finished backup Jobs (each) the CronJob keeps.
	BackupJobsHistory = 3
	// BackupStartingDeadlineSeconds: a scheduled backup not started by then (the controller was
	// down) is skipped, and the next one taken on time.
	BackupStartingDeadlineSeconds = 3600
	// LabelStepScheduledBackup is the v1alpha1.LabelStep value of the CronJob's Jobs and pods.
	LabelStepScheduledBackup = "scheduled-backup"
	// targetMount is where a claim target is mounted.
	targetMount = "/target"
	// s3CAMount is where an S3 target's CA bundle is mounted.
	s3CAMount = "/etc/tiled-operator/s3-ca"
	// S3 credentials' keys in spec.backup.s3.credentialsSecret.
	S3KeyAccessKeyID     = "AWS_ACCESS_KEY_ID"
	S3KeySecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	// S3KeyCA is the CA bundle's key in spec.backup.s3.caCertificateSecret.
	S3KeyCA = "ca.crt"
)

// HasBackupTarget says whether spec.backup names a target.
func HasBackupTarget(ti *v1alpha1.TiledInstance) bool {
	b := ti.Spec.Backup
	return b != nil && (b.Claim != nil || b.S3 != nil)
}

// BackupTarget describes where the instance's backups go (status.backup.target):
// claim:<claim>/<path>/<namespace>/<instance> or s3://<bucket>/<prefix>/<namespace>/<instance>
// (at <endpoint>); "" without a target.
func BackupTarget(ti *v1alpha1.TiledInstance) string {
	if !HasBackupTarget(ti) {
		return ""
	}
	b := ti.Spec.Backup
	if c := b.Claim; c != nil {
		return "claim:" + c.ClaimName + "/" + path.Join(orDefault(c.Path, DefaultBackupPath), ti.Namespace, ti.Name)
	}
	return "s3://" + path.Join(b.S3.Bucket, orDefault(b.S3.Prefix, DefaultBackupPrefix), ti.Namespace, ti.Name) + " at " + b.S3.Endpoint
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// targetPod runs dbtool.sh mode against spec.backup's target, with env added.
func targetPod(ti *v1alpha1.TiledInstance, in Inputs, mode string, extra []*corev1ac.EnvVarApplyConfiguration) (*corev1ac.PodSpecApplyConfiguration, error) {
	if !HasBackupTarget(ti) {
		return nil, fmt.Errorf("spec.backup: a claim or s3 target is required")
	}
	env, err := databaseEnv(ti, in)
	if err != nil {
		return nil, err
	}
	b := ti.Spec.Backup
	var mounts []*corev1ac.VolumeMountApplyConfiguration
	var volumes []*corev1ac.VolumeApplyConfiguration
	if c := b.Claim; c != nil {
		env = append(env,
			corev1ac.EnvVar().WithName("TARGET").WithValue("dir"),
			corev1ac.EnvVar().WithName("BACKUP_ROOT").WithValue(path.Join(targetMount, orDefault(c.Path, DefaultBackupPath), ti.Namespace, ti.Name)))
		mounts = append(mounts, corev1ac.VolumeMount().WithName("target").WithMountPath(targetMount))
		volumes = append(volumes, claimVolume("target", c.ClaimName, false))
	} else {
		s := b.S3
		env = append(env,
			corev1ac.EnvVar().WithName("TARGET").WithValue("s3"),
			corev1ac.EnvVar().WithName("S3_ENDPOINT").WithValue(s.Endpoint),
			corev1ac.EnvVar().WithName("S3_BUCKET").WithValue(s.Bucket),
			corev1ac.EnvVar().WithName("S3_PREFIX").WithValue(path.Join(orDefault(s.Prefix, DefaultBackupPrefix), ti.Namespace, ti.Name)),
			corev1ac.EnvVar().WithName("S3_REGION").WithValue(orDefault(s.Region, DefaultBackupRegion)),
			secretEnv(S3KeyAccessKeyID, s.CredentialsSecret.Name, S3KeyAccessKeyID),
			secretEnv(S3KeySecretAccessKey, s.CredentialsSecret.Name, S3KeySecretAccessKey))
		if ca := s.CACertificateSecret; ca != nil {
			env = append(env, corev1ac.EnvVar().WithName("CURL_CA_BUNDLE").WithValue(path.Join(s3CAMount, S3KeyCA)))
			mounts = append(mounts, corev1ac.VolumeMount().WithName("s3-ca").WithMountPath(s3CAMount).WithReadOnly(true))
			volumes = append(volumes, corev1ac.Volume().WithName("s3-ca").WithSecret(corev1ac.SecretVolumeSource().
				WithSecretName(ca.Name).WithItems(corev1ac.KeyToPath().WithKey(S3KeyCA).WithPath(S3KeyCA))))
		}
	}
	env = append(env, extra...)
	return dbtoolPod(ti, in, mode, mode, env, mounts, volumes)
}

// retentionEnv is dbtool.sh's retention of spec.backup (RETAIN_COUNT, RETAIN_DAYS): every backup to
// the target, scheduled or an upgrade's, prunes it alike.
func retentionEnv(ti *v1alpha1.TiledInstance) []*corev1ac.EnvVarApplyConfiguration {
	count := int32(DefaultBackupRetainCount)
	var days *int32
	if b := ti.Spec.Backup; b != nil && b.Retention != nil {
		if b.Retention.Count != nil {
			count = *b.Retention.Count
		}
		days = b.Retention.Days
	}
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName("RETAIN_COUNT").WithValue(strconv.Itoa(int(count))),
	}
	if days != nil {
		env = append(env, corev1ac.EnvVar().WithName("RETAIN_DAYS").WithValue(strconv.Itoa(int(*days))))
	}
	return env
}

// BackupNameLayout is the name of a backup on spec.backup's target: the UTC time it began
// (dbtool.sh's default name). Names sort as times do, newest last: listing, "latest" and retention
// go by them.
const BackupNameLayout = "20060102T150405Z"

// preUpgradeMark joins a pre-upgrade backup's time and its versions.
const preUpgradeMark = "-pre-upgrade-"

// maxVersionInName bounds each version in a pre-upgrade backup's name, which stays within 64
// characters (status.catalogLost.backup, spec.backup.restoreFrom).
const maxVersionInName = 15

// PreUpgradeBackupName is the name of the backup an upgrade from Tiled version from to version to
// takes at t on spec.backup's target: named as a scheduled backup is, by the time it began, so that
// it is listed, restored as "latest" and pruned by the same rules, then marked as the upgrade's:
// 20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20. A version's characters other than letters,
// digits, '.' and '_' become '_'; an unknown one is "unknown".
func PreUpgradeBackupName(t time.Time, from, to string) string {
	return t.UTC().Format(BackupNameLayout) + preUpgradeMark + nameVersion(from) + "-to-" + nameVersion(to)
}

func nameVersion(v string) string {
	if v == "" {
		return "unknown"
	}
	b := []byte(v)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' {
			b[i] = '_'
		}
	}
	if len(b) > maxVersionInName {
		b = b[:maxVersionInName]
	}
	return string(b)
}

// preRestoreMark ends the name of the backup a restore in place takes of the databases it replaces.
const preRestoreMark = "-pre-restore"

// PreRestoreBackupName is the name of the backup a restore in place takes at t on spec.backup's
// target before it replaces the databases: named by its time, as the scheduled backups are, so that
// it is listed and sorted with them, then marked as the restore's: 20261207T093000Z-pre-restore.
func PreRestoreBackupName(t time.Time) string {
	return t.UTC().Format(BackupNameLayout) + preRestoreMark
}

// BackupTime is when the backup name on a target began (false: the name is not a target backup's).
func BackupTime(name string) (time.Time, bool) {
	if len(name) < len(BackupNameLayout) {
		return time.Time{}, false
	}
	t, err := time.Parse(BackupNameLayout, name[:len(BackupNameLayout)])
	if rest := name[len(BackupNameLayout):]; err != nil || (rest != "" && rest != preRestoreMark && !strings.HasPrefix(rest, preUpgradeMark)) {
		return time.Time{}, false
	}
	return t, true
}

// BackupCronJob is the CronJob taking the instance's backups to spec.backup's target, nil without a
// target. Without a schedule it is suspended (and scheduled daily): `kubectl tiled backup` still
// makes Jobs from it. It is suspended too while Tiled is stopped for a restore or a migration, and
// while an upgrade checks and backs up the databases (Lifecycle.SuspendBackups): a run whose time
// fell meanwhile starts when it is resumed, within BackupStartingDeadlineSeconds. Its Jobs never
// overlap, are never retried (a failed backup is reported, and the next one is on schedule), and
// prune the target to the retention after a whole backup.
func BackupCronJob(ti *v1alpha1.TiledInstance, in Inputs) (*batchv1ac.CronJobApplyConfiguration, error) {
	if !HasBackupTarget(ti) {
		return nil, nil
	}
	b := ti.Spec.Backup
	env := retentionEnv(ti)
	if t := ti.Spec.Tiled; t != nil {
		if v, _ := tiledversion.Of(t.Image, t.Version); v != "" {
			env = append(env, corev1ac.EnvVar().WithName("TILED_VERSION").WithValue(v))
		}
	}
	pod, err := targetPod(ti, in, dbtoolBackup, env)
	if err != nil {
		return nil, err
	}
	labels := Labels(ti, ComponentBackups)
	labels[v1alpha1.LabelStep] = LabelStepScheduledBackup
	schedule, suspend := b.Schedule, b.Suspend != nil && *b.Suspend
	if schedule == "" {
		schedule, suspend = "@daily", true
	}
	if stopped(in) {
		// Tiled is stopped while the databases change (a restore into a new instance, a
		// migration): a backup then would dump an empty or half-changed database, and its pruning
		// could delete the good backups the restore needs.
		suspend = true
	}
	if l := in.Lifecycle; l != nil && l.SuspendBackups {
		// An upgrade checks and dumps the databases: its backup runs alone.
		suspend = true
	}
	spec := batchv1ac.CronJobSpec().
		WithSchedule(schedule).
		WithSuspend(suspend).
		WithConcurrencyPolicy(batchv1.ForbidConcurrent).
		WithStartingDeadlineSeconds(BackupStartingDeadlineSeconds).
		WithSuccessfulJobsHistoryLimit(BackupJobsHistory).
		WithFailedJobsHistoryLimit(BackupJobsHistory).
		WithJobTemplate(batchv1ac.JobTemplateSpec().
			WithLabels(labels).
			WithSpec(tryAgainOnly(batchv1ac.JobSpec()).
				WithActiveDeadlineSeconds(BackupJobDeadlineSeconds).
				WithTemplate(corev1ac.PodTemplateSpec().
					WithLabels(labels).
					WithSpec(pod.WithRestartPolicy(corev1.RestartPolicyNever)))))
	if b.TimeZone != "" {
		spec.WithTimeZone(b.TimeZone)
	}
	return batchv1ac.CronJob(in.names(ti).BackupCronJob, ti.Namespace).
		WithLabels(Labels(ti, ComponentBackups)).
		WithSpec(spec), nil
}
