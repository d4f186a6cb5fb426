package controllers

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/render"
)

// observedInstance is what the instance controller saw after applying an instance's objects: its
// StatefulSets as the cache holds them, what the pods' statuses say, and what it applied. The
// instance's status is computed from it alone (instanceStatus).
type observedInstance struct {
	// Generation is the instance's metadata.generation.
	Generation int64
	// Namespace and TiledName (the Tiled StatefulSet's and Service's name) make the URL.
	Namespace, TiledName string
	// Image is the image the Tiled pods are rendered with (nil: the spec has no tiled section, and
	// status.image stays as it was); Replicas how many the spec asks for.
	Image    *string
	Replicas int32
	// Tiled is the Tiled StatefulSet from the cache, nil when the cache does not hold it yet;
	// TiledApplied the generation the last apply of it produced (the cache may not have caught up).
	Tiled        *appsv1.StatefulSet
	TiledApplied int64
	// External: the instance uses an external database (no DatabaseReady condition).
	External bool
	// Postgres is the managed PostgreSQL StatefulSet from the cache (nil when not there yet),
	// PostgresApplied the generation its last apply produced, PostgresPod the pod named in messages.
	Postgres        *appsv1.StatefulSet
	PostgresApplied int64
	PostgresPod     string
	// Streaming is how the instance streams: off, through a managed cache or an external one.
	Streaming streaming
	// Cache is the managed streaming cache's StatefulSet from the cache (nil when not there yet),
	// CacheApplied the generation its last apply produced, CachePod the pod named in messages.
	Cache        *appsv1.StatefulSet
	CacheApplied int64
	CachePod     string
	// ServerProblem, DatabaseProblem and CacheProblem are podstatus.Diagnose's findings for the
	// Tiled, database and streaming cache pods (nil: nothing wrong it can name).
	ServerProblem, DatabaseProblem, CacheProblem *podstatus.Problem
	// IngressHostWithoutEnabled: spec.expose.ingress has a host but is not enabled.
	IngressHostWithoutEnabled bool
	// ExternalEdits describes fields of children that other writers manage ("" when none).
	ExternalEdits string
	// UpgradeStall and UpgradeProgress are the upgrade procedure's (package upgrade): a stall that
	// needs a person, or the step it is at.
	UpgradeStall, UpgradeProgress *upgrade.Condition
	// Revisions is the report the newest Tiled pod's migrate step left: the Tiled version it runs
	// and the databases' revisions (nil when none has).
	Revisions *upgrade.Report
	// PendingRollout is a change of the Tiled pod template the render makes without a change of the
	// spec, not applied, waiting for the cluster's rollout (nil: none); PendingMessage describes it.
	PendingRollout *tiledv1alpha1.PendingRollout
	PendingMessage string
	// DependencyWait, when not "", says that a change of the Tiled pod template waits for a managed
	// dependency to be ready (tiledinstance_dependencies.go): RolloutPending, WaitingForDependency.
	DependencyWait string
	// Maintenance is status.maintenance (nil: no spec.maintenance).
	Maintenance *tiledv1alpha1.MaintenanceStatus
	// StuckHeld names the pods stuck on an older revision of their StatefulSet that are not replaced
	// because the instance is held ("" when none); said in the Stalled condition.
	StuckHeld string
	// CheckedImages is status.checkedImages (nil: as it was); ImageCheckReason and
	// ImageCheckMessage are ImageCheckPending's ("" message: none waits; tiledinstance_imagecheck.go).
	CheckedImages                       []tiledv1alpha1.CheckedImage
	ImageCheckReason, ImageCheckMessage string
}

