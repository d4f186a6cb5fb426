package controllers

import (
	"context"
	"encoding/json"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/expansion"
)

// Condition types. Ready, Reconciling and Stalled are the ones kstatus (and so ArgoCD and Flux) reads:
// Stalled=True is the only way to report failure, and Reconciling and Stalled are never set together.
const (
	ConditionReady            = "Ready"
	ConditionReconciling      = "Reconciling"
	ConditionStalled          = "Stalled"
	ConditionProfilesResolved = "ProfilesResolved"
	// ConditionExternalEdits is True while fields of a child object are managed by another writer.
	ConditionExternalEdits = "ExternalEdits"
	// ConditionIngressEnabled is False, and present only then, when the ingress has a host but is not
	// enabled, so no Ingress is created.
	ConditionIngressEnabled = "IngressEnabled"
	// ConditionDatabaseReady says whether an instance's managed PostgreSQL accepts connections (its
	// StatefulSet is ready); False names the pod and why. Instances on an external database do not
	// carry it: the operator does not connect to their database.
	ConditionDatabaseReady = "DatabaseReady"
	// ConditionStreamingCacheReady says whether an instance's managed streaming cache answers (its
	// StatefulSet is ready); False names the pod and why. Instances streaming through an external
	// cache, or not streaming, do not carry it.
	ConditionStreamingCacheReady = "StreamingCacheReady"
	// ConditionRolloutPending is True, and present only then, while a change of the Tiled pod template
	// that the operator renders without a change of the instance's spec (a new operator release)
	// waits for the TiledCluster's rollout (status.pendingRollout names it), or while a change of it
	// waits for a managed dependency to be ready (reason WaitingForDependency; no
	// status.pendingRollout: the cluster has nothing to approve).
	ConditionRolloutPending = "RolloutPending"
)

// Reasons.
const (
	ReasonResolved           = "Resolved"
	ReasonConflict           = "ProfileConflict"
	ReasonNoProfiles         = "NoProfilesSelected"
	ReasonInvalidSelector    = "InvalidSelector"
	ReasonExpressionError    = "ExpressionError"
	ReasonUnknownField       = "UnknownField"
	ReasonInvalidField       = "InvalidField"
	ReasonExpansionFailed    = "ExpansionFailed"
	ReasonRollingOut         = "RollingOut"
	ReasonWaitingForReady    = "WaitingForInstances"
	ReasonAllReady           = "AllInstancesReady"
	ReasonReady              = "Ready"
	ReasonWaitingForPods     = "WaitingForPods"
	ReasonWaitingForDatabase = "WaitingForDatabase"
	ReasonDatabaseSecret     = "DatabaseSecretInvalid"
	// ReasonStreamingCacheSecret: the Secret or key an external streaming cache's URI or password
	// is read from does not exist; nothing is applied (the Tiled pods keep what they have) until
	// it does.
	ReasonStreamingCacheSecret = "StreamingCacheSecretInvalid"
	ReasonRenderFailed         = "RenderFailed"
	ReasonFieldsManaged        = "FieldsManagedElsewhere"
	ReasonProfileDeleted       = "ProfileDeleted"
	ReasonChildRefused         = "ChildRefused"
	// ReasonHostWithoutEnabled: spec.expose.ingress has a host, but enabled is not set.
	ReasonHostWithoutEnabled = "HostWithoutEnabled"
	// ReasonNotAMember: a TiledInstance wears the operator's managed-by label without a TiledCluster
	// controlling it.
	ReasonNotAMember = "NotAMember"
	// ReasonInstancesStalled: some of a cluster's instances are Stalled or refused by the API server.
	ReasonInstancesStalled = "InstancesStalled"
	// ReasonInstancesHeld: every instance of a cluster is ready, and some keep their current spec
	// because spec.instances[].hold holds back a change (Ready=True: a hold is deliberate).
	ReasonInstancesHeld = "InstancesHeld"
	// ReasonDatabaseUnavailable: the managed PostgreSQL was ready and is not any more (an outage).
	ReasonDatabaseUnavailable = "DatabaseUnavailable"
	// ReasonStreamingCacheUnavailable: the managed streaming cache was ready and is not any more.
	ReasonStreamingCacheUnavailable = "StreamingCacheUnavailable"
	// ReasonWaitingForStreamingCache: the managed streaming cache is starting.
	ReasonWaitingForStreamingCache = "WaitingForStreamingCache"
	// Reasons from the pods' statuses (package podstatus): ImagePullBackOff, CrashLoopBackOff,
	// ContainerConfigError, ProbeFailing, Unschedulable.
	ReasonImagePull       = podstatus.ReasonImagePull
	ReasonCrashLoop       = podstatus.ReasonCrashLoop
	ReasonContainerConfig = podstatus.ReasonContainerConfig
	ReasonProbeFailing    = podstatus.ReasonProbeFailing
	ReasonUnschedulable   = podstatus.ReasonUnschedulable
	// ReasonRenderChanged: the operator renders an instance's pod template differently though its spec
	// did not change (RolloutPending, and the Event naming what differs).
	ReasonRenderChanged = "RenderChanged"
	// ReasonWaitingForMaintenance: a disruptive change waits for the instance's maintenance calendar
	// (spec.maintenance) to open (RolloutPending, and the Event naming the window).
	ReasonWaitingForMaintenance = "WaitingForMaintenance"
	// ReasonWaitingForDependency: a change of the Tiled pod template waits for a managed dependency
	// it runs against (the PostgreSQL database, the streaming cache), new or changed, to be ready
	// (RolloutPending, and an Event naming the dependency and what its pods say).
	ReasonWaitingForDependency = "WaitingForDependency"
	// ReasonMaintenanceInvalid: spec.maintenance cannot be read (a time zone the operator's machine
	// does not know): the instance stalls rather than guess when it may change.
	ReasonMaintenanceInvalid = "MaintenanceInvalid"
	// ReasonWaitingForApproval: under spec.maintenance.approval Manual, a disruptive change waits for
	// a person's approval (RolloutPending, and the Event naming its hash).
	ReasonWaitingForApproval = "WaitingForApproval"
	// ReasonApproved: the Event of a person's approval of a pending change, naming the approver.
	ReasonApproved = "Approved"
	// ReasonApprovalRefused: the Event of an approval that names no pending change (stale), ignored.
	ReasonApprovalRefused = "ApprovalRefused"
	// ReasonStuckPodReplaced: the Event of a pod deleted because it was stuck, failing and not Ready,
	// on an older revision of its StatefulSet (status.replacedPods).
	ReasonStuckPodReplaced = "StuckPodReplaced"
	// ReasonNotAllowed: an NFS export, uid or gid that the instance's TiledProfiles do not allow.
	ReasonNotAllowed = "NotAllowed"
)

