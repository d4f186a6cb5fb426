package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

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
	// ToolsImage runs pg_dump and psql for an external database (a managed one uses its own image).
	ToolsImage string `json:"toolsImage,omitempty"`
}

// StepKind is a step of the upgrade procedure that runs as a Job.
type StepKind string

const (
	// StepCheck reports, with the new image, the databases' revisions and the ones it requires.
	StepCheck StepKind = "check"
	// StepBackup dumps the databases to the backup claim.
	StepBackup StepKind = "backup"
	// StepMigrate migrates the databases with the new image, once.
	StepMigrate StepKind = "migrate"
	// StepRestore restores the databases from a backup.
	StepRestore StepKind = "restore"
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
}

// JobName is the name of the step's Job: the step and a short hash of what it runs, so that a new
// target (or backup) is a new Job rather than a change to an immutable pod template.
func (s *Step) JobName(ti *v1alpha1.TiledInstance, in Inputs) string {
	sum := sha256.Sum256([]byte(s.Image + "\x00" + s.Backup))
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
// Lifecycle.ToolsImage (the controller gives the built-in PostgreSQL image, whose tools read older
// servers).
func postgresToolsImage(ti *v1alpha1.TiledInstance, in Inputs) string {
	if db := ti.Spec.Database; db != nil && db.Managed != nil && db.Managed.Image != "" {
		return db.Managed.Image
	}
	return in.Lifecycle.ToolsImage
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
	default:
		err = fmt.Errorf("unknown upgrade step %q", s.Kind)
	}
	if err != nil {
		return nil, err
	}
	labels := Labels(ti, ComponentJob)
	labels[v1alpha1.LabelStep] = string(s.Kind)
	return batchv1ac.Job(s.JobName(ti, in), ti.Namespace).
		WithLabels(labels).
		WithSpec(batchv1ac.JobSpec().
			WithBackoffLimit(0). // a failed step is reported, never retried
			WithActiveDeadlineSeconds(JobDeadlineSeconds).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(pod.WithRestartPolicy(corev1.RestartPolicyNever)))).
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

// Database environment of backup and restore Jobs: libpq reads PGUSER and PGPASSWORD (managed), and
// the URIs of an external database's Secret.
const (
	envDumpCatalog = "DUMP_CATALOG_URI"
	envDumpStorage = "DUMP_STORAGE_URI"
	envDumpAuth    = "DUMP_AUTH_URI"
)

// databaseStepPod runs backupScript or restoreScript with PostgreSQL's own tools, the backup claim
// mounted at BackupMount.
func databaseStepPod(ti *v1alpha1.TiledInstance, in Inputs, s *Step) (*corev1ac.PodSpecApplyConfiguration, error) {
	n := in.names(ti)
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName("HOME").WithValue("/tmp"),
		corev1ac.EnvVar().WithName("BACKUP").WithValue(s.Backup),
		corev1ac.EnvVar().WithName("TILED_VERSION").WithValue(s.FromVersion),
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
	script := backupScript
	if s.Kind == StepRestore {
		script = restoreScript
	}
	c := corev1ac.Container().
		WithName(string(s.Kind)).
		WithImage(postgresToolsImage(ti, in)).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("sh", "-c", script).
		WithEnv(env...).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("backups").WithMountPath(BackupMount),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainerSecurityContext())
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(podIdentity{uid: RunAsUser, gid: RunAsUser, fsGroup: RunAsUser})).
		WithContainers(c).
		WithVolumes(
			claimVolume("backups", n.BackupClaim, false),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		)
	if db.Managed != nil {
		databasePlacement(pod, db.Managed) // the managed database's image, so its placement
	}
	return pod, nil
}

// libpqURI turns a SQLAlchemy URI (postgresql+asyncpg://...) into one libpq reads (shell).
const libpqURI = `sed -E 's#^postgres(ql)?\+[a-z0-9_]+://#postgresql://#'`

// backupScript dumps each database the instance uses (custom format, one file each) into
// BACKUP_DIR/.NAME.partial, writes SHA256SUMS and manifest.json, and renames the directory to NAME
// only then: a directory named like a backup is always whole. It ends by printing the manifest,
// which the kubelet keeps as the termination message.
var backupScript = strings.TrimSpace(`
set -eu
say() { echo "[tiled-operator] $*"; }
cd ` + BackupMount + `
name=$BACKUP; tmp=.$name.partial
[ -n "$name" ] || { say "no backup name"; exit 1; }
if [ -d "$name" ]; then say "backup $name exists already"; cat "$name/manifest.json" > /dev/termination-log; exit 0; fi
rm -rf "$tmp"; mkdir "$tmp"
start=$(date +%s)
files=""
for db in catalog storage auth; do
  case $db in catalog) uri=${DUMP_CATALOG_URI:-};; storage) uri=${DUMP_STORAGE_URI:-};; auth) uri=${DUMP_AUTH_URI:-};; esac
  [ -n "$uri" ] || continue
  uri=$(printf '%s' "$uri" | ` + libpqURI + `)
  say "dumping the $db database"
  pg_dump --format=custom --no-owner --no-privileges --file "$tmp/$db.dump" --dbname "$uri"
  files="$files $db.dump"
done
cd "$tmp"
sha256sum $files > SHA256SUMS
entries=""
for f in $files; do
  size=$(stat -c %s "$f"); sum=$(sha256sum "$f" | cut -d' ' -f1)
  entries="$entries${entries:+,}{\"database\":\"${f%.dump}\",\"file\":\"$f\",\"bytes\":$size,\"sha256\":\"$sum\"}"
done
end=$(date +%s)
printf '{"name":"%s","instance":"%s","tiledVersion":"%s","time":"%s","seconds":%s,"files":[%s]}\n' \
  "$name" "$INSTANCE" "$TILED_VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((end - start))" "$entries" > manifest.json
sync
cd ..
mv "$tmp" "$name"
say "backup $name is whole"
tr -d '\n' < "$name/manifest.json" > /dev/termination-log
`)

// restoreScript checks backup NAME (SHA256SUMS) and restores each of its dumps into its database in
// one transaction per database: the public schema is dropped and the dump's objects recreated, so
// that tables a failed migration created are gone too; a failure leaves the database as it was.
var restoreScript = strings.TrimSpace(`
set -eu
say() { echo "[tiled-operator] $*"; }
dir=` + BackupMount + `/$BACKUP
[ -f "$dir/manifest.json" ] || { say "backup $BACKUP not found (no $dir/manifest.json)"; exit 1; }
cd "$dir"
sha256sum -c --quiet SHA256SUMS || { say "backup $BACKUP is corrupt: its checksums do not match"; exit 1; }
for f in *.dump; do pg_restore --list "$f" > /dev/null || { say "backup $BACKUP: $f is not a readable dump"; exit 1; }; done
for f in *.dump; do
  db=${f%.dump}
  case $db in catalog) uri=${DUMP_CATALOG_URI:-};; storage) uri=${DUMP_STORAGE_URI:-};; auth) uri=${DUMP_AUTH_URI:-};; *) uri=;; esac
  [ -n "$uri" ] || { say "backup $BACKUP has $f but the instance has no $db database"; exit 1; }
  uri=$(printf '%s' "$uri" | ` + libpqURI + `)
  say "restoring the $db database"
  { echo "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"; pg_restore --no-owner --no-privileges --file - "$f"; } |
    psql --quiet --no-psqlrc --single-transaction -v ON_ERROR_STOP=1 --dbname "$uri" > /dev/null
done
say "restored backup $BACKUP"
printf '{"restored":"%s"}' "$BACKUP" > /dev/termination-log
`)
