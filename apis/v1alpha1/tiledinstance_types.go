package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TiledInstanceSpec is the complete specification of one Tiled deployment. Instances stamped out by a
// TiledCluster have every field populated; a standalone instance may set only some fields and a
// profileSelector, and is expanded at admission.
type TiledInstanceSpec struct {
	// ProfileSelector selects TiledProfiles for a standalone instance (one not created by a
	// TiledCluster); the instance's own fields win over theirs.
	// +optional
	ProfileSelector *metav1.LabelSelector `json:"profileSelector,omitempty"`

	// InstanceTemplate holds the settings: tiled, storage, database, auth, expose, monitoring, config.
	InstanceTemplate `json:",inline"`
}

// DatabaseStatus is the observed state of an instance's database.
type DatabaseStatus struct {
	// Mode is Managed or External.
	// +optional
	Mode string `json:"mode,omitempty"`

	// Ready is true when the database accepts connections (managed) or its Secret is complete
	// (external).
	// +optional
	Ready bool `json:"ready,omitempty"`

	// CatalogRevision is the alembic revision of the catalog database, as the newest Tiled pod's
	// migrate step reported it. Tiled serves only at the revision its version expects.
	// +optional
	CatalogRevision string `json:"catalogRevision,omitempty"`

	// AuthRevision is the alembic revision of the authentication database ("" without OIDC).
	// +optional
	AuthRevision string `json:"authRevision,omitempty"`

	// ClaimUID is the UID of the managed database's claim the catalog lives on: the claim bound
	// when the catalog was first migrated (or when an operator that did not record it first saw the
	// catalog). A claim of another UID under that name is a new, empty volume: the catalog is lost
	// (status.catalogLost).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ClaimUID string `json:"claimUID,omitempty"`
}

// CatalogLostPhase is where the handling of a lost catalog stands.
// +kubebuilder:validation:Enum=Stalled;Restoring;Restored
type CatalogLostPhase string

const (
	// CatalogLostStalled: Tiled is stopped, waiting for a person (or for the new claim before a
	// restore).
	CatalogLostStalled CatalogLostPhase = "Stalled"
	// CatalogLostRestoring: a Job restores the newest whole backup (spec.backup.onCatalogLost
	// RestoreLatest), Tiled stopped.
	CatalogLostRestoring CatalogLostPhase = "Restoring"
	// CatalogLostRestored: the backup is restored and Tiled starts; the record goes once a Tiled
	// pod reports the catalog at a revision.
	CatalogLostRestored CatalogLostPhase = "Restored"
)