// expansionReason maps an expansion error to a condition reason.
func expansionReason(err error) string {
	var (
		conflict *expansion.ConflictError
		none     *expansion.NoProfilesError
		sel      *expansion.SelectorError
		expr     *expansion.ExpressionError
		unknown  *expansion.UnknownFieldError
		invalid  *expansion.InvalidFieldError
		deleted  *ProfileDeletedError
		denied   *expansion.NotAllowedError
	)
	switch {
	case errors.As(err, &conflict):
		return ReasonConflict
	case errors.As(err, &none):
		return ReasonNoProfiles
	case errors.As(err, &sel):
		return ReasonInvalidSelector
	case errors.As(err, &expr):
		return ReasonExpressionError
	case errors.As(err, &unknown):
		return ReasonUnknownField
	case errors.As(err, &invalid):
		return ReasonInvalidField
	case errors.As(err, &deleted):
		return ReasonProfileDeleted
	case errors.As(err, &denied):
		return ReasonNotAllowed
	}
	return ReasonExpansionFailed
}

// setCondition sets a condition on a list of conditions, keeping lastTransitionTime when the status
// does not change, so that an unchanged condition makes an unchanged status (and no write).
func setCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// removeCondition drops a condition type.
func removeCondition(conds *[]metav1.Condition, typ string) {
	meta.RemoveStatusCondition(conds, typ)
}

// transitioned reports whether a condition changed status or reason between two lists: the
// moments worth an Event.
func transitioned(before, after []metav1.Condition, typ string) (*metav1.Condition, bool) {
	a := meta.FindStatusCondition(after, typ)
	if a == nil {
		return nil, false
	}
	b := meta.FindStatusCondition(before, typ)
	if b == nil || b.Status != a.Status || b.Reason != a.Reason {
		return a, true
	}
	return a, false
}

// applyStatus applies the status of one of the operator's own objects through the status
// subresource, and reports whether a request was sent (and the object's resourceVersion after it).
func applyStatus(ctx context.Context, a *applier.Applier, obj client.Object, kind string, status any) (applier.Result, error) {
	st, err := toMap(status)
	if err != nil {
		return applier.Result{}, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tiledv1alpha1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": obj.GetName(), "namespace": obj.GetNamespace()},
		"status":   st,
	}}
	return a.ApplyStatus(ctx, client.ApplyConfigurationFromUnstructured(u), obj, applier.Group(client.ObjectKeyFromObject(obj).String()))
}

// toMap converts a typed value to the map form used in unstructured apply configurations.
func toMap(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(data, &out)
}
