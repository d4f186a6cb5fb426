package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/catalog"
	"github.com/bluesky/tiled-operator/controllers/childset"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// status computes the instance's status from what the cache shows after the apply — the
// StatefulSets' readiness, the pods' statuses, fields other writers manage — writes it when it
// changed, and sends the Events of its transitions. It says when to look again: an instance on an
// external database looks at its Secret now and then; a container not ready yet reaches the probe
// grace period, and a child just created may never have reached the cache, with no event to say so.
func (r *TiledInstanceReconciler) status(ctx context.Context, cur *instanceState, in instanceInputs, rec *childset.Record) (ctrl.Result, error) {
	ti := cur.ti
	obs, recheck, err := r.observed(ctx, cur, in, rec)
	if err != nil {
		return ctrl.Result{}, err
	}
	stuck, err := r.replaceStuck(ctx, cur, []*appsv1.StatefulSet{obs.Tiled, obs.Postgres, obs.Cache})
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.StuckHeld = stuck.held
	status := instanceStatus(&ti.Status, obs)
	status.ReplacedPods = stuck.records
	r.rememberedApprovals(ti, status)
	accepted, refused := approvalStatus(ti, status, cur.approved, metav1.Now().Rfc3339Copy())
	r.rememberApprovals(ti, status, accepted, refused)
	if status.CatalogLost == nil && in.claim != nil {
		// Once the catalog exists, the claim it lives on (a lost catalog records the claim anew
		// when it is restored or its loss accepted).
		status.Database.ClaimUID = catalog.RecordClaim(status.Database, true, in.claim)
	}
	backupEvent, reportPending, err := r.backupStatus(ctx, cur, in, status)
	if err != nil {
		return ctrl.Result{}, err
	}
	log.FromContext(ctx).WithValues("instance", ti.Namespace+"/"+ti.Name).V(1).Info("reconciled", "applied", len(rec.Applied), "ready", status.ReadyReplicas)
	var result ctrl.Result
	if in.external {
		result.RequeueAfter = r.ExternalSecretRecheck
		if result.RequeueAfter == 0 {
			result.RequeueAfter = 30 * time.Second
		}
	}
	if recheck > 0 {
		// A container not ready yet reaches the grace period then, with no pod update to say so.
		recheck += time.Second
		if result.RequeueAfter == 0 || recheck < result.RequeueAfter {
			result.RequeueAfter = recheck
		}
	}
	if reportPending && (result.RequeueAfter == 0 || result.RequeueAfter > 2*time.Second) {
		// A backup Job ended and its pod's report has not reached the cache yet.
		result.RequeueAfter = 2 * time.Second
	}
	if catalogExpected(status) != catalogExpected(&ti.Status) && (result.RequeueAfter == 0 || result.RequeueAfter > time.Second) {
		// The status written now changes what the ConfigMap says (render.CatalogExpectedKey: the
		// instance has a catalog, the migrate step must never initialise one), and this reconcile
		// rendered it from the status it began with (desire). A status write triggers no reconcile
		// of its own (the generation does not change): look again until the cache shows the new
		// status and the render follows it.
		result.RequeueAfter = time.Second
	}
	if in.claimRecheck && (result.RequeueAfter == 0 || result.RequeueAfter > claimRecheck) {
		result.RequeueAfter = claimRecheck
	}
	if w := in.window.recheck(time.Now()); w > 0 && (result.RequeueAfter == 0 || w < result.RequeueAfter) {
		// The maintenance window opens (a waiting change starts) or closes then.
		result.RequeueAfter = w
	}
	if unseen := rec.Recheck; unseen > 0 && (result.RequeueAfter == 0 || unseen < result.RequeueAfter) {
		// A child just created is not in the cache yet: look again once the cache must show it,
		// in case it was deleted before it ever did.
		result.RequeueAfter = unseen
	}
	if retry := r.notifications(ctx, ti, &in.spec.Spec, status); retry > 0 && (result.RequeueAfter == 0 || retry < result.RequeueAfter) {
		// A notification's delivery failed: retried then (notify.Backoff).
		result.RequeueAfter = retry
	}
	sent, err := r.writeStatus(ctx, ti, status)
	if err != nil || !sent {
		return result, err
	}
	// Events mark transitions only: sent once, when the status that records them is written.
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionReady); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, ReasonReady, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionStalled); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionDatabaseReady); changed && c.Status == metav1.ConditionFalse && c.Reason != ReasonWaitingForDatabase {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
	}
	if e := backupEvent; e != nil {
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(ti, nil, typ, e.reason, "Backup", "%s", eventNote(e.message))
	}
	if p, was := status.PendingRollout, ti.Status.PendingRollout; p != nil && (was == nil || was.TemplateHash != p.TemplateHash || was.Window != p.Window ||
		was.Approval != p.Approval) {
		r.pendingEvent(ti, p)
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionImageCheckPending); changed && c.Reason != ReasonImageCheckRunning {
		// A new database or cache image that fails its check (tiledinstance_imagecheck.go): once.
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, ReasonImageCheckFailed, "ImageCheck", "%s", eventNote(c.Reason+": "+c.Message))
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionRolloutPending); changed && c.Reason == ReasonWaitingForDependency {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, ReasonWaitingForDependency, "Rollout", "%s", eventNote(c.Message))
	}
	r.approvalEvents(ti, accepted, refused)
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionExternalEdits); changed {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, ReasonFieldsManaged, "Reconcile",
			"%s; operator-owned fields are restored at the next change, other fields are left alone", c.Message)
	}
	return result, nil
}

