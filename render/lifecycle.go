package render

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Lifecycle is what the upgrade procedure asks of one render of an instance (Inputs.Lifecycle).
type Lifecycle struct {
	// ServingImage replaces spec.tiled.image in the Tiled StatefulSet: the old version keeps serving
	// until its databases are migrated ("" renders spec.tiled.image).
	ServingImage string `json:"servingImage,omitempty"`
	// Stopped renders the Tiled StatefulSet with no replicas: no pod serves while the databases
	// change.
	Stopped bool `json:"stopped,omitempty"`
	// Step is the Job of the current step; nil renders none.
	Step *Step `json:"step,omitempty"`
	// BackupClaim renders the claim backups are written to (names.Objects.BackupClaim).
	BackupClaim bool `json:"backupClaim,omitempty"`
	// SuspendBackups suspends the backup CronJob (as Stopped does): while an upgrade checks and
	// backs up the databases, no scheduled backup starts beside its dump.
	SuspendBackups bool `json:"suspendBackups,omitempty"`
	// ToolsImage runs pg_dump and psql for an external database (a managed one uses its own image).
	ToolsImage string `json:"toolsImage,omitempty"`
}

// StepKind is a step of the upgrade procedure that runs as a Job.
type StepKind string

const (
	// StepCheck reports, with the new image, the databases' revisions and the ones it requires.
	StepCheck StepKind = "check"
	// StepBackup dumps the databases to the backup claim, or to spec.backup's target (Step.Target).
	StepBackup StepKind = "backup"
	// StepMigrate migrates the databases with the new image, once.
	StepMigrate StepKind = "migrate"
	// StepRestore restores the databases from a backup.
	StepRestore StepKind = "restore"
	// StepBootstrap restores a new instance's empty databases from a backup on spec.backup's target
	// (spec.backup.restoreFrom) before Tiled first starts.
	StepBootstrap StepKind = "bootstrap"
	// StepRecover restores the newest whole backup on spec.backup's target into the empty database
	// that replaced a lost catalog (spec.backup.onCatalogLost RestoreLatest), Tiled stopped. It runs
	// as a bootstrap does (only into an empty database); its own kind names its own Job.
	StepRecover StepKind = "recover"
)

// Step is one Job of the upgrade procedure.
type Step struct {
	Kind StepKind `json:"kind"`
	// Image is the Tiled image a check or migrate Job runs.
	Image string `json:"image,omitempty"`
	// Backup names the backup a backup Job writes or a restore Job reads.
	Backup string `json:"backup,omitempty"`
	// FromVersion is recorded in a backup's manifest: the Tiled version the databases are at.
	FromVersion string `json:"fromVersion,omitempty"`
	// Target is where a backup or restore step's backup is: spec.backup's target, as BackupTarget
	// describes it, written (listed, pruned) as the scheduled backups are; "" the backup claim. A
	// step on a target is rendered only while spec.backup names that target, and the target is in
	// its Job's name: another target is another Job.
	Target string `json:"target,omitempty"`
	// Request is the id of the restore in place this step belongs to (annotation
	// tiled.blueskyproject.io/restore-request): in its Job's name, so that each request runs Jobs of
	// its own, even for a backup restored before.
	Request string `json:"request,omitempty"`
	// Keep makes a backup step on a target prune nothing (no retention): the backup a restore in
	// place takes first must not prune the backup it is about to restore.
	Keep bool `json:"keep,omitempty"`
}

// JobName is the name of the step's Job: the step and a short hash of what it runs, so that a new
// target (or backup) is a new Job rather than a change to an immutable pod template.
func (s *Step) JobName(ti *v1alpha1.TiledInstance, in Inputs) string {
	what := s.Image + "\x00" + s.Backup
	if s.Target != "" {
		what += "\x00" + s.Target // a step on the backup claim keeps the name it always had
	}
	if s.Request != "" {
		what += "\x00request=" + s.Request // the upgrade's steps keep the names they always had
	}
	sum := sha256.Sum256([]byte(what))
	return in.names(ti).Job(string(s.Kind), hex.EncodeToString(sum[:])[:6])
}

