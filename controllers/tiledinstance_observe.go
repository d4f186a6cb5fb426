package controllers

import (
	"context"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/render"
)

// instanceState is the current state of one instance's reconcile: the instance as the cache holds
// it, and every other read the reconcile makes, each through a method here — from the cache, but for
// an external database's Secret, which the operator does not label and so does not cache. The
// reads are made when a stage needs them (a child just before its apply), as the cache shows it
// then.
type instanceState struct {
	c client.Client
	// api reads past the cache (an external database's Secret).
	api client.Reader
	// ti is the TiledInstance, a copy.
	ti *tiledv1alpha1.TiledInstance
	// unsent are the children the apply read from the cache and did not send, as the cache showed
	// them a moment ago (childset.Record.Unsent): the status reads them from here rather than copy
	// them from the cache once more.
	unsent map[applier.Key]client.Object
	// gate is what the apply did with a change the render makes without a change of the spec
	// (tiledinstance_rendergate.go).
	gate renderGate
	// approved is the approval of a pending change this reconcile let through or found approved
	// (spec.maintenance.approval Manual, tiledinstance_approval.go); nil: none.
	approved *tiledv1alpha1.ApprovalRecord
}

// observe reads the instance from the cache: nil when it is gone (what was remembered of it is
// forgotten), being deleted, or its TiledCluster is paused (nothing is written).
func (r *TiledInstanceReconciler) observe(ctx context.Context, req ctrl.Request) (*instanceState, error) {
	ti := &tiledv1alpha1.TiledInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, ti); err != nil {
		if apierrors.IsNotFound(err) {
			r.memories.forget(r.Applier, req.NamespacedName)
		}
		return nil, client.IgnoreNotFound(err)
	}
	if !ti.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	s := &instanceState{c: r.Client, api: r.APIReader, ti: ti}
	if paused, err := s.clusterPaused(ctx); err != nil || paused {
		return nil, err
	}
	return s, nil
}

