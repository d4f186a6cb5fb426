package childset

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OwnerIndex is the cache's field index of child objects by the UID of their controller
// (IndexController), through which Owned finds an owner's children without going through every
// object of the kind.
const OwnerIndex = ".metadata.controllerUID"

// IndexController is OwnerIndex's function: the UID of the object's controller, if it has one.
func IndexController(o client.Object) []string {
	if ref := metav1.GetControllerOf(o); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}

// Owned lists, from c's cache, the objects of proto's kind in namespace whose controller is owner:
// the cache's own objects, not copies, so they are read only (Prune reads their names, UIDs and
// deletion timestamps, and deletes by UID). The kinds of the scheme are found through OwnerIndex; a
// kind outside it (read as unstructured, not indexed: ServiceMonitors) by the labels unindexed, then
// by its controller reference. proto is a typed object, a metav1.PartialObjectMetadata (a kind
// cached as metadata only) or an unstructured.Unstructured, with its kind.
func Owned(ctx context.Context, c client.Client, proto client.Object, namespace string, owner types.UID, unindexed client.MatchingLabels) ([]client.Object, error) {
	var list client.ObjectList
	switch p := proto.(type) {
	case *metav1.PartialObjectMetadata:
		ml := &metav1.PartialObjectMetadataList{}
		ml.SetGroupVersionKind(p.GroupVersionKind().GroupVersion().WithKind(p.Kind + "List"))
		list = ml
	case *unstructured.Unstructured:
		ul := &unstructured.UnstructuredList{}
		ul.SetGroupVersionKind(p.GroupVersionKind().GroupVersion().WithKind(p.GetKind() + "List"))
		if err := c.List(ctx, ul, client.InNamespace(namespace), unindexed, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		var out []client.Object
		for i := range ul.Items {
			if ref := metav1.GetControllerOf(&ul.Items[i]); ref != nil && ref.UID == owner {
				out = append(out, &ul.Items[i])
			}
		}
		return out, nil
	default:
		gvk, err := c.GroupVersionKindFor(proto)
		if err != nil {
			return nil, err
		}
		obj, err := c.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			return nil, fmt.Errorf("no list type for %T: %w", proto, err)
		}
		var ok bool
		if list, ok = obj.(client.ObjectList); !ok {
			return nil, fmt.Errorf("no list type for %T", proto)
		}
	}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{OwnerIndex: string(owner)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		out = append(out, it.(client.Object))
	}
	return out, nil
}
