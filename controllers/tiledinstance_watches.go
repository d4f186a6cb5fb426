package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
)

// The TiledInstance controller's event mapping: which events of which objects reconcile which
// instance (SetupWithManager).

// podInstanceIndex indexes the operator's pods by the instance they run (LabelAppInstance).
const podInstanceIndex = ".metadata.labels.instance"

// indexPodInstance is podInstanceIndex's function.
func indexPodInstance(o client.Object) []string {
	if n := o.GetLabels()[tiledv1alpha1.LabelAppInstance]; n != "" {
		return []string{n}
	}
	return nil
}

// unownedDeleted passes the deletion of an object without a controller reference, and its marking
// for deletion.
var unownedDeleted = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	// Marked for deletion (a retained database claim waits for its pod to let go): the catalog on it
	// is as good as lost, and Tiled is stopped at once (tiledinstance_lostcatalog.go).
	UpdateFunc: func(e event.UpdateEvent) bool {
		return metav1.GetControllerOf(e.ObjectNew) == nil && e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc:  func(e event.DeleteEvent) bool { return metav1.GetControllerOf(e.Object) == nil },
}

// labelledInstance maps an object (a pod, a retained claim or Secret) to the instance named by its
// LabelAppInstance label.
func labelledInstance(_ context.Context, o client.Object) []reconcile.Request {
	n := o.GetLabels()[tiledv1alpha1.LabelAppInstance]
	if n == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
}

// unpaused passes a TiledCluster's change from paused to running.
var unpaused = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*tiledv1alpha1.TiledCluster)
		n, ok2 := e.ObjectNew.(*tiledv1alpha1.TiledCluster)
		return ok1 && ok2 && o.Spec.Paused && !n.Spec.Paused
	},
}

// clusterInstances maps a TiledCluster to its instances, from the cache.
func (r *TiledInstanceReconciler) clusterInstances(ctx context.Context, o client.Object) []reconcile.Request {
	var list tiledv1alpha1.TiledInstanceList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{tiledv1alpha1.LabelCluster: o.GetName()},
		client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == o.GetUID() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// pvInstance maps an NFS PersistentVolume to the instance of its claim.
func pvInstance(_ context.Context, o client.Object) []reconcile.Request {
	pv, ok := o.(*corev1.PersistentVolume)
	n := o.GetLabels()[tiledv1alpha1.LabelAppInstance]
	if !ok || n == "" || pv.Spec.ClaimRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pv.Spec.ClaimRef.Namespace, Name: n}}}
}

// podStatusChanged passes a pod's deletion and the changes of its (trimmed) status: a new pod has no
// status yet, and the kubelet's other updates say nothing the conditions use.
var podStatusChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return !equality.Semantic.DeepEqual(o.Status, n.Status) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	},
}

// forgetDeleted passes a child's deletion on, after telling the applier (one of the memories'
// forget paths, memories.go), so that the reconcile it triggers applies the child again even when
// the cache never showed it after its creation.
func (r *TiledInstanceReconciler) forgetDeleted(gvk schema.GroupVersionKind) predicate.Funcs {
	return predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		r.Applier.Deleted(applier.Key{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
		return true
	}}
}

// notCreated ignores the creation of a child: the operator created it and knows its content; its
// later changes (status, other writers) and its deletion are what need a reconcile.
var notCreated = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}