// instanceStatus computes an instance's status from its previous one (whose conditions keep their
// transition times, and whose DatabaseReady tells an outage from a start) and what was observed:
// readyReplicas, URL, image, database, and the Ready, Reconciling, Stalled, DatabaseReady,
// IngressEnabled and ExternalEdits conditions. It is pure; prev is not modified.
func instanceStatus(prev *tiledv1alpha1.TiledInstanceStatus, o observedInstance) *tiledv1alpha1.TiledInstanceStatus {
	status := prev.DeepCopy()
	gen := o.Generation
	status.ObservedGeneration = gen
	status.ReadyReplicas = 0
	serverReady := false
	if o.Tiled != nil {
		status.ReadyReplicas = o.Tiled.Status.ReadyReplicas
		serverReady = statefulSetReadyAt(o.Tiled, max(o.Tiled.Generation, o.TiledApplied), o.Replicas)
	}
	status.URL = fmt.Sprintf("http://%s.%s.svc:8000", o.TiledName, o.Namespace)
	if o.Image != nil {
		status.Image = *o.Image
	}

	mode, dbReady, dbProblem := "External", true, (*podstatus.Problem)(nil)
	if o.External {
		removeCondition(&status.Conditions, ConditionDatabaseReady)
	} else {
		mode, dbReady, dbProblem = "Managed", false, o.DatabaseProblem
		if o.Postgres != nil {
			dbReady = statefulSetReadyAt(o.Postgres, max(o.Postgres.Generation, o.PostgresApplied), 1)
		}
		setDatabaseCondition(status, gen, dbReady, dbProblem, o.PostgresPod)
	}
	status.Database = &tiledv1alpha1.DatabaseStatus{Mode: mode, Ready: dbReady}
	if prev.Database != nil {
		status.Database.CatalogRevision, status.Database.AuthRevision = prev.Database.CatalogRevision, prev.Database.AuthRevision
		status.Database.ClaimUID = prev.Database.ClaimUID
	}
	if r := o.Revisions; r != nil {
		status.Version = r.Version
		status.Database.CatalogRevision, status.Database.AuthRevision = r.Catalog.Rev(), r.Auth.Rev()
	}

	cacheReady := true
	if o.Streaming == streamingManaged {
		cacheReady = o.Cache != nil && statefulSetReadyAt(o.Cache, max(o.Cache.Generation, o.CacheApplied), 1)
		setCacheCondition(status, gen, cacheReady, o.CacheProblem, o.CachePod)
	} else {
		removeCondition(&status.Conditions, ConditionStreamingCacheReady)
	}

	// A pod failure that will not mend by itself stalls the instance; everything was applied all the
	// same, and nothing is deleted but a pod stuck on an older revision (tiledinstance_stuckpods.go).
	var stall *podstatus.Problem
	switch {
	case !dbReady && dbProblem != nil && dbProblem.Stalled:
		stall = dbProblem
	case !cacheReady && o.CacheProblem != nil && o.CacheProblem.Stalled:
		stall = o.CacheProblem
	case !serverReady && o.ServerProblem != nil && o.ServerProblem.Stalled:
		stall = o.ServerProblem
	}
	// Stalled is removed only when nothing stalls: set again, it keeps its place and the time of
	// its transition (else every reconcile of a stalled instance, a restarted operator's first
	// included, would write a new one).
	if o.UpgradeStall == nil && stall == nil {
		removeCondition(&status.Conditions, ConditionStalled)
	}
	switch {
	case o.UpgradeStall != nil:
		setStalled(&status.Conditions, gen, o.UpgradeStall.Reason, o.UpgradeStall.Message)
	case stall != nil:
		msg := stall.Message
		if o.StuckHeld != "" {
			msg += "; " + o.StuckHeld
		}
		setStalled(&status.Conditions, gen, stall.Reason, msg)
	case o.UpgradeProgress != nil:
		setReconciling(&status.Conditions, gen, o.UpgradeProgress.Reason, o.UpgradeProgress.Message)
	case !dbReady:
		c := meta.FindStatusCondition(status.Conditions, ConditionDatabaseReady)
		setReconciling(&status.Conditions, gen, c.Reason, c.Message)
	case !cacheReady:
		c := meta.FindStatusCondition(status.Conditions, ConditionStreamingCacheReady)
		setReconciling(&status.Conditions, gen, c.Reason, c.Message)
	case !serverReady:
		reason, msg := ReasonWaitingForPods, fmt.Sprintf("%d of %d Tiled pods ready", status.ReadyReplicas, o.Replicas)
		if o.ServerProblem != nil {
			reason, msg = o.ServerProblem.Reason, msg+": "+o.ServerProblem.Message
		}
		setReconciling(&status.Conditions, gen, reason, msg)
	default:
		setReady(&status.Conditions, gen, ReasonReady, fmt.Sprintf("Tiled serves at %s", status.URL))
	}
	if o.IngressHostWithoutEnabled {
		setCondition(&status.Conditions, gen, ConditionIngressEnabled, metav1.ConditionFalse, ReasonHostWithoutEnabled,
			"spec.expose.ingress has a host but enabled is not set: no Ingress is created; set enabled: true to expose Tiled at that host, or false to say it is meant")
	} else {
		removeCondition(&status.Conditions, ConditionIngressEnabled)
	}
	status.PendingRollout = o.PendingRollout.DeepCopy()
	status.Maintenance = o.Maintenance.DeepCopy()
	if o.PendingRollout != nil {
		reason := ReasonRenderChanged
		switch {
		case o.PendingRollout.Approval == tiledv1alpha1.ApprovalRequired:
			reason = ReasonWaitingForApproval
		case o.PendingRollout.Window != "":
			reason = ReasonWaitingForMaintenance
		}
		setCondition(&status.Conditions, gen, ConditionRolloutPending, metav1.ConditionTrue, reason, o.PendingMessage)
	} else if o.DependencyWait != "" {
		setCondition(&status.Conditions, gen, ConditionRolloutPending, metav1.ConditionTrue, ReasonWaitingForDependency, o.DependencyWait)
	} else {
		removeCondition(&status.Conditions, ConditionRolloutPending)
	}
	if o.CheckedImages != nil {
		status.CheckedImages = o.CheckedImages
		if len(status.CheckedImages) == 0 {
			status.CheckedImages = nil
		}
	}
	if o.ImageCheckMessage != "" {
		setCondition(&status.Conditions, gen, ConditionImageCheckPending, metav1.ConditionTrue, o.ImageCheckReason, o.ImageCheckMessage)
	} else {
		removeCondition(&status.Conditions, ConditionImageCheckPending)
	}
	if o.ExternalEdits != "" {
		setCondition(&status.Conditions, gen, ConditionExternalEdits, metav1.ConditionTrue, ReasonFieldsManaged, o.ExternalEdits)
	} else {
		removeCondition(&status.Conditions, ConditionExternalEdits)
	}
	return status
}

