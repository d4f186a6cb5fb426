package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceMonitorKind is the prometheus-operator kind, outside the scheme: an empty ServiceMonitor,
// read as unstructured. When its CRD exists the operator caches the ServiceMonitors labelled as
// managed by it, whole (operator.NewManager).
func ServiceMonitorKind() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("monitoring.coreos.com/v1")
	u.SetKind("ServiceMonitor")
	return u
}

// ChildKinds are the namespaced kinds the instance controller owns, watches (through a cache
// restricted to objects labelled as managed by the operator) and prunes. The kinds whose content the
// operator never reads — ConfigMaps, Services, claims, Ingresses, NetworkPolicies,
// PodDisruptionBudgets, HorizontalPodAutoscalers: it needs
// their existence, owner, labels, intent annotation and managers — are watched and cached as
// metadata only (metav1.PartialObjectMetadata); the StatefulSet (its status) and the
// Secret (its generated keys) whole.
func ChildKinds() []client.Object {
	return []client.Object{
		metadataOnly(corev1.SchemeGroupVersion.WithKind("ConfigMap")), &corev1.Secret{},
		metadataOnly(corev1.SchemeGroupVersion.WithKind("Service")),
		metadataOnly(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim")),
		&appsv1.StatefulSet{},
		metadataOnly(networkingv1.SchemeGroupVersion.WithKind("Ingress")),
		metadataOnly(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy")),
		metadataOnly(policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget")),
		metadataOnly(autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler")),
		// The upgrade procedure's Jobs: their conditions say how a step ended.
		&batchv1.Job{},
		// The backup CronJob: the operator needs its existence and managers only.
		metadataOnly(batchv1.SchemeGroupVersion.WithKind("CronJob")),
	}
}

// metadataOnly is the metadata of an object of the kind gvk: as the cache holds the child kinds it
// does not read the content of.
func metadataOnly(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// metadataOnlyKind says whether the operator caches the child kind gvk as metadata only (ChildKinds).
func metadataOnlyKind(gvk schema.GroupVersionKind) bool { return metadataOnlyKinds[gvk] }

var metadataOnlyKinds = func() map[schema.GroupVersionKind]bool {
	out := map[schema.GroupVersionKind]bool{}
	for _, k := range ChildKinds() {
		if m, ok := k.(*metav1.PartialObjectMetadata); ok {
			out[m.GroupVersionKind()] = true
		}
	}
	return out
}()
