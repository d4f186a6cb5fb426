package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/profiles"
)

// workqueueAdder is the queue event handlers add requests to.
type workqueueAdder = workqueue.TypedRateLimitingInterface[reconcile.Request]

// profileHandler maps a profile event to the clusters (forClusters) or standalone instances whose
// selectors match the profile's old or new labels.
func profileHandler(c client.Client, forClusters bool) handler.EventHandler {
	enqueue := func(ctx context.Context, old, updated *tiledv1alpha1.TiledProfile, q workqueueAdder) {
		ns := updated.Namespace
		var clusters tiledv1alpha1.TiledClusterList
		var instances tiledv1alpha1.TiledInstanceList
		if forClusters {
			if err := c.List(ctx, &clusters, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
				return
			}
		} else if err := c.List(ctx, &instances, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
			return
		}
		cl, in := profiles.Affected(old, updated, clusters.Items, instances.Items)
		for _, n := range append(cl, in...) {
			q.Add(reconcile.Request{NamespacedName: n})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueueAdder) {
			if p, ok := e.Object.(*tiledv1alpha1.TiledProfile); ok {
				enqueue(ctx, nil, p, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueueAdder) {
			o, ok1 := e.ObjectOld.(*tiledv1alpha1.TiledProfile)
			n, ok2 := e.ObjectNew.(*tiledv1alpha1.TiledProfile)
			if ok1 && ok2 && (o.Generation != n.Generation || !equality.Semantic.DeepEqual(o.Labels, n.Labels)) {
				enqueue(ctx, o, n, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueueAdder) {
			if p, ok := e.Object.(*tiledv1alpha1.TiledProfile); ok {
				enqueue(ctx, p, p, q)
			}
		},
	}
}