// BackupMount is where backup and restore Jobs mount the backup claim; a backup NAME is the
// directory BackupMount/NAME, holding one custom-format pg_dump per database, SHA256SUMS and
// manifest.json. It is written as BackupMount/.NAME.partial and renamed when whole.
const BackupMount = "/backups"

// JobDeadlineSeconds bounds each step's Job: past it the Job fails, and the upgrade with it.
const JobDeadlineSeconds = 3600

// servingImage is the image the Tiled StatefulSet runs.
func servingImage(ti *v1alpha1.TiledInstance, in Inputs) string {
	if l := in.Lifecycle; l != nil && l.ServingImage != "" {
		return l.ServingImage
	}
	if t := ti.Spec.Tiled; t != nil {
		return t.Image
	}
	return ""
}

func stopped(in Inputs) bool { return in.Lifecycle != nil && in.Lifecycle.Stopped }

// backupClaimSpec is the backup claim's spec: ReadWriteOnce, the size and storage class of the
// database volume (a dump is smaller than the database it comes from).
func backupClaimSpec(ti *v1alpha1.TiledInstance) *corev1ac.PersistentVolumeClaimSpecApplyConfiguration {
	size := resource.MustParse("10Gi")
	var class *string
	if db := ti.Spec.Database; db != nil && db.Managed != nil {
		size = quantity(db.Managed.Size, size)
		class = db.Managed.StorageClassName
	}
	s := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: size}))
	if class != nil && *class != "" {
		s.WithStorageClassName(*class)
	}
	return s
}

// postgresToolsImage runs pg_dump and psql: the managed database's own image, else
// Lifecycle.ToolsImage, else Inputs.ToolsImage.
func postgresToolsImage(ti *v1alpha1.TiledInstance, in Inputs) (string, error) {
	if db := ti.Spec.Database; db != nil && db.Managed != nil && db.Managed.Image != "" {
		return db.Managed.Image, nil
	}
	if l := in.Lifecycle; l != nil && l.ToolsImage != "" {
		return l.ToolsImage, nil
	}
	if in.ToolsImage != "" {
		return in.ToolsImage, nil
	}
	return "", fmt.Errorf("no PostgreSQL image to run pg_dump and psql with for the external database (Inputs.ToolsImage)")
}

// LifecycleJob returns the Job of the render's current step, nil when there is none.
func LifecycleJob(ti *v1alpha1.TiledInstance, in Inputs) (*batchv1ac.JobApplyConfiguration, error) {
	l := in.Lifecycle
	if l == nil || l.Step == nil {
		return nil, nil
	}
	s := l.Step
	var pod *corev1ac.PodSpecApplyConfiguration
	var err error
	switch s.Kind {
	case StepCheck, StepMigrate:
		pod, err = tiledStepPod(ti, in, s)
	case StepBackup, StepRestore:
		pod, err = databaseStepPod(ti, in, s)
	case StepBootstrap, StepRecover:
		pod, err = targetPod(ti, in, dbtoolRestore, []*corev1ac.EnvVarApplyConfiguration{
			corev1ac.EnvVar().WithName("BACKUP").WithValue(s.Backup),
			corev1ac.EnvVar().WithName("RESTORE_IF_EMPTY").WithValue("1"),
			corev1ac.EnvVar().WithName("TILED_VERSION").WithValue(s.FromVersion),
		})
	default:
		err = fmt.Errorf("unknown upgrade step %q", s.Kind)
	}
	if err != nil {
		return nil, err
	}
	labels := Labels(ti, ComponentJob)
	labels[v1alpha1.LabelStep] = string(s.Kind)
	// A failed step is reported, not retried: only a pod that could not reach what it needed runs again.
	spec := tryAgainOnly(batchv1ac.JobSpec()).
		WithActiveDeadlineSeconds(JobDeadlineSeconds).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(labels).
			WithSpec(pod.WithRestartPolicy(corev1.RestartPolicyNever)))
	return batchv1ac.Job(s.JobName(ti, in), ti.Namespace).
		WithLabels(labels).
		WithSpec(spec).
		WithAnnotations(backupAnnotation(s.Backup)), nil
}

