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
	"github.com/bluesky/tiled-operator/profiles"
)

// ClusterValidator is the validating webhook of TiledCluster (which is never mutated: it is owned
// by Git). It refuses override and template fields the schema does not declare, selectors that do
// not parse, CEL expressions of the template or of an instance's overrides that do not compile,
// type-check or evaluate for their instances. It expands the cluster with the profiles of the
// cache and warns (never refuses) about what the profiles decide — a selector matching no profile
// yet, profiles in conflict — and about suspicious settings of the expanded instances.
type ClusterValidator struct {
	// Reader lists TiledProfiles: the manager's cache.
	Reader client.Reader
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
	if _, err := profiles.ParseSelector(c.Spec.ProfileSelector, "cluster/"+c.Name, "spec.profileSelector"); err != nil {
		return deny(err)
	}
	if c.Spec.Template != nil {
		if err := expansion.CheckLayer(expansion.SourceClusterTemplate, c.Spec.Template); err != nil {
			return deny(fmt.Errorf("spec.template: %w", err))
		}
	}
	for _, in := range c.Spec.Instances {
		if in.ProfileSelector != nil {
			if _, err := profiles.ParseSelector(in.ProfileSelector, "cluster/"+c.Name, "spec.instances[name="+in.Name+"].profileSelector"); err != nil {
				return deny(err)
			}
		}
		if in.Overrides != nil {
			if err := expansion.CheckLayer(expansion.OverridesSource(in.Name), in.Overrides); err != nil {
				return deny(fmt.Errorf("spec.instances[name=%s].overrides: %w", in.Name, err))
			}
		}
	}
	var warnings []string
	if c.Spec.Template != nil {
		warnings = append(warnings, prefixed("spec.template: ", templateWarnings(c.Spec.Template, false))...)
	}

	var list v1alpha1.TiledProfileList
	if err := h.Reader.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing TiledProfiles: %w", err))
	}
	res, err := expansion.Expand(c, list.Items, h.Builtins)
	if err != nil {
		var xe *expansion.ExpressionError
		if errors.As(err, &xe) && !strings.HasPrefix(xe.Layer, "profile/") {
			// The cluster's own expression fails for one of its instances: the edit is at fault.
			return deny(err).WithWarnings(prefixWarnings(c, warnings)...)
		}
		var ue *expansion.UnknownFieldError
		var ie *expansion.InvalidFieldError
		if (errors.As(err, &ue) && !strings.HasPrefix(ue.Layer, "profile/")) ||
			(errors.As(err, &ie) && !strings.HasPrefix(ie.Layer, "profile/")) {
			return deny(err).WithWarnings(prefixWarnings(c, warnings)...)
		}
		// What the profiles decide (none selected yet, a conflict between two of them, a profile's
		// expression) is reported by the cluster's status; applying the cluster is not refused, so
		// that profiles and clusters can be applied in any order.
		warnings = append(warnings, fmt.Sprintf("not expanded with the current profiles, the cluster will report ProfilesResolved=False: %v", err))
		return admission.Allowed("").WithWarnings(prefixWarnings(c, warnings)...)
	}
	byInstance := map[string][]string{}
	for _, in := range res.Instances {
		if ws := templateWarnings(&in.Object.Spec.InstanceTemplate, true); len(ws) > 0 {
			byInstance[in.Name] = ws
		}
	}
	warnings = append(warnings, groupWarnings(byInstance)...)
	return admission.Allowed("").WithWarnings(prefixWarnings(c, warnings)...)
}

func prefixWarnings(c *v1alpha1.TiledCluster, ws []string) []string {
	return prefixed("TiledCluster "+objectName(c.Namespace, c.Name)+": ", ws)
}
