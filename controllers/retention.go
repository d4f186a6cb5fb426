package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// retention is what the Retain policy (the default) does around the objects an instance leaves
// behind — its data and database claims and its Secret, which carry no owner reference so that the
// garbage collector keeps them, and its NFS PersistentVolumes, which are cluster-scoped and so
// cannot be owned — both when the instance goes and when it comes back:
//
//   - release (the cluster controller's prune, before it deletes an instance) labels the claims and
//     the Secret LabelReleased=true and annotates them with the instance's UID
//     (AnnotationReleasedFrom);
//   - releaseVolumes (the cluster controller, every reconcile) deletes the NFS PersistentVolumes of
//     instances gone from the cache;
//   - undoRelease (the same prune, when the delete then fails) takes that release back: the
//     instance stays;
//   - unrelease (the instance controller, after each apply) removes the label from a claim or
//     Secret another instance of the same name uses again. The instance being removed never does:
//     a reconcile of it already under way when the cluster released its claims would otherwise
//     take the label back just before the instance goes, and leave its data unmarked.
//
// The label is applied and removed under a field owner of its own (RetentionFieldOwner), so that
// neither write takes a field from the operator's main one.
type retention struct {
	c client.Client
}

// release labels the claims and the Secret an instance leaves behind under the Retain policy (they
// have no owner reference, so the garbage collector keeps them) and returns their names.
func (rt retention) release(ctx context.Context, ti client.Object) ([]string, error) {
	retained, err := rt.retained(ctx, ti)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range retained {
		kind := kindOf(o)
		if o.GetLabels()[LabelReleased] != "true" || o.GetAnnotations()[AnnotationReleasedFrom] != string(ti.GetUID()) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": kind,
				"metadata": map[string]any{
					"name": o.GetName(), "namespace": o.GetNamespace(),
					"labels":      map[string]any{LabelReleased: "true"},
					"annotations": map[string]any{AnnotationReleasedFrom: string(ti.GetUID())},
				},
			}}
			if err := rt.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(tiledv1alpha1.RetentionFieldOwner), client.ForceOwnership); err != nil {
				return nil, fmt.Errorf("labelling the retained %s %s/%s: %w", kind, o.GetNamespace(), o.GetName(), err)
			}
		}
		if kind == "PersistentVolumeClaim" {
			names = append(names, o.GetName())
		} else {
			names = append(names, "Secret "+o.GetName())
		}
	}
	sort.Strings(names)
	return names, nil
}

// retained are the claims and the Secret of the instance ti that no owner reference takes with it
// (the Retain policy), as the cache shows them.
func (rt retention) retained(ctx context.Context, ti client.Object) ([]client.Object, error) {
	claims := &metav1.PartialObjectMetadataList{}
	claims.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"))
	if err := rt.c.List(ctx, claims, client.InNamespace(ti.GetNamespace()),
		client.MatchingLabels{tiledv1alpha1.LabelAppInstance: ti.GetName(), tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}); err != nil {
		return nil, err
	}
	var secrets corev1.SecretList
	if err := rt.c.List(ctx, &secrets, client.InNamespace(ti.GetNamespace()),
		client.MatchingLabels{tiledv1alpha1.LabelAppInstance: ti.GetName(), tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}); err != nil {
		return nil, err
	}
	retained := make([]client.Object, 0, len(claims.Items)+len(secrets.Items))
	for i := range claims.Items {
		if metav1.GetControllerOf(&claims.Items[i]) == nil { // owned: goes with the instance (Delete policy, or an NFS claim)
			retained = append(retained, &claims.Items[i])
		}
	}
	for i := range secrets.Items {
		if metav1.GetControllerOf(&secrets.Items[i]) == nil {
			retained = append(retained, &secrets.Items[i])
		}
	}
	return retained, nil
}

// kindOf is the kind of a retained object: PersistentVolumeClaim or Secret.
func kindOf(o client.Object) string {
	if _, ok := o.(*corev1.Secret); ok {
		return "Secret"
	}
	return "PersistentVolumeClaim"
}