func backupAnnotation(backup string) map[string]string {
	if backup == "" {
		return nil
	}
	return map[string]string{AnnotationBackup: backup}
}

// AnnotationBackup on a backup or restore Job names its backup.
const AnnotationBackup = "tiled.blueskyproject.io/backup"

// tiledStepPod runs entrypoint.py with the step's image: `revisions` (check) or `migrate`, with the
// Tiled containers' environment and configuration.
func tiledStepPod(ti *v1alpha1.TiledInstance, in Inputs, s *Step) (*corev1ac.PodSpecApplyConfiguration, error) {
	n := in.names(ti)
	cmd, err := MigrateCommand(ti, in)
	if err != nil {
		return nil, err
	}
	if s.Kind == StepCheck {
		cmd[2] = "revisions"
	}
	t := ti.Spec.Tiled
	if t == nil {
		t = &v1alpha1.TiledServerSpec{}
	}
	pull := t.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	c := corev1ac.Container().
		WithName(string(s.Kind)).
		WithImage(s.Image).
		WithImagePullPolicy(pull).
		WithCommand(cmd...).
		WithEnv(tiledEnv(ti, n, in)...).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		).
		WithResources(resources(t.Resources)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainerSecurityContext())
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(tiledIdentity(t))).
		WithContainers(c).
		WithVolumes(
			corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(n.ConfigMap)),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		)
	if err := placement(pod, t); err != nil {
		return nil, err
	}
	return pod, nil
}

// Database environment of backup and restore Jobs (dbtool.sh): libpq reads PGUSER and PGPASSWORD
// (managed), and the URIs of an external database's Secret.
const (
	envDumpCatalog = "DUMP_CATALOG_URI"
	envDumpStorage = "DUMP_STORAGE_URI"
	envDumpAuth    = "DUMP_AUTH_URI"
)

// dbtool.sh's modes.
const (
	dbtoolBackup  = "backup"
	dbtoolRestore = "restore"
)

// DBTool is dbtool.sh, the program backup and restore Jobs run on PostgreSQL's image: pg_dump of
// each database to a directory or an S3 bucket, checksums and a manifest, pruning, and restore.
//
//go:embed dbtool.sh
var DBTool string

// databaseEnv is the environment dbtool.sh reaches the instance's databases with.
func databaseEnv(ti *v1alpha1.TiledInstance, in Inputs) ([]*corev1ac.EnvVarApplyConfiguration, error) {
	n := in.names(ti)
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName("HOME").WithValue("/tmp"),
		corev1ac.EnvVar().WithName("WORK").WithValue("/tmp/dbtool"),
		corev1ac.EnvVar().WithName("INSTANCE").WithValue(ti.Namespace + "/" + ti.Name),
	}
	db := ti.Spec.Database
	switch {
	case db != nil && db.Managed != nil:
		base := managedBaseURI(ti, in)
		env = append(env,
			corev1ac.EnvVar().WithName(EnvDatabaseUser).WithValue(DatabaseUser),
			secretEnv(EnvDatabasePassword, n.Secret, SecretKeyDatabasePassword),
			corev1ac.EnvVar().WithName(envDumpCatalog).WithValue(base+CatalogDatabase),
			corev1ac.EnvVar().WithName(envDumpStorage).WithValue(base+StorageDatabase),
			corev1ac.EnvVar().WithName(envDumpAuth).WithValue(base+AuthDatabase))
	case db != nil && db.External != nil && db.External.URISecretRef != nil:
		r := db.External.URISecretRef
		env = append(env, secretEnv(envDumpCatalog, r.Name, keyOr(r.Key, ExternalKeyURI)))
		if in.hasExternalKey(ExternalKeyStorageURI) {
			env = append(env, secretEnv(envDumpStorage, r.Name, ExternalKeyStorageURI))
		}
		if in.hasExternalKey(ExternalKeyAuthURI) {
			env = append(env, secretEnv(envDumpAuth, r.Name, ExternalKeyAuthURI))
		}
	default:
		return nil, fmt.Errorf("spec.database: one of managed or external is required")
	}
	return env, nil
}

