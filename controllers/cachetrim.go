package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/bluesky/tiled-operator/controllers/applier"
)

// Cache transforms of the child kinds. The informer caches hold one copy of every object the
// operator manages, and at a thousand instances that is most of the manager's memory; each kind
// keeps only what the controllers read from the cache, so that the rest is garbage as soon as the
// object is decoded:
//
//   - every kind keeps its whole metadata (name, namespace, uid, resourceVersion, generation,
//     labels, annotations — the applier reads tiled.blueskyproject.io/intent —, ownerReferences,
//     deletionTimestamp, finalizers) and its managedFields slimmed by applier.SlimManagedFields
//     (managers, and a fingerprint of the operator's own field set): the applier decides from
//     those whether an intent is already applied, the prune and retention paths from the owner
//     references and labels, the ExternalEdits condition from the managers;
//   - StatefulSet: spec.replicas and the whole status (readiness: observedGeneration,
//     readyReplicas, updatedReplicas); the pod template and claim templates are dropped;
//   - ConfigMap: no data (the operator renders config.yml, it never reads it back);
//   - Secret: kept whole — the instance controller reads its data, so that generated keys and
//     passwords are never generated twice;
//   - Service, PersistentVolumeClaim, Ingress, PodDisruptionBudget: metadata only (existence,
//     ownership, labels);
//   - PersistentVolume (the NFS volumes): spec.claimRef and spec.nfs (the cluster controller deletes
//     a removed instance's NFS volumes, and maps a deleted volume to its instance, by them).
//
// The trimmed objects are never written back: every write is a server-side apply of a rendered
// intent, and deletes carry only the UID.
func trimTransform(owner string) toolscache.TransformFunc {
	slim := applier.SlimManagedFields(owner)
	return func(in any) (any, error) {
		in, err := slim(in)
		if err != nil {
			return in, err
		}
		return trimObject(in), nil
	}
}

// trimObject drops the fields of a child object the controllers never read from the cache (see
// trimTransform); other objects are returned as they are. It changes obj in place and is idempotent.
func trimObject(obj any) any {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		o.Spec = appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas}
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
	case *corev1.Service:
		o.Spec, o.Status = corev1.ServiceSpec{}, corev1.ServiceStatus{}
	case *corev1.PersistentVolumeClaim:
		o.Spec, o.Status = corev1.PersistentVolumeClaimSpec{}, corev1.PersistentVolumeClaimStatus{}
	case *networkingv1.Ingress:
		o.Spec, o.Status = networkingv1.IngressSpec{}, networkingv1.IngressStatus{}
	case *policyv1.PodDisruptionBudget:
		o.Spec, o.Status = policyv1.PodDisruptionBudgetSpec{}, policyv1.PodDisruptionBudgetStatus{}
	case *corev1.PersistentVolume:
		o.Spec = corev1.PersistentVolumeSpec{
			ClaimRef:               o.Spec.ClaimRef,
			PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: o.Spec.NFS},
		}
		o.Status = corev1.PersistentVolumeStatus{}
	}
	return obj
}