// setStalled reports what needs a person: Stalled=True and Ready=False with the same reason, no
// Reconciling (kstatus never reads both).
func setStalled(conds *[]metav1.Condition, generation int64, reason, msg string) {
	removeCondition(conds, ConditionReconciling)
	setCondition(conds, generation, ConditionStalled, metav1.ConditionTrue, reason, msg)
	setCondition(conds, generation, ConditionReady, metav1.ConditionFalse, reason, msg)
}

// setReconciling reports progress: Reconciling=True and Ready=False with the same reason.
func setReconciling(conds *[]metav1.Condition, generation int64, reason, msg string) {
	setCondition(conds, generation, ConditionReconciling, metav1.ConditionTrue, reason, msg)
	setCondition(conds, generation, ConditionReady, metav1.ConditionFalse, reason, msg)
}

// setReady reports Ready=True, and no Reconciling.
func setReady(conds *[]metav1.Condition, generation int64, reason, msg string) {
	removeCondition(conds, ConditionReconciling)
	setCondition(conds, generation, ConditionReady, metav1.ConditionTrue, reason, msg)
}

// statefulSetReadyAt reports whether a StatefulSet has rolled out generation with want ready pods.
func statefulSetReadyAt(s *appsv1.StatefulSet, generation int64, want int32) bool {
	return s.Status.ObservedGeneration >= generation && s.Status.ReadyReplicas >= want &&
		s.Status.UpdatedReplicas >= want
}

// setDatabaseCondition sets DatabaseReady for a managed database: True when its StatefulSet is
// ready; otherwise False with what its pod's status says is wrong, or DatabaseUnavailable when it was
// ready before (an outage), or WaitingForDatabase while it starts.
func setDatabaseCondition(status *tiledv1alpha1.TiledInstanceStatus, generation int64, ready bool, problem *podstatus.Problem, pod string) {
	prev := meta.FindStatusCondition(status.Conditions, ConditionDatabaseReady)
	switch {
	case ready:
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionTrue, ReasonReady,
			fmt.Sprintf("PostgreSQL pod %s accepts connections", pod))
	case problem != nil:
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionFalse, problem.Reason, problem.Message)
	case prev != nil && (prev.Status == metav1.ConditionTrue || prev.Reason == ReasonDatabaseUnavailable):
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionFalse, ReasonDatabaseUnavailable,
			fmt.Sprintf("PostgreSQL pod %s is not ready: the database does not accept connections; Tiled's requests that need it fail until it is back", pod))
	default:
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionFalse, ReasonWaitingForDatabase,
			fmt.Sprintf("waiting for PostgreSQL pod %s to accept connections", pod))
	}
}

// streaming is how an instance streams live data.
type streaming int

const (
	streamingOff streaming = iota
	streamingManaged
	streamingExternal
)

// streamingMode is how the expanded instance streams.
func streamingMode(ti *tiledv1alpha1.TiledInstance) streaming {
	switch {
	case render.ManagedCacheEnabled(ti):
		return streamingManaged
	case render.StreamingEnabled(ti):
		return streamingExternal
	}
	return streamingOff
}

// setCacheCondition sets StreamingCacheReady for a managed streaming cache: True when its
// StatefulSet is ready; otherwise False with what its pod's status says is wrong, or
// StreamingCacheUnavailable when it was ready before (an outage: writes through Tiled fail, and
// subscribers wait, until it is back), or WaitingForStreamingCache while it starts.
func setCacheCondition(status *tiledv1alpha1.TiledInstanceStatus, generation int64, ready bool, problem *podstatus.Problem, pod string) {
	prev := meta.FindStatusCondition(status.Conditions, ConditionStreamingCacheReady)
	switch {
	case ready:
		setCondition(&status.Conditions, generation, ConditionStreamingCacheReady, metav1.ConditionTrue, ReasonReady,
			fmt.Sprintf("streaming cache pod %s answers", pod))
	case problem != nil:
		setCondition(&status.Conditions, generation, ConditionStreamingCacheReady, metav1.ConditionFalse, problem.Reason,
			"streaming cache: "+problem.Message)
	case prev != nil && (prev.Status == metav1.ConditionTrue || prev.Reason == ReasonStreamingCacheUnavailable):
		setCondition(&status.Conditions, generation, ConditionStreamingCacheReady, metav1.ConditionFalse, ReasonStreamingCacheUnavailable,
			fmt.Sprintf("streaming cache pod %s is not ready: Tiled's writes fail and subscribers wait until it is back (they resume from their last sequence number)", pod))
	default:
		setCondition(&status.Conditions, generation, ConditionStreamingCacheReady, metav1.ConditionFalse, ReasonWaitingForStreamingCache,
			fmt.Sprintf("waiting for streaming cache pod %s to answer", pod))
	}
}
