package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/profiles"
)

// ProfileValidator is the validating webhook of TiledProfile.
//
// On create and update it refuses what expansion.CheckProfile finds (fields the schema does not
// declare, CEL expressions that do not compile or do not type-check against the field they compute,
// values the API server would refuse on the objects made from them, malformed allowances), and it
// expands every TiledCluster the profile is (or was) selected by, in the cache, with the new
// profile in place of the old: an edit that would put a cluster into a conflict it is not already
// in (two profiles of equal priority setting one field differently), make one of this profile's
// expressions fail or compute an invalid value for one of its instances, or take away an allowance
// (allowedNFS, allowedUserIDs, allowedGroupIDs) a cluster uses, is refused, naming the cluster, the
// other profile and the field (v1alpha1.AnnotationAllowConflicts applies it anyway; the clusters
// then stall and say why).
//
// On delete it allows, with a warning naming the clusters and standalone instances that select the
// profile.
type ProfileValidator struct {
	// Reader lists TiledProfiles, TiledClusters and TiledInstances: the manager's cache.
	Reader client.Reader
	// Builtins are the built-in defaults, as the controllers use.
	Builtins expansion.Builtins
	// Reviews creates SubjectAccessReviews: a profile edit that adds or changes an NFS export, a uid
	// or gid, or an allowance is admitted only for users who may create PersistentVolumes (see
	// hostReachingParts). Nil skips that check (handler tests without an API server).
	Reviews client.Client
}