// CatalogLost records the loss of an instance's catalog: what was lost, where, and what would
// restore it.
type CatalogLost struct {
	// Phase is where its handling stands.
	Phase CatalogLostPhase `json:"phase"`

	// Claim is the managed database's claim ("" for an external database).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Claim string `json:"claim,omitempty"`
	// OldClaimUID is the UID of the claim the catalog lived on (status.database.claimUID).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OldClaimUID string `json:"oldClaimUID,omitempty"`
	// NewClaimUID is the UID of the claim found in its place ("" while there is none, or the old
	// one is being deleted).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	NewClaimUID string `json:"newClaimUID,omitempty"`

	// Revision is the catalog's alembic revision when it was lost.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision,omitempty"`

	// Backup is the newest whole backup on the target when the loss was found: the one that would
	// restore the catalog ("" when there is none).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Backup string `json:"backup,omitempty"`

	// Reason is how the loss was found: ClaimReplaced (the claim's UID changed), ClaimDeleted (the
	// claim is gone or being deleted) or DatabaseEmpty (the migrate step found no catalog).
	// +kubebuilder:validation:Enum=ClaimReplaced;ClaimDeleted;DatabaseEmpty
	Reason string `json:"reason"`

	// Time is when the operator found the loss.
	Time metav1.Time `json:"time"`

	// RestoreCompletionTime is when the restore of Backup ended (phase Restored).
	// +optional
	RestoreCompletionTime *metav1.Time `json:"restoreCompletionTime,omitempty"`

	// Message says why a restore failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// UpgradePhase is a step of the upgrade procedure of an instance whose Tiled version changes.
// +kubebuilder:validation:Enum=Checking;BackingUp;Stopping;Migrating;Starting;Restoring;Failed
type UpgradePhase string

const (
	// UpgradeChecking: a Job with the new image compares the databases' revisions with the ones the
	// new version expects; the old version keeps serving.
	UpgradeChecking UpgradePhase = "Checking"
	// UpgradeBackingUp: a Job dumps the instance's databases; the old version keeps serving.
	UpgradeBackingUp UpgradePhase = "BackingUp"
	// UpgradeStopping: the Tiled pods are stopped (0 replicas), so that no old pod serves while the
	// databases change.
	UpgradeStopping UpgradePhase = "Stopping"
	// UpgradeMigrating: one Job with the new image migrates the databases.
	UpgradeMigrating UpgradePhase = "Migrating"
	// UpgradeStarting: the new version's pods start on the migrated databases.
	UpgradeStarting UpgradePhase = "Starting"
	// UpgradeRestoring: the migration failed; a Job restores the databases from the backup taken
	// before it, with Tiled stopped.
	UpgradeRestoring UpgradePhase = "Restoring"
	// UpgradeFailed: the databases were restored and the old version serves again; the instance is
	// Stalled (MigrationFailed) until spec.tiled.image changes.
	UpgradeFailed UpgradePhase = "Failed"
)

// UpgradeStatus is an upgrade in progress (or failed and undone): what it moves from and to, and
// where it stands. The operator records each phase before it starts the phase's step, so that a
// restarted operator carries on where the last one stopped.
type UpgradeStatus struct {
	// Phase is the step the upgrade is at.
	Phase UpgradePhase `json:"phase"`

	// FromImage is the image that served before the upgrade (and serves again if it fails).
	FromImage string `json:"fromImage"`

	// ToImage is spec.tiled.image, the image the upgrade moves to.
	ToImage string `json:"toImage"`

	// FromVersion is the Tiled version of FromImage.
	// +optional
	FromVersion string `json:"fromVersion,omitempty"`
	// ToVersion is the Tiled version of ToImage, as its check reported it.
	// +optional
	ToVersion string `json:"toVersion,omitempty"`

	// FromRevision is the catalog database's alembic revision before the migration.
	// +optional
	FromRevision string `json:"fromRevision,omitempty"`
	// ToRevision is the catalog revision the new version requires.
	// +optional
	ToRevision string `json:"toRevision,omitempty"`
	// AuthFromRevision is the authentication database's revision before the migration.
	// +optional
	AuthFromRevision string `json:"authFromRevision,omitempty"`
	// AuthToRevision is the authentication revision the new version requires.
	// +optional
	AuthToRevision string `json:"authToRevision,omitempty"`

	// Backup names the backup taken before the migration. On spec.backup's target it is named as
	// the scheduled backups are, the UTC time it began, marked as the upgrade's:
	// <time>-pre-upgrade-<fromVersion>-to-<toVersion> (20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20);
	// on the upgrade's own claim, pre-upgrade-<UTC time>.
	// +optional
	Backup string `json:"backup,omitempty"`

	// BackupTarget is where Backup is: spec.backup's target when the instance had one as the
	// backup began (as status.backup.target describes it), written, listed and pruned as the
	// scheduled backups are; absent, the claim <instance>-backups the upgrade makes. The restore
	// after a failed migration reads the backup from there.
	// +optional
	BackupTarget string `json:"backupTarget,omitempty"`

	// StartTime is when the upgrade began.
	StartTime metav1.Time `json:"startTime"`
	// PhaseTime is when the current phase began.
	// +optional
	PhaseTime *metav1.Time `json:"phaseTime,omitempty"`

	// StopTime is when the old pods were told to stop (the downtime's start).
	// +optional
	StopTime *metav1.Time `json:"stopTime,omitempty"`

	// MigrationSeconds is how long the migration Job ran, once it ended.
	// +optional
	MigrationSeconds string `json:"migrationSeconds,omitempty"`

	// Message says why the upgrade failed: the revision and the last lines of the failing step.
	// +optional
	Message string `json:"message,omitempty"`
}

// MigrationRecord is the last migration of an instance's databases.
type MigrationRecord struct {
	// FromVersion is the Tiled version before the migration.
	FromVersion string `json:"fromVersion"`
	// ToVersion is the Tiled version the migration moved to.
	ToVersion string `json:"toVersion"`

	// FromRevision is the catalog's revision before the migration.
	// +optional
	FromRevision string `json:"fromRevision,omitempty"`
	// ToRevision is the catalog's revision after it (the one ToVersion requires).
	// +optional
	ToRevision string `json:"toRevision,omitempty"`

	// Backup names the backup taken before the migration.
	// +optional
	Backup string `json:"backup,omitempty"`

	// BackupTarget is where Backup is: spec.backup's target (as status.backup.target describes it,
	// where its retention may since have pruned it); absent, the claim <instance>-backups.
	// +optional
	BackupTarget string `json:"backupTarget,omitempty"`

	// Result is Succeeded, or RolledBack when the migration failed and the backup was restored.
	// +kubebuilder:validation:Enum=Succeeded;RolledBack
	Result string `json:"result"`

	// StartTime is when the upgrade began.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when its last step ended.
	CompletionTime metav1.Time `json:"completionTime"`

	// MigrationSeconds is how long the migration Job ran.
	// +optional
	MigrationSeconds string `json:"migrationSeconds,omitempty"`
	// DowntimeSeconds is how long no Tiled pod served: from the stop of the old pods to the new
	// version Ready; rolled back, to the end of the restore (the old version then starts).
	// +optional
	DowntimeSeconds string `json:"downtimeSeconds,omitempty"`
}

// TiledInstanceStatus is the observed state of a TiledInstance.
type TiledInstanceStatus struct {
	// ObservedGeneration is the generation of the instance this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling and Stalled (read by kstatus, ArgoCD and Flux); DatabaseReady
	// for a managed database; ExternalEdits while another writer manages fields of a child object;
	// IngressEnabled=False while the ingress has a host but enabled is not set (no Ingress is created);
	// RolloutPending=True while a change of the pod template the operator renders without a change
	// of the spec waits for the cluster's rollout (status.pendingRollout); Restored after a restore in
	// place was requested (status.inPlaceRestore: Unknown while it runs, True once Tiled serves the
	// restored databases, False when it was refused or failed); ImageCheckPending=True while a new
	// image of the managed PostgreSQL or streaming cache StatefulSet waits for its image check (the
	// StatefulSet left as it is; status.checkedImages).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// URL at which Tiled is served inside the cluster.
	// +optional
	URL string `json:"url,omitempty"`

	// ReadyReplicas is the number of Tiled pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Image is the Tiled image the instance's pods are rendered with: spec.tiled.image after expansion,
	// also for a standalone instance stored without it (created while the mutating webhook was not
	// answering, and expanded by the controller). The Image column of `kubectl get tiledinstances`
	// shows it.
	// +optional
	Image string `json:"image,omitempty"`

	// Version is the Tiled version the serving pods run, as their migrate step reported it.
	// +optional
	Version string `json:"version,omitempty"`

	// Database is the observed state of the database.
	// +optional
	Database *DatabaseStatus `json:"database,omitempty"`

	// Upgrade is the upgrade in progress, or the last one when it failed and was undone (phase
	// Failed); absent otherwise.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`

	// LastMigration records the last migration of the databases: versions, revisions, backup,
	// result and durations.
	// +optional
	LastMigration *MigrationRecord `json:"lastMigration,omitempty"`

	// Backup is the state of the instance's backups: the last one, the last whole one, the backups
	// on the target, and the restore its database started from.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// CatalogLost is the loss of the instance's catalog, while it is handled: Tiled is not started
	// on the database (condition Stalled, reason CatalogLost) until the newest whole backup is
	// restored (spec.backup.onCatalogLost RestoreLatest) or a person accepts the loss. Absent
	// otherwise.
	// +optional
	CatalogLost *CatalogLost `json:"catalogLost,omitempty"`

	// InPlaceRestore is the last restore of the instance's databases requested in place, while Tiled
	// served (the annotation tiled.blueskyproject.io/restore, set by `kubectl tiled restore`): who
	// asked, which backup, the backup taken of the databases it replaced, each phase and the
	// outcome. It stays after the restore ends, until the next request replaces it.
	// +optional
	InPlaceRestore *InPlaceRestoreStatus `json:"inPlaceRestore,omitempty"`

	// PendingRollout is a change of the Tiled pod template that the operator renders though the
	// instance's spec did not change (typically a new operator release: a new default, label,
	// annotation or probe), waiting for the instance's TiledCluster to roll it within
	// spec.rollout.maxUnavailable, spec.instances[].hold and spec.paused, as it rolls a change of
	// the spec. The cluster approves it by setting the annotation
	// tiled.blueskyproject.io/approved-template to templateHash on the instance; the StatefulSet is
	// then applied and this field goes. Absent when no such change waits (a standalone instance
	// applies it at once, with an Event).
	//
	// With spec.maintenance, it is also a change that waits for the maintenance calendar to open
	// (change Spec or Upgrade, or a render change; window says why it waits): the cluster does not
	// approve it, nor count it against its budget, while the window is closed.
	// +optional
	PendingRollout *PendingRollout `json:"pendingRollout,omitempty"`

	// Maintenance is what spec.maintenance says now: whether disruptive changes may start, why,
	// and when the calendar next opens or closes. Absent when spec.maintenance is.
	// +optional
	Maintenance *MaintenanceStatus `json:"maintenance,omitempty"`

	// LastApproval is the last pending change a person approved (spec.maintenance.approval Manual,
	// `kubectl tiled approve`): which change, who, when, and whether through a closed window.
	// +optional
	LastApproval *ApprovalRecord `json:"lastApproval,omitempty"`

	// RefusedApproval is an approval the instance carries (the label tiled.blueskyproject.io/approve)
	// that names no pending change: ignored, and reported here until it is removed or replaced.
	// +optional
	RefusedApproval *ApprovalRecord `json:"refusedApproval,omitempty"`

	// Notifications is the delivery of the instance's notifications to spec.notifications.webhook:
	// the notifications delivered (so that none is sent twice, also across restarts of the operator
	// and changes of leader) and the last delivery error. Absent when spec.notifications is.
	// +optional
	Notifications *NotificationStatus `json:"notifications,omitempty"`

	// ReplacedPods records the pods of the instance's StatefulSets (Tiled, PostgreSQL, streaming
	// cache) the operator deleted because they were stuck: failing (an image that cannot be pulled,
	// a crash loop, a container that cannot be created) and not Ready on an older revision of their
	// StatefulSet after its pod template changed, which a StatefulSet with OrderedReady pod
	// management (PostgreSQL, cache) never replaces by itself. The StatefulSet controller then
	// created them again from the current template. A pod is replaced
	// at most once for a revision of its StatefulSet, also across restarts of the operator; its
	// entry goes once it is Ready on that revision. Each replacement is also an Event (reason
	// StuckPodReplaced).
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=64
	ReplacedPods []ReplacedPod `json:"replacedPods,omitempty"`

	// CheckedImages records, for the managed PostgreSQL and streaming cache StatefulSets, the last
	// new image an image check Job proved pullable and startable before the StatefulSet's pod was
	// replaced by one running it. While a new image has not passed its check, the StatefulSet is
	// left as it is (its pod keeps serving) and the ImageCheckPending condition says why; once it
	// passes, it is recorded here (so that it is not checked again, also across restarts of the
	// operator) and the StatefulSet changes.
	// +optional
	// +listType=map
	// +listMapKey=statefulSet
	// +kubebuilder:validation:MaxItems=8
	CheckedImages []CheckedImage `json:"checkedImages,omitempty"`
}

// CheckedImage is an image proven pullable and startable for one of the instance's StatefulSets.
type CheckedImage struct {
	// StatefulSet is the StatefulSet's name.
	// +kubebuilder:validation:MaxLength=253
	StatefulSet string `json:"statefulSet"`

	// Image is the image its check Job ran to completion.
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// Time is when the operator found the check passed.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// ReplacedPod is a pod the operator deleted because it was stuck on an older revision of its
// StatefulSet.
type ReplacedPod struct {
	// Pod is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// Revision is the StatefulSet's revision (status.updateRevision, the name of a
	// ControllerRevision) the pod was replaced to reach.
	// +kubebuilder:validation:MaxLength=253
	Revision string `json:"revision"`

	// Reason is why the pod was stuck, as the kubelet said it (ImagePullBackOff, CrashLoopBackOff,
	// CreateContainerConfigError, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`

	// Time is when the operator deleted the pod.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// PendingRollout is a change of a StatefulSet's pod template caused by the operator's render, not by
// the instance's spec, that waits for the cluster's rollout.
type PendingRollout struct {
	// StatefulSet is the name of the StatefulSet whose pod template would change (the Tiled one).
	// +kubebuilder:validation:MaxLength=253
	StatefulSet string `json:"statefulSet"`

	// TemplateHash identifies the StatefulSet the operator wants to apply (the hash its
	// tiled.blueskyproject.io/intent annotation will carry); the approval names it.
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash"`

	// Differs are the paths in the StatefulSet that the change sets to another value, adds or
	// removes (e.g. spec.template.metadata.annotations[example.org/build],
	// spec.template.spec.containers[tiled].env[TILED_X]), sorted; at most 20 (differCount counts
	// them all).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Differs []string `json:"differs,omitempty"`

	// DifferCount is the number of paths that differ.
	// +optional
	DifferCount int32 `json:"differCount,omitempty"`

	// AddedObjects are the child objects the operator's render adds to the instance with this
	// change, which the instance did not have when the change was found, as Kind/name (e.g.
	// StatefulSet/cache-nsls2-chx): a release's new child kind or object. Sorted; the first 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=320
	AddedObjects []string `json:"addedObjects,omitempty"`

	// AddedImages are the container images of the instance's StatefulSets as the operator renders
	// them with this change that none of its live StatefulSets runs yet (e.g. a new streaming
	// cache's image): what a beamline that cannot reach public registries must have mirrored before
	// the change rolls. Sorted; the first 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=512
	AddedImages []string `json:"addedImages,omitempty"`

	// Since is when the operator first found this change waiting.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// Change is what kind of change waits: Render (the operator renders the pod template
	// differently, e.g. after its own upgrade; also when absent), Spec (the instance's spec changes
	// a pod template, held by spec.maintenance) or Upgrade (a Tiled upgrade with its migration, held
	// by spec.maintenance).
	// +optional
	// +kubebuilder:validation:Enum=Render;Spec;Upgrade
	Change string `json:"change,omitempty"`

	// Window, when set, says that the change waits for the maintenance calendar (spec.maintenance)
	// and why, e.g. "outside every maintenance window; opens at 2026-12-08T13:00:00Z".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Window string `json:"window,omitempty"`

	// ChangeHash identifies the whole pending change (every StatefulSet it changes, and an upgrade's
	// from and to): what `kubectl tiled approve` approves under spec.maintenance.approval Manual. A
	// change that is not exactly this one has another hash.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ChangeHash string `json:"changeHash,omitempty"`

	// Approval, under spec.maintenance.approval Manual, says where the change stands: Required (it
	// waits for a person's approval of changeHash) or Approved (approved; it waits for the window
	// or the cluster's rollout).
	// +optional
	// +kubebuilder:validation:Enum=Required;Approved
	Approval string `json:"approval,omitempty"`

	// From is, for an upgrade (change Upgrade, which migrates the databases), the image Tiled runs.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	From string `json:"from,omitempty"`
	// To is, for an upgrade, the image Tiled would run.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	To string `json:"to,omitempty"`
}

// The values of status.pendingRollout.approval.
const (
	ApprovalRequired = "Required"
	ApprovalApproved = "Approved"
)

// ApprovalRecord is a person's approval of a pending change (spec.maintenance.approval Manual).
type ApprovalRecord struct {
	// ChangeHash is the approved change's status.pendingRollout.changeHash.
	// +kubebuilder:validation:MaxLength=63
	ChangeHash string `json:"changeHash"`

	// ApprovedBy is the user the API server authenticated for the request that set the approval
	// (the admission webhook stamps it; absent when no webhook did).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ApprovedBy string `json:"approvedBy,omitempty"`

	// Time is when the operator took the approval into account (or refused it).
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// ThroughWindow: the approval also lets the change through a closed maintenance window.
	// +optional
	ThroughWindow bool `json:"throughWindow,omitempty"`

	// Change is the kind of the approved change (Render, Spec or Upgrade).
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Change string `json:"change,omitempty"`
	// StatefulSet is the StatefulSet the approved change changes first.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StatefulSet string `json:"statefulSet,omitempty"`

	// Message, on a refused approval, says why.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// MaintenanceStatus is the state of an instance's maintenance calendar.
type MaintenanceStatus struct {
	// Open says whether disruptive changes may start now.
	Open bool `json:"open"`

	// Reason is why: InWindow, NoWindows (only exclusions are declared), OutsideWindows or
	// Excluded.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// Message says it in words, naming the window or the exclusion.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// NextOpen, when closed, is when the calendar next opens (absent: not within a year).
	// +optional
	NextOpen *metav1.Time `json:"nextOpen,omitempty"`

	// NextClose, when open, is when it next closes (absent: not within a year).
	// +optional
	NextClose *metav1.Time `json:"nextClose,omitempty"`
}

// BackupStatus is the state of an instance's backups.
type BackupStatus struct {
	// Target is where backups go: claim:<claim>/<path>/<namespace>/<instance> or
	// s3://<bucket>/<prefix>/<namespace>/<instance> at the endpoint.
	// +optional
	Target string `json:"target,omitempty"`

	// Last is the last backup that ended, whole or failed.
	// +optional
	Last *BackupRecord `json:"last,omitempty"`

	// LastSuccessful is the last whole backup.
	// +optional
	LastSuccessful *BackupRecord `json:"lastSuccessful,omitempty"`

	// Available are the whole backups on the target after the last backup's pruning, newest first
	// (at most 100). `kubectl tiled backups` lists them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Available []AvailableBackup `json:"available,omitempty"`

	// Restore is the restore the instance's database started from (spec.backup.restoreFrom).
	// +optional
	Restore *RestoreRecord `json:"restore,omitempty"`
}

// BackupRecord is one backup's outcome.
type BackupRecord struct {
	// Name is the backup's name: the UTC time it began.
	// +optional
	Name string `json:"name,omitempty"`
	// Job is the Job that took it.
	Job string `json:"job"`
	// Result is Succeeded or Failed.
	// +kubebuilder:validation:Enum=Succeeded;Failed
	Result string `json:"result"`
	// CompletionTime is when the Job ended.
	CompletionTime metav1.Time `json:"completionTime"`
	// Bytes is the size of its dumps.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// Seconds is how long the dumps took.
	// +optional
	Seconds int64 `json:"seconds,omitempty"`
	// TiledVersion is the Tiled version the databases were at.
	// +optional
	TiledVersion string `json:"tiledVersion,omitempty"`
	// Message says why a backup failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// AvailableBackup is a whole backup on the target.
type AvailableBackup struct {
	// Name is the backup's name: the UTC time it began.
	Name string `json:"name"`
	// Bytes is the size of its dumps.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
}

// RestoreRecord is the restore an instance's database started from.
type RestoreRecord struct {
	// Backup is the backup restored (spec.backup.restoreFrom, "latest" resolved to a name).
	Backup string `json:"backup"`
	// Result is Restored, or Skipped when the database already held a catalog (a re-added instance
	// whose retained volume came back): it was kept, nothing restored.
	// +kubebuilder:validation:Enum=Restored;Skipped
	Result string `json:"result"`
	// CompletionTime is when the restore ended.
	CompletionTime metav1.Time `json:"completionTime"`
	// Seconds is how long the restore Job ran.
	// +optional
	Seconds int64 `json:"seconds,omitempty"`
}

// InPlaceRestorePhase is a step of a restore in place, or its outcome.
// +kubebuilder:validation:Enum=BackingUp;Stopping;Restoring;Starting;Succeeded;Failed;Refused
type InPlaceRestorePhase string

const (
	// InPlaceRestoreBackingUp: a Job backs the databases up as they are (status.inPlaceRestore.
	// preRestoreBackup), so that the restore can be undone; Tiled serves.
	InPlaceRestoreBackingUp InPlaceRestorePhase = "BackingUp"
	// InPlaceRestoreStopping: the Tiled pods are stopped (0 replicas), so that none serves, or
	// writes, while the databases are replaced.
	InPlaceRestoreStopping InPlaceRestorePhase = "Stopping"
	// InPlaceRestoreRestoring: a Job checks the backup and restores each database from it in one
	// transaction; Tiled is stopped.
	InPlaceRestoreRestoring InPlaceRestorePhase = "Restoring"
	// InPlaceRestoreStarting: Tiled starts on the restored databases.
	InPlaceRestoreStarting InPlaceRestorePhase = "Starting"
	// InPlaceRestoreSucceeded: the databases hold the backup and Tiled serves them.
	InPlaceRestoreSucceeded InPlaceRestorePhase = "Succeeded"
	// InPlaceRestoreFailed: the restore did not happen (the backup before it failed, or the backup
	// was refused before any database was touched) and Tiled serves the databases as they were; or
	// (stopped true) the restore failed part way and Tiled stays stopped until another restore is
	// requested.
	InPlaceRestoreFailed InPlaceRestorePhase = "Failed"
	// InPlaceRestoreRefused: the request was refused before anything was done (an upgrade runs, no
	// backup target, no such backup); message says why.
	InPlaceRestoreRefused InPlaceRestorePhase = "Refused"
)

// InPlaceRestoreStatus is a restore in place: one request, its steps and its outcome.
type InPlaceRestoreStatus struct {
	// Request is the request's id (annotation tiled.blueskyproject.io/restore-request): the
	// operator acts once per id.
	Request string `json:"request"`
	// Backup is the backup restored (annotation tiled.blueskyproject.io/restore).
	Backup string `json:"backup"`
	// RequestedBy is who asked (annotation tiled.blueskyproject.io/restore-requested-by; "" when
	// the request did not say).
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// Target is where the backups are: spec.backup's target when the request was accepted.
	// +optional
	Target string `json:"target,omitempty"`
	// Phase is the step under way, or the outcome.
	Phase InPlaceRestorePhase `json:"phase"`
	// PreRestoreBackup is the backup of the databases as they were before the restore, on the same
	// target: restore it (`kubectl tiled restore INSTANCE --from NAME`) to undo this restore. It
	// is never pruned by the restore itself; the scheduled backups' retention treats it as any
	// other backup.
	// +optional
	PreRestoreBackup string `json:"preRestoreBackup,omitempty"`
	// Stopped says Tiled is kept stopped: a restore that failed part way leaves the databases
	// partly restored, and another restore (of this backup, of the pre-restore backup, or of any
	// other) is the way on.
	// +optional
	Stopped bool `json:"stopped,omitempty"`
	// CacheFlushed says the managed streaming cache was emptied while Tiled was stopped (its pod
	// replaced: the cache keeps its data in memory and on an emptyDir), so that no stream replays
	// updates written to the databases the restore replaced. An external cache is not flushed.
	// +optional
	CacheFlushed bool `json:"cacheFlushed,omitempty"`
	// StartTime is when the request was accepted (or refused).
	StartTime metav1.Time `json:"startTime"`
	// PhaseTime is when the current phase began.
	// +optional
	PhaseTime *metav1.Time `json:"phaseTime,omitempty"`
	// StopTime is when Tiled was stopped.
	// +optional
	StopTime *metav1.Time `json:"stopTime,omitempty"`
	// CompletionTime is when the restore ended (Succeeded, Failed, Refused).
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// RestoreSeconds is how long the restore Job ran, in seconds.
	// +optional
	RestoreSeconds int64 `json:"restoreSeconds,omitempty"`
	// DowntimeSeconds is how long no Tiled pod served, in seconds: from the stop until Tiled was
	// ready again.
	// +optional
	DowntimeSeconds int64 `json:"downtimeSeconds,omitempty"`
	// Message says why a request was refused or failed, in words.
	// +optional
	Message string `json:"message,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ti,categories=tiled
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels.tiled\.blueskyproject\.io/cluster`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.database.catalogRevision`
// +kubebuilder:printcolumn:name="Upgrade",type=string,JSONPath=`.status.upgrade.phase`
// +kubebuilder:printcolumn:name="Last Backup",type=string,JSONPath=`.status.backup.lastSuccessful.name`,priority=1
// +kubebuilder:printcolumn:name="Storage",type=string,JSONPath=`.spec.storage.data.size`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.status.database.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be at most 63 lower-case letters, digits and '-', starting with a letter: it names the instance's Services and is a label value of its objects"

// TiledInstance is one Tiled deployment (usually one beamline): a Tiled server StatefulSet with its
// configuration, Secret, volumes, Services and PostgreSQL database. Every field is populated, and
// provenance says which layer (built-in default, profile, cluster template, instance override, or an
// expression in one of them) set it.
type TiledInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the complete specification of the deployment.
	// +optional
	Spec TiledInstanceSpec `json:"spec,omitempty"`

	// Provenance maps the path of every expanded leaf field (e.g. spec.storage.data.size) to the layer
	// that set it: default, profile/<name>@<generation>, cluster/template, instance/<name>/overrides,
	// or instance (for a standalone instance's own fields), with " (expression)" appended when a CEL
	// expression of that layer computed the value. A built-in image the manager's environment
	// replaced is "default (RELATED_IMAGE_<ROLE>)", naming the variable. `kubectl tiled why` reads it.
	// +optional
	Provenance map[string]string `json:"provenance,omitempty"`

	// Status is the observed state of the deployment.
	// +optional
	Status TiledInstanceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// TiledInstanceList is a list of TiledInstances.
type TiledInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TiledInstance `json:"items"`
}

// NotificationStatus is the delivery of an instance's notifications.
type NotificationStatus struct {
	// Since is when notifications were first configured for the instance: a past upgrade or backup
	// that ended before it is not notified.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// Delivered are the notifications delivered, newest last (at most 32): each one's key (the
	// X-Tiled-Notification-Id header it was sent with) and when.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Delivered []DeliveredNotification `json:"delivered,omitempty"`

	// Failures is the number of failed deliveries in a row (0 once one succeeds); the next attempt
	// waits 10s, 20s, 40s... up to 10 minutes after the last.
	// +optional
	Failures int32 `json:"failures,omitempty"`

	// LastError is the last delivery error (the URL as scheme://host), kept after a later success.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`

	// LastErrorTime is when LastError happened.
	// +optional
	LastErrorTime *metav1.Time `json:"lastErrorTime,omitempty"`
}

// DeliveredNotification is one notification delivered.
type DeliveredNotification struct {
	// Key identifies the state change notified (e.g. approval/<changeHash>).
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
	// Time is when it was delivered.
	Time metav1.Time `json:"time"`
}
