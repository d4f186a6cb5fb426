package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/expansion"
)

// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledinstances,verbs=create;patch;delete
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledclusters/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=delete

// TiledClusterReconciler expands each TiledCluster, through the TiledProfiles it selects, into its
// TiledInstances, prunes the instances it no longer lists, and reports what it did in its status.
//
// One reconcile is a list of stages, each in its own file: observe (tiledcluster_observe.go: the
// cluster, the profiles and the instances of its namespace, from the cache), desire
// (tiledcluster_desire.go: the expansion, package desired), plan (tiledcluster_plan.go: what is
// there for each desired instance, and the rollout's decisions), apply and prune
// (tiledcluster_apply.go: package childset, retention.go) and status (tiledcluster_status.go).
type TiledClusterReconciler struct {
	// Client reads from the informer cache.
	Client client.Client
	// Applier writes with server-side apply and skips unchanged intents.
	Applier *applier.Applier
	// Recorder sends Events, only on state transitions.
	Recorder events.EventRecorder
	// Builtins are the built-in defaults of every expansion.
	Builtins expansion.Builtins
	// Metrics records expansions; nil records nothing.
	Metrics *Metrics
	// Resync, when not nil, delivers clusters to reconcile again (Operator.ResyncAll).
	Resync <-chan event.GenericEvent

	// memories are what the controller keeps per cluster between reconciles (memories.go).
	memories clusterMemories
}

// Reconcile expands one TiledCluster and applies its instances.
func (r *TiledClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	cur, err := r.observe(ctx, req)
	if cur == nil && err == nil {
		r.memories.forget(r.Applier, req.NamespacedName) // gone: what was remembered of it goes too
		return ctrl.Result{}, nil
	}
	defer r.timed(req.NamespacedName, start)
	if err != nil || cur.idle {
		return ctrl.Result{}, err
	}
	want, err := r.desire(cur)
	if err != nil {
		return ctrl.Result{}, r.expansionFailed(ctx, cur, err) // nothing applied, nothing pruned
	}
	p, err := plan(cur, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	done, err := r.apply(ctx, cur, want, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	pruned, err := r.prune(ctx, cur, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.status(ctx, cur, want, p, done, pruned)
}

// SetupWithManager registers the controller: it watches TiledClusters, the TiledInstances they own,
// and TiledProfiles (re-enqueuing only the clusters whose selectors match a profile's old or new
// labels).
func (r *TiledClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.PersistentVolume{}, pvClusterIndex, indexVolumeCluster); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("tiledcluster").
		For(&tiledv1alpha1.TiledCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&tiledv1alpha1.TiledInstance{}, r.memberHandler()).
		Watches(&tiledv1alpha1.TiledProfile{}, profileHandler(r.Client, true))
	if r.Resync != nil {
		b = b.WatchesRawSource(source.Channel(r.Resync, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// memberPace is how many times its own last duration a cluster waits, after a change of one of its
// TiledInstances, before it reconciles: the changes of that wait (during a stamp-out, a status write
// of every instance) are taken together in one reconcile, so reconciles caused by members take at
// most a fifth of a worker's time, whatever the fleet's size. A small cluster's reconcile takes a
// millisecond or two, so it hardly waits; a thousand-instance one waits a fraction of a second.
const memberPace = 4

// maxMemberWait bounds that wait.
const maxMemberWait = 2 * time.Second

// memberHandler enqueues the cluster that controls a TiledInstance when the instance changes
// (after memberPace times the cluster's last reconcile) or is deleted (at once: it is put back).
// The creation of an instance does not enqueue: the cluster created it.
func (r *TiledClusterReconciler) memberHandler() handler.EventHandler {
	owner := func(o client.Object) (reconcile.Request, bool) {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != "TiledCluster" || ref.APIVersion != tiledv1alpha1.GroupVersion.String() {
			return reconcile.Request{}, false
		}
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}, true
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueueAdder) {
			if req, ok := owner(e.ObjectNew); ok {
				q.AddAfter(req, r.memberWait(req.NamespacedName))
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueueAdder) {
			if req, ok := owner(e.Object); ok {
				q.Add(req)
			}
		},
	}
}

// memberWait is how long a change of one of the cluster's instances waits before the cluster
// reconciles (memberPace).
func (r *TiledClusterReconciler) memberWait(cluster types.NamespacedName) time.Duration {
	d, ok := r.memories.took.load(cluster)
	if !ok {
		return 0
	}
	return min(memberPace*d, maxMemberWait)
}

// timed remembers how long the cluster's reconcile, started at start, took (memberWait).
func (r *TiledClusterReconciler) timed(cluster types.NamespacedName, start time.Time) {
	r.memories.took.store(cluster, time.Since(start))
}