// dbtoolPod is a pod running dbtool.sh mode with PostgreSQL's tools, env (the databases' and the
// target's) and the volumes of the target.
func dbtoolPod(ti *v1alpha1.TiledInstance, in Inputs, name, mode string, env []*corev1ac.EnvVarApplyConfiguration,
	mounts []*corev1ac.VolumeMountApplyConfiguration, volumes []*corev1ac.VolumeApplyConfiguration) (*corev1ac.PodSpecApplyConfiguration, error) {
	image, err := postgresToolsImage(ti, in)
	if err != nil {
		return nil, err
	}
	c := corev1ac.Container().
		WithName(name).
		WithImage(image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("sh", "-c", DBTool, "dbtool.sh", mode).
		WithEnv(env...).
		WithVolumeMounts(append(mounts, corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"))...).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainerSecurityContext())
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(podIdentity{uid: RunAsUser, gid: RunAsUser, fsGroup: RunAsUser})).
		WithContainers(c).
		WithVolumes(append(volumes, corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()))...)
	if db := ti.Spec.Database; db != nil && db.Managed != nil {
		databasePlacement(pod, db.Managed) // the managed database's image, so its placement
	}
	return pod, nil
}

// databaseStepPod runs dbtool.sh backup or restore for the upgrade procedure: on spec.backup's
// target as the scheduled backups do (Step.Target: the same program, target and retention), else
// on the instance's backup claim mounted at BackupMount (backup NAME is the directory
// BackupMount/NAME).
func databaseStepPod(ti *v1alpha1.TiledInstance, in Inputs, s *Step) (*corev1ac.PodSpecApplyConfiguration, error) {
	if s.Target != "" {
		if t := BackupTarget(ti); t != s.Target {
			return nil, fmt.Errorf("the %s step's backup %s is on %s, and spec.backup names %q", s.Kind, s.Backup, s.Target, t)
		}
		env := []*corev1ac.EnvVarApplyConfiguration{corev1ac.EnvVar().WithName("BACKUP").WithValue(s.Backup)}
		mode := dbtoolRestore
		switch {
		case s.Kind == StepBackup:
			mode = dbtoolBackup
			env = append(env, corev1ac.EnvVar().WithName("TILED_VERSION").WithValue(s.FromVersion))
			if !s.Keep {
				env = append(env, retentionEnv(ti)...)
			}
		case s.FromVersion != "":
			// A restore in place refuses a backup from a newer Tiled than the one that will serve it.
			env = append(env, corev1ac.EnvVar().WithName("TILED_VERSION").WithValue(s.FromVersion))
		}
		return targetPod(ti, in, mode, env)
	}
	env, err := databaseEnv(ti, in)
	if err != nil {
		return nil, err
	}
	env = append(env,
		corev1ac.EnvVar().WithName("TARGET").WithValue("dir"),
		corev1ac.EnvVar().WithName("BACKUP_ROOT").WithValue(BackupMount),
		corev1ac.EnvVar().WithName("BACKUP").WithValue(s.Backup),
		corev1ac.EnvVar().WithName("TILED_VERSION").WithValue(s.FromVersion))
	mode := dbtoolBackup
	if s.Kind == StepRestore {
		mode = dbtoolRestore
	}
	return dbtoolPod(ti, in, string(s.Kind), mode, env,
		[]*corev1ac.VolumeMountApplyConfiguration{corev1ac.VolumeMount().WithName("backups").WithMountPath(BackupMount)},
		[]*corev1ac.VolumeApplyConfiguration{claimVolume("backups", in.names(ti).BackupClaim, false)})
}
