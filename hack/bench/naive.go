package main

import (
	"context"
	"fmt"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
)

// naiveOperator is the baseline the operator is measured against: the controller one writes first.
// It has the same two controllers (clusters into instances, instances into objects), drives the same
// engine and the same renderers on the same expanded instances, with the same concurrency (one
// reconcile at a time per controller), but:
//   - every object is read with a GET from the API server before it is written (no informer reads),
//     and written with Create or a full Update (no server-side apply);
//   - its caches (used only to receive watch events) hold every object of the child kinds in the
//     namespace (no label selector);
//   - nothing is skipped when unchanged: every reconcile writes every object and the status (the API
//     server itself drops updates that change nothing, so this converges rather than loops);
//   - it reacts to every event of every owned object (no predicates).
type naiveOperator struct {
	ctrl.Manager
	Traffic *traffic.Counter

	reader   client.Reader // the API server, uncached
	writer   client.Client
	builtins expansion.Builtins

	reconciles                    atomic.Int64
	clusterResync, instanceResync chan event.GenericEvent
}

const naiveOwner = "naive-baseline"

func newNaive(cfg *rest.Config, ns string) (*naiveOperator, error) {
	scheme, err := operator.NewScheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	counter := traffic.New(nil)
	counter.Instrument(cfg)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	n := &naiveOperator{
		Manager: mgr, Traffic: counter, reader: mgr.GetAPIReader(), writer: mgr.GetClient(),
		builtins:      expansion.DefaultBuiltins(),
		clusterResync: make(chan event.GenericEvent, 64), instanceResync: make(chan event.GenericEvent, 64),
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("naive-cluster").
		For(&tiledv1alpha1.TiledCluster{}).
		Owns(&tiledv1alpha1.TiledInstance{}).
		Watches(&tiledv1alpha1.TiledProfile{}, handler.EnqueueRequestsFromMapFunc(n.clustersOf)).
		WatchesRawSource(source.Channel(n.clusterResync, &handler.EnqueueRequestForObject{})).
		Complete(reconcile.Func(n.reconcileCluster))
	if err != nil {
		return nil, err
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("naive-instance").For(&tiledv1alpha1.TiledInstance{}).
		WatchesRawSource(source.Channel(n.instanceResync, &handler.EnqueueRequestForObject{}))
	for _, o := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Service{}, &corev1.PersistentVolumeClaim{},
		&appsv1.StatefulSet{}, &networkingv1.Ingress{}, &policyv1.PodDisruptionBudget{}} {
		b = b.Owns(o)
	}
	if err := b.Complete(reconcile.Func(n.reconcileInstance)); err != nil {
		return nil, err
	}
	return n, nil
}

// clustersOf enqueues every cluster of a profile's namespace, listed from the API server.
func (n *naiveOperator) clustersOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list tiledv1alpha1.TiledClusterList
	if err := n.reader.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return out
}

// resyncAll reconciles every cluster and instance again, as Operator.ResyncAll does.
func (n *naiveOperator) resyncAll(ctx context.Context, ns string) (int, error) {
	var clusters tiledv1alpha1.TiledClusterList
	if err := n.GetClient().List(ctx, &clusters, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	var instances tiledv1alpha1.TiledInstanceList
	if err := n.GetClient().List(ctx, &instances, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	for i := range clusters.Items {
		n.clusterResync <- event.GenericEvent{Object: &clusters.Items[i]}
	}
	for i := range instances.Items {
		n.instanceResync <- event.GenericEvent{Object: &instances.Items[i]}
	}
	return len(clusters.Items) + len(instances.Items), nil
}

func (n *naiveOperator) reconcileCluster(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer n.reconciles.Add(1)
	cluster := &tiledv1alpha1.TiledCluster{}
	if err := n.reader.Get(ctx, req.NamespacedName, cluster); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var profs tiledv1alpha1.TiledProfileList
	if err := n.reader.List(ctx, &profs, client.InNamespace(cluster.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	res, err := expansion.Expand(cluster, profs.Items, n.builtins)
	if err != nil {
		return reconcile.Result{}, err
	}
	owner := ownerRef("TiledCluster", cluster.Name, string(cluster.UID))
	for _, inst := range res.Instances {
		u, err := instanceObject(inst.Object, cluster.Namespace, owner)
		if err != nil {
			return reconcile.Result{}, err
		}
		if err := n.getAndWrite(ctx, u); err != nil {
			return reconcile.Result{}, err
		}
	}
	cluster.Status.ObservedGeneration = cluster.Generation
	cluster.Status.Instances = int32(len(res.Instances))
	meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionFalse, Reason: "Reconciled", Message: "instances written", ObservedGeneration: cluster.Generation,
	})
	return reconcile.Result{}, n.writer.Status().Update(ctx, cluster, client.FieldOwner(naiveOwner))
}

func (n *naiveOperator) reconcileInstance(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer n.reconciles.Add(1)
	ti := &tiledv1alpha1.TiledInstance{}
	if err := n.reader.Get(ctx, req.NamespacedName, ti); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	secret := &corev1.Secret{}
	existing := map[string][]byte{}
	err := n.reader.Get(ctx, client.ObjectKey{Namespace: ti.Namespace, Name: names.For(ti.Namespace, ti.Name).Secret}, secret)
	switch {
	case err == nil:
		existing = secret.Data
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, err
	}
	gen, err := render.GenerateSecretData(ti, existing, randReader)
	if err != nil {
		return reconcile.Result{}, err
	}
	data := map[string][]byte{}
	for k, v := range existing {
		data[k] = v
	}
	for k, v := range gen {
		data[k] = v
	}
	objs, err := childObjects(ti, data)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, u := range objs {
		if err := n.getAndWrite(ctx, u); err != nil {
			return reconcile.Result{}, err
		}
	}
	sts := &appsv1.StatefulSet{}
	ready := n.reader.Get(ctx, client.ObjectKey{Namespace: ti.Namespace, Name: names.For(ti.Namespace, ti.Name).Tiled}, sts) == nil &&
		sts.Status.ReadyReplicas > 0
	st := metav1.ConditionFalse
	if ready {
		st = metav1.ConditionTrue
	}
	ti.Status.ObservedGeneration = ti.Generation
	meta.SetStatusCondition(&ti.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: st, Reason: "Reconciled", Message: "objects written", ObservedGeneration: ti.Generation,
	})
	return reconcile.Result{}, n.writer.Status().Update(ctx, ti, client.FieldOwner(naiveOwner))
}

// getAndWrite reads the object from the API server, then creates it or replaces it whole.
func (n *naiveOperator) getAndWrite(ctx context.Context, u *unstructured.Unstructured) error {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	err := n.reader.Get(ctx, client.ObjectKeyFromObject(u), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := n.writer.Create(ctx, u, client.FieldOwner(naiveOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return nil
	case err != nil:
		return err
	}
	u.SetResourceVersion(cur.GetResourceVersion())
	if err := n.writer.Update(ctx, u, client.FieldOwner(naiveOwner)); err != nil {
		return fmt.Errorf("updating %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
