package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/webhooks"
)

// files is what the files hold, standing in for the webhooks' cache: the other objects of the
// namespace as they would be stored once the whole input is applied.
type files struct {
	profiles  []v1alpha1.TiledProfile
	clusters  []v1alpha1.TiledCluster
	instances []v1alpha1.TiledInstance // expanded: clusters' and standalone
}

var _ client.Reader = (*files)(nil)

func (f *files) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("").GroupResource(), key.Name)
}

func (f *files) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	ns := (&client.ListOptions{}).ApplyOptions(opts).Namespace
	switch l := list.(type) {
	case *v1alpha1.TiledProfileList:
		l.Items = inNamespace(f.profiles, ns, func(p *v1alpha1.TiledProfile) string { return p.Namespace })
	case *v1alpha1.TiledClusterList:
		l.Items = inNamespace(f.clusters, ns, func(c *v1alpha1.TiledCluster) string { return c.Namespace })
	case *v1alpha1.TiledInstanceList:
		l.Items = inNamespace(f.instances, ns, func(i *v1alpha1.TiledInstance) string { return i.Namespace })
	default:
		return fmt.Errorf("the files hold no %T", list)
	}
	return nil
}

// inNamespace returns copies of the items of namespace ns ("" for all).
func inNamespace[T any](items []T, ns string, nsOf func(*T) string) []T {
	var out []T
	for i := range items {
		if ns == "" || nsOf(&items[i]) == ns {
			out = append(out, items[i])
		}
	}
	return out
}

// admit sends every object of the input through the operator's admission webhooks (their handlers,
// called in process, with the files as their cache), as kubectl apply of the input would: profiles,
// then clusters, then standalone instances as the mutating webhook expanded them. It returns the
// webhooks' warnings, and an error for the first object they refuse.
func admit(f *files, clusters []*v1alpha1.TiledCluster, standalone []*v1alpha1.TiledInstance) ([]string, error) {
	ctx := context.Background()
	builtins := expansion.DefaultBuiltins()
	var warnings []string
	review := func(h admission.Handler, obj client.Object, kind string) error {
		raw, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID:       "kubectl-tiled",
			Kind:      metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: kind},
			Name:      obj.GetName(),
			Namespace: obj.GetNamespace(),
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		}}
		resp := h.Handle(ctx, req)
		for _, w := range resp.Warnings {
			if !slices.Contains(warnings, w) {
				warnings = append(warnings, w)
			}
		}
		if !resp.Allowed {
			msg := fmt.Sprintf("%s %s/%s refused", kind, obj.GetNamespace(), obj.GetName())
			if resp.Result != nil && resp.Result.Message != "" {
				msg = resp.Result.Message
			}
			return errors.New(msg)
		}
		return nil
	}
	profileHook := &webhooks.ProfileValidator{Reader: f, Builtins: builtins}
	for i := range f.profiles {
		if err := review(profileHook, &f.profiles[i], "TiledProfile"); err != nil {
			return warnings, err
		}
	}
	clusterHook := &webhooks.ClusterValidator{Reader: f, Builtins: builtins}
	for _, c := range clusters {
		if err := review(clusterHook, c, "TiledCluster"); err != nil {
			return warnings, err
		}
	}
	instanceHook := &webhooks.InstanceValidator{Reader: f, Builtins: builtins}
	for _, in := range standalone {
		if err := review(instanceHook, in, "TiledInstance"); err != nil {
			return warnings, err
		}
	}
	return warnings, nil
}
