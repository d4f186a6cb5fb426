package controllers

import (
	"context"
	"io"
	"net/http"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/childset"
	"github.com/bluesky/tiled-operator/expansion"
)

// The children: read from the cache (list, watch; never a get), written with server-side apply
// (patch, and create when the apply creates), pruned (delete). A Secret is read past the cache
// (get) only when it is an external database's; the instance's own Secret is always rendered, so it
// is never pruned and the operator cannot delete Secrets. A StatefulSet is listed past the cache
// (by name) only when the render changes its pod template without a change of the spec
// (tiledinstance_rendergate.go), to name what differs. test/packaging's
// TestManagerUsesEveryPermission fails on a verb the manager never uses; docs/rbac.md. Pods are
// read from the cache, and one is deleted only when it is stuck on an older revision of its
// StatefulSet (tiledinstance_stuckpods.go).
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledinstances/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=configmaps;services;persistentvolumeclaims,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses;networkpolicies,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete

// DefaultInstanceConcurrency is how many TiledInstances the manager reconciles at once.
const DefaultInstanceConcurrency = 4

// DefaultProbeGrace is how long a container may run without becoming ready before the instance names
// it (reason ProbeFailing): longer than Tiled's and PostgreSQL's readiness probes take to fail
// (20 s, render.ReadyPeriodSeconds × render.ReadyFailureThreshold, and 15 s), short enough that a
// failing probe is reported within two minutes.
const DefaultProbeGrace = 60 * time.Second

// TiledInstanceReconciler renders and applies the objects of each TiledInstance: its ConfigMap,
// Secret, StatefulSet, Services, volumes, optional Ingress, PodDisruptionBudget and ServiceMonitor,
// and its managed database; it prunes the objects it no longer renders and reports readiness.
//
// One reconcile is a list of stages, each in its own file: observe (tiledinstance_observe.go: the
// instance and every read of the reconcile, from the cache), inputs (tiledinstance_desire.go: the
// expanded spec, the Secret's data), restore (tiledinstance_backup.go: a new instance's bootstrap
// from a backup), lost catalog (tiledinstance_lostcatalog.go, package catalog), restore in place
// (tiledinstance_inplace.go, package inplace: a serving instance's databases replaced by a backup on
// request), upgrade (tiledinstance_upgrade.go: the next step of a Tiled
// version change, package upgrade), desire (tiledinstance_desire.go: the render, package desired),
// apply and prune (tiledinstance_apply.go: package childset, retention.go) and status
// (tiledinstance_status.go, from the pure instanceStatus).
type TiledInstanceReconciler struct {
	// Client reads from the informer cache.
	Client client.Client
	// APIReader reads past the cache; used only for an external database's Secret, which the
	// operator does not label and so does not cache, and for the whole of a StatefulSet (the cache
	// holds it trimmed) when the render changes its pod template without a change of the spec
	// (tiledinstance_rendergate.go).
	APIReader client.Reader
	// Applier writes with server-side apply and skips unchanged intents.
	Applier *applier.Applier
	// Recorder sends Events, only on state transitions.
	Recorder events.EventRecorder
	// Builtins are the built-in defaults, used to expand a standalone instance that was stored terse
	// (without the mutating webhook).
	Builtins expansion.Builtins
	// ServiceMonitorAvailable says the ServiceMonitor CRD exists.
	ServiceMonitorAvailable bool
	// ExternalSecretRetry is how long to wait before looking again at a missing or incomplete external
	// database Secret (the operator does not watch Secrets it does not manage); 0 means 10s.
	ExternalSecretRetry time.Duration
	// ExternalSecretRecheck is how often an instance on an external database looks at its Secret
	// again while all is well, so that a Secret deleted or emptied later is reported; 0 means 30s. It
	// costs one GET per such instance per period (instances on a managed database cost nothing idle).
	ExternalSecretRecheck time.Duration
	// NotifyClient sends notifications to spec.notifications.webhook (tiledinstance_notify.go);
	// nil means an http.Client with notify.Timeout. The HMAC key's Secret is read with APIReader.
	NotifyClient *http.Client
	// Random is the source of generated secrets; nil means crypto/rand.
	Random io.Reader
	// Resync, when not nil, delivers instances to reconcile again (Operator.ResyncAll).
	Resync <-chan event.GenericEvent
	// Metrics counts the migrations that end (tiled_operator_migrations_total); nil counts nothing.
	Metrics *Metrics
	// Concurrency is how many instances reconcile at once; 0 means DefaultInstanceConcurrency. Each reconcile mostly waits on
	// the API server, so a few in flight keep it busy.
	Concurrency int
	// ProbeGrace is how long a running container may stay unready before the instance reports it;
	// 0 means DefaultProbeGrace.
	ProbeGrace time.Duration

	// memories are what the controller keeps per instance between reconciles (memories.go).
	memories instanceMemories
}

