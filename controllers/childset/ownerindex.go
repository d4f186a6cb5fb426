package childset

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AddOwnerIndex adds OwnerIndex to the informer of obj's kind in c, keyed as controller-runtime's
// field indexes are for a list in one namespace (client.InNamespace with client.MatchingFields, what
// Owned asks), and under that key alone.
//
// The cache's own field index (FieldIndexer.IndexField) files every namespaced object twice: under
// "<namespace>/<value>" and again under "__all_namespaces/<value>", for lists across namespaces. No
// one lists children by owner across namespaces (an owner's children are in its namespace, and its
// UID names it alone), and the second entry cost as much memory as the first: at a thousand
// instances, a set of keys per owner and kind, ~4 MB for the eleven child kinds. A list across
// namespaces by OwnerIndex finds nothing.
func AddOwnerIndex(ctx context.Context, c cache.Cache, obj client.Object) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return inf.AddIndexers(toolscache.Indexers{ownerIndexName: indexOwnerInNamespace})
}

// ownerIndexName is the name controller-runtime's cache reader looks OwnerIndex up by.
const ownerIndexName = "field:" + OwnerIndex

// allNamespaces is the namespace controller-runtime's cache reader names a cluster-scoped object's
// (or a list across namespaces') index keys with.
const allNamespaces = "__all_namespaces"

// indexOwnerInNamespace is the informer's index function of OwnerIndex: the UID of the object's
// controller, after its namespace (IndexController, keyed as the cache reader asks for it).
func indexOwnerInNamespace(obj any) ([]string, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("object of type %T is not an Object", obj)
	}
	ref := metav1.GetControllerOf(o)
	if ref == nil {
		return nil, nil
	}
	ns := o.GetNamespace()
	if ns == "" {
		ns = allNamespaces
	}
	return []string{ns + "/" + string(ref.UID)}, nil
}
