package webhooks

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Host reach: which users may write a profile's host-reaching settings. (Not to be confused with the
// certificate authority of package webhooks/certs, which serves the webhooks' TLS.)
//
// Host-reaching settings are decided by TiledProfiles (see expansion's policy), so writing them into
// a profile is itself an administrator's act: a profile create or update that adds or changes an NFS
// export (storage.data.nfs, storage.readOnlyMounts[].nfs), a uid or gid of the pods, or an allowance
// (allowedNFS, allowedUserIDs, allowedGroupIDs) is admitted only for a user who may create
// PersistentVolumes — what an NFS export makes the operator do on the user's behalf. Namespace
// editors and admins (the aggregated edit and admin roles) may not; cluster administrators may. Every
// other profile setting (images, resources, expressions for hosts and env...) stays with whoever may
// write TiledProfiles.

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// hostReachingParts are the host-reaching settings of a profile, by field path.
func hostReachingParts(p *v1alpha1.TiledProfile) map[string]any {
	out := map[string]any{
		"spec.allowedNFS":      p.Spec.AllowedNFS,
		"spec.allowedUserIDs":  p.Spec.AllowedUserIDs,
		"spec.allowedGroupIDs": p.Spec.AllowedGroupIDs,
	}
	if s := p.Spec.Storage; s != nil {
		if s.Data != nil {
			out["spec.storage.data.nfs"] = s.Data.NFS
		}
		for _, m := range s.ReadOnlyMounts {
			out["spec.storage.readOnlyMounts[name="+m.Name+"].nfs"] = m.NFS
		}
	}
	if t := p.Spec.Tiled; t != nil {
		out["spec.tiled.runAsUser"] = t.RunAsUser
		out["spec.tiled.runAsGroup"] = t.RunAsGroup
		out["spec.tiled.fsGroup"] = t.FSGroup
		out["spec.tiled.supplementalGroups"] = t.SupplementalGroups
	}
	return out
}

// empty reports whether a part is unset.
func empty(v any) bool {
	rv := reflect.ValueOf(v)
	return !rv.IsValid() || ((rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && (rv.IsNil() || (rv.Kind() != reflect.Pointer && rv.Len() == 0)))
}

// hostReachingChange returns the first host-reaching field (by path) that p sets differently from
// old (nil on create), or "".
func hostReachingChange(p, old *v1alpha1.TiledProfile) string {
	now := hostReachingParts(p)
	before := map[string]any{}
	if old != nil {
		before = hostReachingParts(old)
	}
	for _, path := range slices.Sorted(maps.Keys(now)) {
		v, was := now[path], before[path]
		if empty(v) && empty(was) {
			continue
		}
		if !reflect.DeepEqual(v, was) {
			return path
		}
	}
	return ""
}

// mayCreatePersistentVolumes asks the API server whether the requesting user may create
// PersistentVolumes.
func mayCreatePersistentVolumes(ctx context.Context, c client.Client, user authenticationv1.UserInfo) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: "", Resource: "persistentvolumes"},
	}}
	if len(user.Extra) > 0 {
		sar.Spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			sar.Spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	if err := c.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("asking whether %s may create PersistentVolumes: %w", user.Username, err)
	}
	return sar.Status.Allowed, nil
}