// claimRecheck is how soon an instance whose catalog is lost looks for the database claim made
// again in place of the one deleted (tiledinstance_lostcatalog.go).
const claimRecheck = 3 * time.Second

// observed gathers what the instance's status is computed from (instanceStatus): the StatefulSets
// from the cache, the generations the applier produced, what the pods' statuses say and the fields
// other writers manage; and when to look again (a container not ready yet reaches the probe grace
// period then, with no pod update to say so).
func (r *TiledInstanceReconciler) observed(ctx context.Context, cur *instanceState, in instanceInputs, rec *childset.Record) (observedInstance, time.Duration, error) {
	ti, spec := cur.ti, in.spec
	n := names.For(spec.Namespace, spec.Name)
	obs := observedInstance{
		Generation: ti.Generation, Namespace: ti.Namespace, TiledName: n.Tiled, Replicas: 1,
		TiledApplied: rec.Applied[stsKey(ti.Namespace, n.Tiled)],
		External:     in.external,
		PostgresPod:  n.Postgres + "-0", PostgresApplied: rec.Applied[stsKey(ti.Namespace, n.Postgres)],
		Streaming: streamingMode(spec), CachePod: n.Cache + "-0", CacheApplied: rec.Applied[stsKey(ti.Namespace, n.Cache)],
		IngressHostWithoutEnabled: expansion.IngressHostWithoutEnabled(&spec.Spec.InstanceTemplate),
		ExternalEdits:             r.externalEdits(ctx, cur, rec.Applied),
	}
	if t := spec.Spec.Tiled; t != nil {
		obs.Image = &t.Image
		if t.Replicas != nil {
			obs.Replicas = *t.Replicas
		}
	}
	if l := in.upgrade.Lifecycle; l != nil && l.ServingImage != "" {
		obs.Image = &l.ServingImage
		if l.Stopped {
			obs.Replicas = 0
		}
	}
	obs.UpgradeStall, obs.UpgradeProgress = in.upgrade.Stall, in.upgrade.Progress
	obs.Maintenance = in.window.status()
	if in.heldUpgrade != "" {
		// The upgrade waits: the pods run the image they ran.
		if sts := cur.statefulSet(ctx, stsKey(ti.Namespace, n.Tiled)); sts != nil {
			img := containerImage(sts, "tiled")
			obs.Image = &img
		}
	}
	if p := cur.gate.pending; p != nil {
		obs.PendingRollout, obs.PendingMessage = p, pendingMessage(ti, p)
	}
	obs.CheckedImages, obs.ImageCheckReason, obs.ImageCheckMessage = cur.gate.images.checked, cur.gate.images.reason, cur.gate.images.message
	obs.DependencyWait = cur.gate.dependencyWait
	obs.Tiled = cur.statefulSet(ctx, stsKey(ti.Namespace, n.Tiled))
	if render.Autoscaled(spec) && (in.upgrade.Lifecycle == nil || !in.upgrade.Lifecycle.Stopped) {
		// The autoscaler sets the replicas: the StatefulSet's are the ones to wait for.
		lo, _ := render.AutoscalingBounds(spec)
		obs.Replicas = lo
		if obs.Tiled != nil && obs.Tiled.Spec.Replicas != nil {
			obs.Replicas = *obs.Tiled.Spec.Replicas
		}
	}
	pods, err := cur.pods(ctx)
	if err != nil {
		return obs, 0, err
	}
	serverPods, dbPods := pods.server, pods.database
	obs.Revisions = reportOf(serverPods)
	grace := r.ProbeGrace
	if grace == 0 {
		grace = DefaultProbeGrace
	}
	now := time.Now()
	var recheck time.Duration
	obs.ServerProblem, recheck = podstatus.Diagnose(serverPods, now, grace)
	if !obs.External {
		obs.Postgres = cur.statefulSet(ctx, stsKey(ti.Namespace, n.Postgres))
		var dbRecheck time.Duration
		obs.DatabaseProblem, dbRecheck = podstatus.Diagnose(dbPods, now, grace)
		if dbRecheck > 0 && (recheck == 0 || dbRecheck < recheck) {
			recheck = dbRecheck
		}
	}
	if obs.Streaming == streamingManaged {
		obs.Cache = cur.statefulSet(ctx, stsKey(ti.Namespace, n.Cache))
		var cacheRecheck time.Duration
		obs.CacheProblem, cacheRecheck = podstatus.Diagnose(pods.cache, now, grace)
		if cacheRecheck > 0 && (recheck == 0 || cacheRecheck < recheck) {
			recheck = cacheRecheck
		}
	}
	return obs, recheck, nil
}