// undoRelease takes back the release of the instance ti, whose delete failed after release
// labelled what it leaves behind: the instance stays, and were the beamline listed again before
// the delete is tried again, its own claims would stay labelled released (unrelease leaves the
// children an instance released itself). release has just labelled every retained child with ti's
// UID, whatever the cache shows yet (it may not show the label), so each is cleared.
func (rt retention) undoRelease(ctx context.Context, ti client.Object) error {
	retained, err := rt.retained(ctx, ti)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range retained {
		if err := rt.dropRelease(ctx, kindOf(o), o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropRelease removes the released label and annotation from the claim or Secret o of kind kind: an
// apply of nothing under the retention field owner, which set them.
func (rt retention) dropRelease(ctx context.Context, kind string, o client.Object) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": kind,
		"metadata": map[string]any{"name": o.GetName(), "namespace": o.GetNamespace()},
	}}
	if err := rt.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(tiledv1alpha1.RetentionFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("removing the label %s from the %s %s/%s: %w", LabelReleased, kind, o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// unrelease removes the released label (and AnnotationReleasedFrom) from a retained claim or Secret
// the instance uses again (a beamline removed and re-added under the same name), with the field
// owner that set it: an apply of nothing under that owner drops both and touches no other field.
// A child released by this very instance (its UID in AnnotationReleasedFrom) keeps them: the
// instance is being removed, and this reconcile began before the release. current is the child as
// the cache showed it before its apply (nil when absent).
func (rt retention) unrelease(ctx context.Context, ti client.Object, current client.Object) error {
	var kind string
	switch c := current.(type) {
	case *metav1.PartialObjectMetadata:
		if c.GroupVersionKind() != corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim") {
			return nil
		}
		kind = "PersistentVolumeClaim"
	case *corev1.Secret:
		kind = "Secret"
	default:
		return nil
	}
	if current.GetLabels()[LabelReleased] == "" || current.GetAnnotations()[AnnotationReleasedFrom] == string(ti.GetUID()) {
		return nil
	}
	if err := rt.dropRelease(ctx, kind, current); err != nil {
		return fmt.Errorf("%w (in use again)", err)
	}
	return nil
}

// releaseVolumes deletes the NFS PersistentVolumes of this cluster's instances that are gone. They
// are cluster-scoped, so no owner reference can take them with their instance; they point at the
// export and hold no data (reclaim policy Retain: deleting one never touches the files). A volume
// goes only once its instance is gone from the cache: while the instance controller can still see
// the instance, it would put a deleted volume back. desired are the names of the instances the
// cluster wants.
func (rt retention) releaseVolumes(ctx context.Context, cluster *tiledv1alpha1.TiledCluster, desired map[string]bool) error {
	// This runs on every reconcile, and a fleet has two volumes an instance: the index hands over
	// this cluster's volumes alone, and the cache's own objects, not copies (nothing below modifies
	// them).
	var pvs corev1.PersistentVolumeList
	if err := rt.c.List(ctx, &pvs, client.MatchingFields{pvClusterIndex: cluster.Namespace + "/" + cluster.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		instance := pv.Labels[tiledv1alpha1.LabelAppInstance]
		if pv.Spec.NFS == nil || instance == "" || desired[instance] || !pv.DeletionTimestamp.IsZero() {
			continue
		}
		err := rt.c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: instance}, &tiledv1alpha1.TiledInstance{})
		if !apierrors.IsNotFound(err) {
			continue // still there (or unknown): the next reconcile, when it goes, looks again
		}
		uid := pv.UID
		if err := rt.c.Delete(ctx, pv, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the NFS PersistentVolume %s of the removed instance %s/%s: %w", pv.Name, cluster.Namespace, instance, err)
		}
	}
	return nil
}

// pvClusterIndex indexes the operator's PersistentVolumes by the namespace of their claim and the
// cluster label: "namespace/cluster".
const pvClusterIndex = ".metadata.labels.cluster"

// indexVolumeCluster is pvClusterIndex's function.
func indexVolumeCluster(o client.Object) []string {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Labels[tiledv1alpha1.LabelManagedBy] != tiledv1alpha1.ManagedByValue || pv.Spec.ClaimRef == nil {
		return nil
	}
	if c := pv.Labels[tiledv1alpha1.LabelCluster]; c != "" {
		return []string{pv.Spec.ClaimRef.Namespace + "/" + c}
	}
	return nil
}