// clusterPaused reports whether the instance's TiledCluster is paused: then nothing is written.
func (s *instanceState) clusterPaused(ctx context.Context) (bool, error) {
	ref := metav1.GetControllerOf(s.ti)
	if ref == nil || ref.Kind != "TiledCluster" {
		return false, nil
	}
	// The cache's own clusters, not a copy: a Get would copy the whole cluster, a thousand
	// beamlines' spec, on every reconcile of every one of its instances, to read one field.
	var clusters tiledv1alpha1.TiledClusterList
	if err := s.c.List(ctx, &clusters, client.InNamespace(s.ti.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	for i := range clusters.Items {
		if c := &clusters.Items[i]; c.Name == ref.Name {
			return c.UID == ref.UID && c.Spec.Paused, nil
		}
	}
	return false, nil
}

// profiles are the TiledProfiles of the instance's namespace, copies.
func (s *instanceState) profiles(ctx context.Context) ([]tiledv1alpha1.TiledProfile, error) {
	var list tiledv1alpha1.TiledProfileList
	if err := s.c.List(ctx, &list, client.InNamespace(s.ti.Namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// secret returns the data of the instance's Secret name as the cache holds it; a NotFound error
// when the cache does not hold it (yet).
func (s *instanceState) secret(ctx context.Context, name string) (map[string][]byte, error) {
	secret := &corev1.Secret{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ti.Namespace, Name: name}, secret); err != nil {
		return nil, err
	}
	return secret.Data, nil
}

// externalSecretKeys reads the external database's Secret (spec is the expanded instance) past the
// cache and returns its keys, or a message naming what is missing.
func (s *instanceState) externalSecretKeys(ctx context.Context, spec *tiledv1alpha1.TiledInstance) ([]string, string) {
	ref := spec.Spec.Database.External.URISecretRef
	if ref == nil || ref.Name == "" {
		return nil, "spec.database.external.uriSecretRef is not set"
	}
	key := ref.Key
	if key == "" {
		key = "uri"
	}
	data, msg := s.externalSecret(ctx, spec.Namespace, ref.Name, key, "the external database Secret", "spec.database.external.uriSecretRef")
	if msg != "" {
		return nil, msg
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, ""
}

// externalCacheSecretProblem reads the Secret an external streaming cache's URI or password comes
// from (spec is the expanded instance) past the cache, and returns a message naming what is missing
// ("" when nothing is, or the instance has no such Secret). Tiled pods rendered against a missing
// Secret or key never start (CreateContainerConfigError): the StatefulSet controller would replace
// the serving pods with them (issue 43: dependencies before dependants).
func (s *instanceState) externalCacheSecretProblem(ctx context.Context, spec *tiledv1alpha1.TiledInstance) string {
	name, key, field, ok := render.ExternalCacheSecret(spec)
	if !ok {
		return ""
	}
	_, msg := s.externalSecret(ctx, spec.Namespace, name, key, "the external streaming cache's Secret", field)
	return msg
}

// externalSecret reads a Secret the instance refers to but the operator does not own (its cache
// holds only the operator's objects) past the cache, and returns its data, or a message naming what
// is missing: the Secret (what, its field) or its key.
func (s *instanceState) externalSecret(ctx context.Context, namespace, name, key, what, field string) (map[string][]byte, string) {
	secret := &corev1.Secret{}
	if err := s.api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("%s %s/%s (%s) does not exist", what, namespace, name, field)
		}
		return nil, fmt.Sprintf("reading %s %s/%s: %v", what, namespace, name, err)
	}
	if len(secret.Data[key]) == 0 {
		return nil, fmt.Sprintf("%s %s/%s has no key %q (%s.key)", what, namespace, name, key, field)
	}
	return secret.Data, ""
}

// child returns the child k as the cache holds it now, or nil: typed for the kinds of the scheme,
// as metadata for the kinds cached as metadata only (ChildKinds), unstructured for the others
// (ServiceMonitors).
func (s *instanceState) child(ctx context.Context, k applier.Key) (client.Object, error) {
	gvk := schema.FromAPIVersionAndKind(k.APIVersion, k.Kind)
	var obj runtime.Object
	var err error
	if metadataOnlyKind(gvk) {
		obj = metadataOnly(gvk)
	} else {
		obj, err = s.c.Scheme().New(gvk)
	}
	if err != nil {
		// Kinds outside the scheme (ServiceMonitor) are read as unstructured.
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(gvk)
		obj = cur
	}
	co := obj.(client.Object)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, co); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	return co, nil
}

// cachedChild returns the child k as this reconcile's apply read it when it sent nothing, or reads
// it from the cache.
func (s *instanceState) cachedChild(ctx context.Context, k applier.Key) (client.Object, error) {
	if o, ok := s.unsent[k]; ok {
		return o, nil
	}
	return s.child(ctx, k)
}

// statefulSet returns the StatefulSet k as cached (as the apply read it when it sent nothing), or
// nil when the cache does not hold it.
func (s *instanceState) statefulSet(ctx context.Context, k applier.Key) *appsv1.StatefulSet {
	if sts, ok := s.unsent[k].(*appsv1.StatefulSet); ok {
		return sts
	}
	sts := &appsv1.StatefulSet{}
	if s.c.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, sts) != nil {
		return nil
	}
	return sts
}

// pods returns the instance's Tiled pods and database pods from the cache (the cache's own objects:
// read only).
func (s *instanceState) pods(ctx context.Context) (instancePods, error) {
	var list corev1.PodList
	var out instancePods
	if err := s.c.List(ctx, &list, client.InNamespace(s.ti.Namespace), client.MatchingFields{podInstanceIndex: s.ti.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return out, err
	}
	for _, p := range list.Items {
		switch p.Labels[tiledv1alpha1.LabelAppComponent] {
		case render.ComponentServer:
			out.server = append(out.server, p)
		case render.ComponentDatabase:
			out.database = append(out.database, p)
		case render.ComponentCache:
			out.cache = append(out.cache, p)
		}
	}
	return out, nil
}

// instancePods are an instance's pods by component: Tiled, the managed PostgreSQL, the managed
// streaming cache.
type instancePods struct {
	server, database, cache []corev1.Pod
}

// stsKey is the key of the StatefulSet name in namespace.
func stsKey(namespace, name string) applier.Key {
	return applier.Key{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: namespace, Name: name}
}
