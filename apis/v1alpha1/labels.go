package v1alpha1

// Well-known label and annotation keys, beside LabelCluster, LabelInstance and LabelManagedBy
// (groupversion_info.go): each key is written once, here, and every package uses the constant.

// Kubernetes' recommended labels (app.kubernetes.io/...) on the objects of an instance. The render
// package sets them (with LabelManagedBy); LabelAppName, LabelAppInstance and LabelAppComponent form
// the workloads' immutable pod selector.
const (
	// LabelAppName is the application: "tiled" on every object of an instance.
	LabelAppName = "app.kubernetes.io/name"
	// LabelAppInstance is the name of the TiledInstance an object belongs to (not shortened: a
	// TiledInstance name is at most 63 characters). Unlike LabelInstance it is the object's name, not
	// the beamline's.
	LabelAppInstance = "app.kubernetes.io/instance"
	// LabelAppComponent says which part of the instance an object is: "server" (Tiled), "database"
	// (the managed PostgreSQL) or "data" (storage).
	LabelAppComponent = "app.kubernetes.io/component"
	// LabelStep on a Job of the upgrade procedure (and its pod) names its step: check, backup,
	// migrate or restore.
	LabelStep = "tiled.blueskyproject.io/step"
)

// AnnotationAllowConflicts on a TiledProfile, set to "true", turns the profile webhook's refusal of
// an edit that would put a cluster into conflict into a warning: for a change spread over several
// profiles that must be applied in an order that passes through a conflict. The clusters then report
// the conflict (and keep their instances as they were) until it is resolved.
const AnnotationAllowConflicts = "tiled.blueskyproject.io/allow-conflicts"

// AnnotationApprovedTemplate is set by the TiledCluster controller on a TiledInstance whose
// status.pendingRollout the cluster's rollout lets through (within spec.rollout.maxUnavailable, not
// held, not paused): its value is the pendingRollout's templateHash, and the instance controller
// applies that StatefulSet once it sees it. Present only while such a change rolls.
const AnnotationApprovedTemplate = "tiled.blueskyproject.io/approved-template"

// The approval of a pending change under spec.maintenance.approval Manual (docs/maintenance.md,
// "Approvals"). `kubectl tiled approve` sets them in one patch.
const (
	// LabelApprove on a TiledInstance approves the pending change whose
	// status.pendingRollout.changeHash is its value. A label, not an annotation, so that the
	// approval webhook's objectSelector sends it only the writes of instances that carry (or
	// carried) one.
	LabelApprove = "tiled.blueskyproject.io/approve"
	// AnnotationApproveThroughWindow, set to the same hash as LabelApprove, lets the approved change
	// through a closed maintenance window as well (bound to the hash, so that one left from an
	// earlier approval does not carry over to the next).
	AnnotationApproveThroughWindow = "tiled.blueskyproject.io/approve-through-window"
	// AnnotationApprovedBy is the user the API server authenticated for the write that set
	// LabelApprove (or AnnotationApproveThroughWindow): the approval webhook stamps it, and refuses
	// a write that sets it to another user.
	AnnotationApprovedBy = "tiled.blueskyproject.io/approved-by"
)

// AnnotationAcceptCatalogLoss on a TiledInstance whose catalog was lost (status.catalogLost) accepts
// the loss: its value is the UID of the database claim now bound (status.catalogLost.newClaimUID),
// so that it accepts that loss and no later one. The instance then starts Tiled on the empty
// database, which Tiled initialises as a new catalog (docs/backups.md, "A lost catalog").
const AnnotationAcceptCatalogLoss = "tiled.blueskyproject.io/accept-catalog-loss"

// The annotations that request the restore of a serving TiledInstance's databases from one of its
// backups, in place (docs/backups.md, "Restoring a serving beamline"). `kubectl tiled restore` sets
// all three in one patch; by hand, `kubectl annotate` does as well. The operator acts on a request
// once: status.inPlaceRestore records its id, and a request whose id is recorded there is done (or
// under way). Removing the annotations afterwards changes nothing.
const (
	// AnnotationRestore names the whole backup to restore, as `kubectl tiled backups` lists it (a
	// name on spec.backup's target; the plugin resolves "latest" to one before it writes).
	AnnotationRestore = "tiled.blueskyproject.io/restore"
	// AnnotationRestoreRequest is the request's id: a new id is a new request (to restore the same
	// backup again). Without it, the backup's name is the id.
	AnnotationRestoreRequest = "tiled.blueskyproject.io/restore-request"
	// AnnotationRestoreRequestedBy names who asked: `kubectl tiled restore` writes the user the API
	// server authenticated it as (a SelfSubjectReview). It is what the requester says; the API
	// server's audit log holds the patch's own user.
	AnnotationRestoreRequestedBy = "tiled.blueskyproject.io/restore-requested-by"
)

// Labels `kubectl tiled import-helm` puts on what it writes; the operator gives them no meaning.
const (
	// LabelProfile on a TiledProfile written by import-helm names it; the TiledCluster written
	// beside it selects the profile by this label.
	LabelProfile = "tiled.blueskyproject.io/profile"
	// LabelImportedFrom on such a profile says where it came from ("helm").
	LabelImportedFrom = "tiled.blueskyproject.io/imported-from"
)
