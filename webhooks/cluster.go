package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
)

// ClusterValidator is the validating webhook of TiledCluster (which is never mutated: it is owned
// by Git). It refuses what expansion.CheckCluster finds in the object alone (its name, selectors,
// instance names and labels, override and template fields the schema does not declare, CEL
// expressions that do not compile or type-check, values the API server would refuse on the
// children, beamlines whose objects would share a name). It then expands the cluster with the
// profiles of the cache and refuses what the cluster's own edit gets wrong: its expressions failing
// or computing invalid values for its instances, invalid merged values its layers set, NFS exports,
// uids and gids the profiles do not allow (expansion.NotAllowedError), and instances whose objects
// would take the names of another cluster's or of a standalone instance's. What the profiles
// decide — a selector matching no profile yet, profiles in conflict, a profile's own invalid value —
// is a warning (the cluster's status reports it), and so is a problem the stored cluster already
// had; suspicious settings of the expanded instances are warnings too.
type ClusterValidator struct {
	// Reader lists TiledProfiles and TiledInstances: the manager's cache.
	Reader client.Reader
	// APIReader, when set, lists TiledProfiles again from the API server before a refusal that
	// depends on what they allow: a profile edited a moment before the cluster may not have reached
	// the cache yet.
	APIReader client.Reader
	// Builtins are the built-in defaults, as the controllers use.
	Builtins expansion.Builtins
}

// Handle implements admission.Handler.
func (h *ClusterValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if err := checkKind(req, "TiledCluster"); err != nil {
		return badRequest("%v", err)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	c, refusal := decodeNamed[*v1alpha1.TiledCluster](req, "TiledCluster")
	if refusal != nil {
		return *refusal
	}
	deny := func(err error) admission.Response { return refuse("TiledCluster", c.Namespace, c.Name, "%v", err) }
	if err := expansion.CheckCluster(c); err != nil {
		return deny(err)
	}
	var warnings []string
	if c.Spec.Template != nil {
		warnings = append(warnings, prefixed("spec.template: ", templateWarnings(c.Spec.Template, false))...)
	}

	var list v1alpha1.TiledProfileList
	if err := h.Reader.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing TiledProfiles: %w", err))
	}
	// Each instance's warnings are read as it is expanded, and only the names of its objects kept
	// (expansion.Names, for the collision check): a cluster of a thousand instances does not hold
	// a thousand expansions at once.
	var byInstance map[string][]string
	expand := func(profiles []v1alpha1.TiledProfile) (*expansion.Result, error) {
		byInstance = map[string][]string{}
		return expansion.ExpandEach(c, profiles, h.Builtins, func(ti *v1alpha1.TiledInstance) *v1alpha1.TiledInstance {
			if ws := templateWarnings(&ti.Spec.InstanceTemplate, true); len(ws) > 0 {
				byInstance[ti.Labels[v1alpha1.LabelInstance]] = ws
			}
			return expansion.Names(ti)
		})
	}
	res, err := expand(list.Items)
	if err != nil && clustersFault(err) && h.APIReader != nil {
		var fresh v1alpha1.TiledProfileList
		if lerr := h.APIReader.List(ctx, &fresh, client.InNamespace(c.Namespace)); lerr == nil {
			res, err = expand(fresh.Items)
		}
	}
	if err != nil {
		if clustersFault(err) && !h.storedAlready(req, err, list.Items) {
			return deny(err).WithWarnings(prefixWarnings(c, warnings)...)
		}
		// What the profiles decide (none selected yet, a conflict between two of them, a profile's
		// expression or value), or a problem the stored cluster has already, is reported by the
		// cluster's status; applying the cluster is not refused, so that profiles and clusters can
		// be applied in any order.
		warnings = append(warnings, fmt.Sprintf("not expanded with the current profiles, the cluster will report ProfilesResolved=False: %v", err))
	}
	var mine []*v1alpha1.TiledInstance
	if res != nil {
		mine = res.Objects()
	} else {
		for _, in := range c.Spec.Instances {
			sk := &v1alpha1.TiledInstance{}
			sk.Name, sk.Namespace = names.Instance(c.Name, in.Name), c.Namespace
			sk.Labels = map[string]string{v1alpha1.LabelInstance: in.Name, v1alpha1.LabelCluster: names.LabelValue(c.Name)}
			mine = append(mine, sk)
		}
	}
	if msg, err := h.collision(ctx, c, mine); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	} else if msg != "" {
		return refuse("TiledCluster", c.Namespace, c.Name, "%s", msg).WithWarnings(prefixWarnings(c, warnings)...)
	}
	if res != nil {
		warnings = append(warnings, groupWarnings(byInstance)...)
	}
	return admission.Allowed("").WithWarnings(prefixWarnings(c, warnings)...)
}

// clustersFault reports whether an expansion error is the cluster's own doing: one of its
// expressions failing, a value its template or overrides set (or one a profile's expression computed
// from its instances' names and labels) that is invalid, or a setting its profiles do not allow.
func clustersFault(err error) bool {
	var na *expansion.NotAllowedError
	if errors.As(err, &na) {
		return true
	}
	var xe *expansion.ExpressionError
	if errors.As(err, &xe) {
		return !strings.HasPrefix(xe.Layer, "profile/")
	}
	var ue *expansion.UnknownFieldError
	if errors.As(err, &ue) {
		return !strings.HasPrefix(ue.Layer, "profile/")
	}
	var ie *expansion.InvalidFieldError
	if errors.As(err, &ie) {
		return !strings.HasPrefix(ie.Layer, "profile/") || strings.HasSuffix(ie.Layer, expansion.ExpressionSuffix)
	}
	return false
}

// storedAlready reports whether, on an update, the stored cluster fails to expand with the same
// error: the edit did not make it worse, so it is not refused for it.
func (h *ClusterValidator) storedAlready(req admission.Request, err error, candidates []v1alpha1.TiledProfile) bool {
	old, derr := decodeOld[*v1alpha1.TiledCluster](req, "TiledCluster")
	if derr != nil || old == nil {
		return false
	}
	if old.Namespace == "" {
		old.Namespace = req.Namespace
	}
	oldErr := expansion.Check(old, candidates, h.Builtins)
	return oldErr != nil && oldErr.Error() == err.Error()
}

// collision checks the cluster's instances against the other TiledInstances of the namespace (of
// other clusters, and standalone ones) and the PersistentVolumes of all: a name two would share is
// refused, naming both.
func (h *ClusterValidator) collision(ctx context.Context, c *v1alpha1.TiledCluster, mine []*v1alpha1.TiledInstance) (string, error) {
	var all v1alpha1.TiledInstanceList
	// The cache's own instances, not copies (every instance of every cluster): read only.
	if err := h.Reader.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing TiledInstances: %w", err)
	}
	others := make([]*v1alpha1.TiledInstance, 0, len(all.Items))
	for i := range all.Items {
		o := &all.Items[i]
		if o.Namespace == c.Namespace && clusterOf(o) == c.Name {
			continue // this cluster's own, as stored: replaced by mine
		}
		others = append(others, o)
	}
	err := expansion.NameCollision(others, mine, func(ti *v1alpha1.TiledInstance) string {
		return "spec.instances[name=" + ti.Labels[v1alpha1.LabelInstance] + "]"
	})
	if err != nil {
		return err.Error(), nil
	}
	return "", nil
}

func prefixWarnings(c *v1alpha1.TiledCluster, ws []string) []string {
	return prefixed("TiledCluster "+objectName(c.Namespace, c.Name)+": ", ws)
}