// Reconcile renders and applies one instance's objects.
func (r *TiledInstanceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cur, err := r.observe(ctx, req)
	if cur == nil {
		return ctrl.Result{}, err // gone (and forgotten), being deleted, paused, or not read
	}
	in, err := r.inputs(ctx, cur)
	if err != nil {
		return r.failed(ctx, cur, err)
	}
	restoring, err := r.restore(ctx, cur, &in)
	if err != nil {
		return r.failed(ctx, cur, err)
	}
	if !restoring {
		// A lost catalog keeps Tiled stopped (and may restore it) whatever an upgrade would do.
		if restoring, err = r.lostCatalog(ctx, cur, &in); err != nil {
			return r.failed(ctx, cur, err)
		}
	}
	busy := ""
	if restoring {
		busy = "the restore of its database (spec.backup.restoreFrom, or a lost catalog)"
	}
	inPlace, err := r.restoreInPlace(ctx, cur, &in, busy)
	if err != nil {
		return r.failed(ctx, cur, err)
	}
	restoring = restoring || inPlace
	in.restoring = restoring
	if !restoring {
		if in.upgrade, err = r.upgrade(ctx, cur, &in); err != nil {
			return r.failed(ctx, cur, err)
		}
	}
	want, err := r.desire(cur, in)
	if err != nil {
		return r.failed(ctx, cur, err)
	}
	rec, err := r.apply(ctx, cur, in, want)
	if err != nil {
		return r.failed(ctx, cur, err)
	}
	if err := r.prune(ctx, cur, rec); err != nil {
		return ctrl.Result{}, err
	}
	return r.status(ctx, cur, in, rec)
}

// SetupWithManager registers the controller and the owner index of child objects.
func (r *TiledInstanceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	b := ctrl.NewControllerManagedBy(mgr).
		Named("tiledinstance").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.concurrency()}).
		For(&tiledv1alpha1.TiledInstance{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, approvalChanged))).
		Watches(&tiledv1alpha1.TiledProfile{}, profileHandler(r.Client, false))
	for _, obj := range ChildKinds() {
		if err := childset.AddOwnerIndex(ctx, mgr.GetCache(), obj); err != nil {
			return err
		}
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return err
		}
		b = b.Owns(obj, builder.WithPredicates(notCreated, r.forgetDeleted(gvk)))
	}
	// Retained claims and the Secret under the Retain policy have no owner reference, so the watches
	// above do not map their deletion to the instance; their instance label does.
	for _, obj := range []client.Object{&corev1.Secret{}, metadataOnly(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))} {
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return err
		}
		// The applier hears of the deletion in this handler too, before the enqueue: the handlers
		// of one informer run concurrently, so the Owns watch's may come after the reconcile.
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(labelledInstance), builder.WithPredicates(unownedDeleted, r.forgetDeleted(gvk)))
	}
	// The instances' pods (cached trimmed to their status, see podstatus.Trim): their failures are
	// named on the instance. They belong to the StatefulSets, so they map to the instance by label.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podInstanceIndex, indexPodInstance); err != nil {
		return err
	}
	b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(labelledInstance), builder.WithPredicates(podStatusChanged))
	// The backup CronJob's Jobs are not the instance's (the Owns watch misses them): their end maps
	// to the instance by label.
	b = b.Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(labelledInstance), builder.WithPredicates(backupJobFinished))
	// While its cluster is paused an instance skips its reconciles, pod events included; when the
	// pause ends, each of the cluster's instances looks again at what it missed.
	b = b.Watches(&tiledv1alpha1.TiledCluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterInstances), builder.WithPredicates(unpaused))
	if r.Resync != nil {
		b = b.WatchesRawSource(source.Channel(r.Resync, &handler.EnqueueRequestForObject{}))
	}
	// The cache of PersistentVolumes (NFS volumes the operator creates) starts with the manager, so
	// that reading one never falls through to the API server.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.PersistentVolume{}); err != nil {
		return err
	}
	// A PersistentVolume deleted by anyone comes back at once (it is cluster-scoped, so it has no
	// owner reference to map it back: its claim's namespace and the instance label do).
	pvDeleted := predicate.And(predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}, r.forgetDeleted(corev1.SchemeGroupVersion.WithKind("PersistentVolume")))
	b = b.Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(pvInstance), builder.WithPredicates(pvDeleted))
	return b.Complete(r)
}

func (r *TiledInstanceReconciler) concurrency() int {
	if r.Concurrency > 0 {
		return r.Concurrency
	}
	return DefaultInstanceConcurrency
}
