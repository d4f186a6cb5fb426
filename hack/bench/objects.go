package main

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/render"
)

// The floor and the naive baseline write the very objects the operator writes: the TiledInstances
// of expansion.Expand, and for each instance the objects of render.Render as the instance controller
// owns them (desired.InstanceObjects: namespaced children are owned by their instance, except
// data claims kept by the Retain policy).

// instanceObject is a TiledInstance as the engine expanded it (name, labels, spec, provenance), owned
// by the cluster when owner is not nil.
func instanceObject(ti *tiledv1alpha1.TiledInstance, ns string, owner map[string]any) (*unstructured.Unstructured, error) {
	spec, err := toMap(ti.Spec)
	if err != nil {
		return nil, err
	}
	labels := map[string]any{}
	for k, v := range ti.Labels {
		labels[k] = v
	}
	md := map[string]any{"name": ti.Name, "namespace": ns, "labels": labels}
	if owner != nil {
		md["ownerReferences"] = []any{owner}
	}
	obj := map[string]any{
		"apiVersion": tiledv1alpha1.GroupVersion.String(), "kind": "TiledInstance",
		"metadata": md, "spec": spec,
	}
	if len(ti.Provenance) > 0 {
		prov := map[string]any{}
		for k, v := range ti.Provenance {
			prov[k] = v
		}
		obj["provenance"] = prov
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// ownerRef is a controller reference in unstructured form.
func ownerRef(kind, name, uid string) map[string]any {
	return map[string]any{
		"apiVersion": tiledv1alpha1.GroupVersion.String(), "kind": kind, "name": name, "uid": uid,
		"controller": true, "blockOwnerDeletion": true,
	}
}

// childObjects renders the objects of one stored instance (its UID set) with the given Secret data,
// owned as the instance controller owns them (desired.InstanceObjects).
func childObjects(ti *tiledv1alpha1.TiledInstance, secretData map[string][]byte) ([]*unstructured.Unstructured, error) {
	objs, err := render.Render(ti, render.Inputs{SecretData: secretData})
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", ti.Name, err)
	}
	return desired.InstanceObjects(ti, objs)
}

func toMap(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(data, &out)
}

// profileValues dereferences profiles for expansion.Expand.
func profileValues(ps []*tiledv1alpha1.TiledProfile) []tiledv1alpha1.TiledProfile {
	out := make([]tiledv1alpha1.TiledProfile, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}