// Handle implements admission.Handler.
func (h *ProfileValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if err := checkKind(req, "TiledProfile"); err != nil {
		return badRequest("%v", err)
	}
	switch req.Operation {
	case admissionv1.Delete:
		return h.deleted(ctx, req)
	case admissionv1.Create, admissionv1.Update:
	default:
		return admission.Allowed("")
	}
	p, refusal := decodeNamed[*v1alpha1.TiledProfile](req, "TiledProfile")
	if refusal != nil {
		return *refusal
	}
	if err := expansion.CheckProfile(p); err != nil {
		return refuse("TiledProfile", p.Namespace, p.Name, "%v", err)
	}
	warnings := prefixed("TiledProfile "+objectName(p.Namespace, p.Name)+": ", templateWarnings(&p.Spec.InstanceTemplate, false))

	old, err := decodeOld[*v1alpha1.TiledProfile](req, "TiledProfile")
	if err != nil {
		old = nil // an unreadable stored profile is taken as a new one
	}
	if field := hostReachingChange(p, old); field != "" && h.Reviews != nil {
		allowed, err := mayCreatePersistentVolumes(ctx, h.Reviews, req.UserInfo)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if !allowed {
			return refuse("TiledProfile", p.Namespace, p.Name, "%s: NFS exports, the pods' uids and gids, and what instances may choose of them (allowedNFS, allowedUserIDs, allowedGroupIDs) are an administrator's decision: they need permission to create PersistentVolumes, which %s does not have",
				field, req.UserInfo.Username)
		}
	}
	var clusters v1alpha1.TiledClusterList
	if err := h.Reader.List(ctx, &clusters, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing TiledClusters: %w", err))
	}
	var current v1alpha1.TiledProfileList
	if err := h.Reader.List(ctx, &current, client.InNamespace(p.Namespace)); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing TiledProfiles: %w", err))
	}
	before := current.Items
	if old == nil {
		before = without(current.Items, p.Name)
	}
	after := append(without(current.Items, p.Name), *p)
	affected, _ := profiles.Affected(old, p, clusters.Items, nil)
	allow := p.Annotations[v1alpha1.AnnotationAllowConflicts] == "true"
	for _, key := range affected {
		c := findCluster(clusters.Items, key)
		if c == nil {
			continue
		}
		// Only the error is read: Check holds one expanded instance at a time.
		errAfter := expansion.Check(c, after, h.Builtins)
		if errAfter == nil {
			continue
		}
		problem := h.causedBy(p, errAfter)
		if problem == "" {
			var none *profiles.NoProfilesError
			if errors.As(errAfter, &none) {
				warnings = append(warnings, fmt.Sprintf("TiledCluster %s: %v", objectName(c.Namespace, c.Name), errAfter))
			}
			continue
		}
		errBefore := expansion.Check(c, before, h.Builtins)
		msg := fmt.Sprintf("TiledCluster %s would %s: %v", objectName(c.Namespace, c.Name), problem, errAfter)
		if errBefore != nil || allow {
			// Not made worse by this edit, or allowed on purpose: the cluster reports it.
			warnings = append(warnings, msg)
			continue
		}
		return refuse("TiledProfile", p.Namespace, p.Name, "%s (annotate the profile %s=true to apply it anyway)", msg, v1alpha1.AnnotationAllowConflicts).WithWarnings(warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// causedBy says what an expansion error is when this profile has a part in it: a conflict naming
// it, or one of its expressions failing; "" otherwise.
func (h *ProfileValidator) causedBy(p *v1alpha1.TiledProfile, err error) string {
	prefix := "profile/" + p.Name + "@"
	var ce *expansion.ConflictError
	if errors.As(err, &ce) && (strings.HasPrefix(ce.Profiles[0], prefix) || strings.HasPrefix(ce.Profiles[1], prefix)) {
		return "be left in conflict"
	}
	var xe *expansion.ExpressionError
	if errors.As(err, &xe) && strings.HasPrefix(xe.Layer, prefix) {
		return "fail to expand"
	}
	var ie *expansion.InvalidFieldError
	if errors.As(err, &ie) && strings.HasPrefix(ie.Layer, prefix) {
		return "fail to expand"
	}
	var na *expansion.NotAllowedError
	if errors.As(err, &na) {
		// The profile is one of the cluster's: the edit took away an allowance the cluster uses
		// (refused only when the cluster was fine before it).
		return "lose an allowance it uses"
	}
	return ""
}

// deleted warns about the clusters and standalone instances that select a profile being deleted.
func (h *ProfileValidator) deleted(ctx context.Context, req admission.Request) admission.Response {
	if len(req.OldObject.Raw) == 0 {
		return admission.Allowed("")
	}
	decoded, err := expansion.Decode(req.OldObject.Raw)
	if err != nil {
		return admission.Allowed("")
	}
	p, ok := decoded.(*v1alpha1.TiledProfile)
	if !ok {
		return admission.Allowed("")
	}
	if p.Namespace == "" {
		p.Namespace = req.Namespace
	}
	var clusters v1alpha1.TiledClusterList
	var instances v1alpha1.TiledInstanceList
	if err := h.Reader.List(ctx, &clusters, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
		return admission.Allowed("").WithWarnings("cannot tell which TiledClusters use TiledProfile " + p.Name + ": " + err.Error())
	}
	if err := h.Reader.List(ctx, &instances, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
		return admission.Allowed("").WithWarnings("cannot tell which TiledInstances use TiledProfile " + p.Name + ": " + err.Error())
	}
	byStatus := map[string]bool{}
	for _, c := range clusters.Items {
		for _, sp := range c.Status.Profiles {
			if sp.Name == p.Name {
				byStatus[c.Name] = true
			}
		}
	}
	cs, is := profiles.Affected(p, nil, clusters.Items, instances.Items)
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
		delete(byStatus, c.Name)
	}
	for n := range byStatus {
		names = append(names, n)
	}
	var warnings []string
	if len(names) > 0 {
		warnings = append(warnings, fmt.Sprintf("TiledProfile %s is used by TiledCluster(s) %s: their instances are expanded again without it, and a cluster whose selector then matches no profile stops with ProfilesResolved=False",
			objectName(p.Namespace, p.Name), strings.Join(sortedUnique(names), ", ")))
	}
	if len(is) > 0 {
		var in []string
		for _, i := range is {
			in = append(in, i.Name)
		}
		warnings = append(warnings, fmt.Sprintf("TiledProfile %s is selected by standalone TiledInstance(s) %s", objectName(p.Namespace, p.Name), strings.Join(in, ", ")))
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

func without(ps []v1alpha1.TiledProfile, name string) []v1alpha1.TiledProfile {
	out := make([]v1alpha1.TiledProfile, 0, len(ps)+1)
	for _, q := range ps {
		if q.Name != name {
			out = append(out, q)
		}
	}
	return out
}

func findCluster(cs []v1alpha1.TiledCluster, key types.NamespacedName) *v1alpha1.TiledCluster {
	for i := range cs {
		if cs[i].Namespace == key.Namespace && cs[i].Name == key.Name {
			return &cs[i]
		}
	}
	return nil
}
