package childset

import (
	"context"
	"errors"
	"fmt"
	"iter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/applier"
)

// Deleter deletes objects: the one write pruning makes.
type Deleter interface {
	Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error
}

// PruneOptions are the strategy of one Prune.
type PruneOptions struct {
	// Propagation, when not nil, is the delete's propagation policy; nil sends none (the API
	// server's default for the kind).
	Propagation *metav1.DeletionPropagation
	// BeforeDelete, when not nil, runs before each delete (retention: labelling what the object
	// leaves behind) and returns what it kept, for the caller's message; an error ends the prune
	// before that delete.
	BeforeDelete func(ctx context.Context, obj client.Object) ([]string, error)
	// UndoBeforeDelete, when not nil, runs when a delete that BeforeDelete prepared fails, to undo
	// what BeforeDelete did (retention: the object stays, so what it leaves behind is not left
	// yet). Its error is reported with the delete's.
	UndoBeforeDelete func(ctx context.Context, obj client.Object) error
}

// Pruned is an object Prune deleted, or found already gone.
type Pruned struct {
	// Object is the object as the cache held it.
	Object client.Object
	// Kept is what BeforeDelete kept of it.
	Kept []string
}

// Prune deletes, of owned (objects of the kind gvk as the cache holds them; read only), those whose
// controller reference carries owner's UID, that are not being deleted already and that wanted does
// not want. Each is deleted with a UID precondition, so that an object deleted and recreated under
// the same name since the cache showed it is left alone; one already gone, or replaced, is no
// error. The applier forgets each.
func Prune(ctx context.Context, c Deleter, a *applier.Applier, gvk schema.GroupVersionKind, owned iter.Seq[client.Object], owner types.UID,
	wanted func(applier.Key) bool, o PruneOptions) ([]Pruned, error) {
	apiVersion := gvk.GroupVersion().String()
	var pruned []Pruned
	for obj := range owned {
		key := applier.Key{APIVersion: apiVersion, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
		if wanted(key) || !obj.GetDeletionTimestamp().IsZero() {
			continue
		}
		if ref := metav1.GetControllerOf(obj); ref == nil || ref.UID != owner {
			continue // not ours: never delete
		}
		var kept []string
		if o.BeforeDelete != nil {
			var err error
			if kept, err = o.BeforeDelete(ctx, obj); err != nil {
				return pruned, err
			}
		}
		uid := obj.GetUID()
		opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
		if o.Propagation != nil {
			opts = append(opts, client.PropagationPolicy(*o.Propagation))
		}
		if err := c.Delete(ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			err = fmt.Errorf("pruning %s: %w", key, err)
			if o.BeforeDelete != nil && o.UndoBeforeDelete != nil {
				if uerr := o.UndoBeforeDelete(ctx, obj); uerr != nil {
					err = errors.Join(err, fmt.Errorf("undoing what was done before deleting %s: %w", key, uerr))
				}
			}
			return pruned, err
		}
		a.Forget(key)
		pruned = append(pruned, Pruned{Object: obj, Kept: kept})
	}
	return pruned, nil
}