// externalEdits lists the applied objects (from the cache) that have spec or metadata fields
// managed by a writer other than the operator.
func (r *TiledInstanceReconciler) externalEdits(ctx context.Context, cur *instanceState, applied map[applier.Key]int64) string {
	var found []string
	keys := make([]applier.Key, 0, len(applied))
	for k := range applied {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		child, err := cur.cachedChild(ctx, k)
		if err != nil || child == nil {
			continue
		}
		if managers := r.Applier.ForeignManagers(child); len(managers) > 0 {
			found = append(found, fmt.Sprintf("%s/%s has fields managed by %s", k.Kind, k.Name, strings.Join(managers, ", ")))
		}
	}
	return strings.Join(found, "; ")
}

// stall is a failure that needs a person, found by a stage: rather than retrying, Reconcile reports
// it (failed) and waits for a change of the instance, or retry.
type stall struct {
	reason, message string
	// database, when not nil, is the status.database reported with it.
	database *tiledv1alpha1.DatabaseStatus
	// retry, when not zero, is when to look again (what is missing is not watched).
	retry time.Duration
}

func (s *stall) Error() string { return s.message }

// failed ends a reconcile on err: a stall is reported (stalled), any other error returned for a
// retry.
func (r *TiledInstanceReconciler) failed(ctx context.Context, cur *instanceState, err error) (ctrl.Result, error) {
	var s *stall
	if !errors.As(err, &s) {
		return ctrl.Result{}, err
	}
	retry, err := r.stalled(ctx, cur.ti, s)
	if s.retry > 0 && (retry == 0 || s.retry < retry) {
		retry = s.retry
	}
	return ctrl.Result{RequeueAfter: retry}, err
}

// stalled reports a failure that needs a person: Stalled=True, Ready=False, no Reconciling. The
// objects already applied stay as they are.
//
// A stalled instance's notifications (a failed upgrade stalls it) are delivered as status() does,
// from its stored spec; it returns when to retry one (0: none).
func (r *TiledInstanceReconciler) stalled(ctx context.Context, ti *tiledv1alpha1.TiledInstance, s *stall) (time.Duration, error) {
	status := ti.Status.DeepCopy()
	status.ObservedGeneration = ti.Generation
	if s.database != nil {
		db := s.database.DeepCopy()
		if prev := ti.Status.Database; prev != nil {
			// What the catalog is and where it lives stays known through a stall.
			db.CatalogRevision, db.AuthRevision, db.ClaimUID = prev.CatalogRevision, prev.AuthRevision, prev.ClaimUID
		}
		status.Database = db
	}
	setStalled(&status.Conditions, ti.Generation, s.reason, s.message)
	var retry time.Duration
	if ti.Spec.Notifications != nil {
		// The stored spec (a terse standalone instance's may lack what its profiles say: its
		// record is then left as it is).
		retry = r.notifications(ctx, ti, &ti.Spec, status)
	}
	sent, err := r.writeStatus(ctx, ti, status)
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionStalled); changed && sent {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, s.reason, "Reconcile", "%s", c.Message)
	}
	return retry, err
}

// writeStatus applies the status when it differs from the one in the cache (and from the last one
// applied), and reports whether it sent it.
func (r *TiledInstanceReconciler) writeStatus(ctx context.Context, ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus) (bool, error) {
	if equality.Semantic.DeepEqual(&ti.Status, status) {
		return false, nil
	}
	res, err := applyStatus(ctx, r.Applier, ti, "TiledInstance", status)
	if res.Sent {
		r.memories.wroteStatus(ti, res.ResourceVersion)
	}
	return res.Sent, err
}
