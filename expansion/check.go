package expansion

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/profiles"
)

// The checks of one object on its own (CheckProfile, CheckCluster, CheckInstance) are what the
// admission webhooks refuse before they look at other objects, and what kubectl-tiled runs on
// files; Expand and ExpandInstance then check every expanded instance (checkExpanded). Together they
// give the same verdict on the same objects, on the API server and offline.

// objectNamePattern is what TiledCluster and standalone TiledInstance names must match: their names
// begin the names of Services (DNS-1035 labels, shortened with a hash when too long).
var objectNamePattern = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// firstError turns the problems found in a layer or an instance into one *InvalidFieldError: the
// first, with the number of others. source gives the layer of each problem.
func firstError(errs field.ErrorList, instance string, source func(*field.Error) string) error {
	if len(errs) == 0 {
		return nil
	}
	e := errs[0]
	reason := e.ErrorBody()
	if len(errs) > 1 {
		more := make([]string, 0, 3)
		for _, o := range errs[1:min(len(errs), 4)] {
			more = append(more, o.Field)
		}
		reason += fmt.Sprintf(" (and %d more: %s", len(errs)-1, strings.Join(more, ", "))
		if len(errs) > 4 {
			reason += ", ..."
		}
		reason += ")"
	}
	return &InvalidFieldError{Layer: source(e), Instance: instance, Field: e.Field, Reason: reason}
}

// templateOf returns the InstanceTemplate of a *v1alpha1.InstanceTemplate or a
// *v1alpha1.TiledInstanceSpec.
func templateOf(template any) *v1alpha1.InstanceTemplate {
	switch t := template.(type) {
	case *v1alpha1.InstanceTemplate:
		return t
	case *v1alpha1.TiledInstanceSpec:
		return &t.InstanceTemplate
	}
	return nil
}

// checkValues checks the values one layer sets (see validateTemplate), as an *InvalidFieldError.
func checkValues(source string, template any) error {
	t := templateOf(template)
	if t == nil {
		return nil
	}
	v := validateTemplate(field.NewPath("spec"), t, false)
	return firstError(v.errs, "", func(*field.Error) string { return source })
}

// CheckProfile checks a TiledProfile on its own, as its admission webhook does: its settings as
// CheckLayer, and its allowances (allowedNFS servers and path prefixes, id ranges).
func CheckProfile(p *v1alpha1.TiledProfile) error {
	src := ProfileSource(p)
	if err := CheckLayer(src, &p.Spec.InstanceTemplate); err != nil {
		return err
	}
	var errs field.ErrorList
	base := field.NewPath("spec")
	for i, a := range p.Spec.AllowedNFS {
		ap := base.Child("allowedNFS").Index(i)
		if msg := nfsServerError(a.Server); msg != "" || a.Server == "" {
			if a.Server == "" {
				msg = "an allowance names the server"
			}
			errs = append(errs, field.Invalid(ap.Child("server"), a.Server, msg))
		}
		if !cleanAbsolute(a.PathPrefix) {
			errs = append(errs, field.Invalid(ap.Child("pathPrefix"), a.PathPrefix, "must be an absolute path without ., .. or empty segments"))
		}
	}
	for _, set := range []struct {
		name   string
		ranges []v1alpha1.IDRange
		lowest int64
	}{{"allowedUserIDs", p.Spec.AllowedUserIDs, 1}, {"allowedGroupIDs", p.Spec.AllowedGroupIDs, 0}} {
		for i, r := range set.ranges {
			rp := base.Child(set.name).Index(i)
			if r.Min < set.lowest || r.Max > 2147483647 || r.Min > r.Max {
				errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.Min, r.Max),
					fmt.Sprintf("must be a range min <= max within %d-2147483647", set.lowest)))
			}
		}
	}
	return firstError(errs, "", func(*field.Error) string { return src })
}

// CheckCluster checks a TiledCluster on its own, as its admission webhook does before it expands
// it: the cluster's name, its selectors, its instances' names and labels, its template and each
// instance's overrides as CheckLayer, and instances whose objects would share a name.
func CheckCluster(c *v1alpha1.TiledCluster) error {
	layer := "cluster/" + c.Name
	if !objectNamePattern.MatchString(c.Name) {
		return &InvalidFieldError{Layer: layer, Field: "metadata.name",
			Reason: fmt.Sprintf("%q must be lower-case letters, digits and '-', starting with a letter: it begins the names of the instances' Services", c.Name)}
	}
	if _, err := profiles.ParseSelector(c.Spec.ProfileSelector, layer, "spec.profileSelector"); err != nil {
		return err
	}
	if c.Spec.Template != nil {
		if err := CheckLayer(SourceClusterTemplate, c.Spec.Template); err != nil {
			return fmt.Errorf("spec.template: %w", err)
		}
	}
	seen := map[string]bool{}
	skeletons := make([]*v1alpha1.TiledInstance, 0, len(c.Spec.Instances))
	short := map[*v1alpha1.TiledInstance]string{}
	for _, in := range c.Spec.Instances {
		ip := "spec.instances[name=" + in.Name + "]"
		if seen[in.Name] {
			return &InvalidFieldError{Layer: layer, Field: ip, Reason: "instance names must be unique"}
		}
		seen[in.Name] = true
		v := &validator{}
		v.labels(field.NewPath(ip).Child("labels"), in.Labels)
		if err := firstError(v.errs, "", func(*field.Error) string { return layer }); err != nil {
			return err
		}
		if in.ProfileSelector != nil {
			if _, err := profiles.ParseSelector(in.ProfileSelector, layer, ip+".profileSelector"); err != nil {
				return err
			}
		}
		if in.Overrides != nil {
			if err := CheckLayer(OverridesSource(in.Name), in.Overrides); err != nil {
				return fmt.Errorf("%s.overrides: %w", ip, err)
			}
		}
		sk := &v1alpha1.TiledInstance{}
		sk.Name, sk.Namespace = names.Instance(c.Name, in.Name), c.Namespace
		skeletons = append(skeletons, sk)
		short[sk] = in.Name
	}
	res := &Result{}
	for _, sk := range skeletons {
		res.Instances = append(res.Instances, Instance{Name: short[sk], Object: sk})
	}
	return clusterCollision(c, res)
}

// CheckInstance checks a standalone TiledInstance on its own, as its admission webhooks do: its
// name, its profileSelector and its own settings as CheckLayer.
func CheckInstance(ti *v1alpha1.TiledInstance) error {
	if msgs := instanceNameErrors(ti.Name); len(msgs) > 0 {
		return &InvalidFieldError{Layer: SourceInstance, Field: "metadata.name", Reason: fmt.Sprintf("%q %s", ti.Name, strings.Join(msgs, "; "))}
	}
	if ti.Spec.ProfileSelector != nil {
		if _, err := profiles.ParseSelector(ti.Spec.ProfileSelector, "instance/"+ti.Name, "spec.profileSelector"); err != nil {
			return err
		}
	}
	return CheckLayer(SourceInstance, &ti.Spec)
}

func instanceNameErrors(name string) []string {
	if len(name) > names.MaxInstanceNameLength || !objectNamePattern.MatchString(name) {
		return []string{fmt.Sprintf("must be at most %d lower-case letters, digits and '-', starting with a letter: it names the instance's Services and is a label value of its objects", names.MaxInstanceNameLength)}
	}
	return validation.IsDNS1035Label(name)
}

// checkExpanded checks an expanded instance: its values as complete (validateTemplate), each
// problem laid at the door of the highest layer that set a field taking part, and its host-reaching
// settings against its profiles' allowances (checkAllowed). stack is the layers, lowest first; ctx
// is what its expressions saw.
func (e *engine) checkExpanded(instance string, spec *v1alpha1.TiledInstanceSpec, prov map[string]string, stack []*layer, ctx *exprContext) error {
	v := validateTemplate(field.NewPath("spec"), &spec.InstanceTemplate, true)
	if len(v.errs) > 0 {
		rank := make(map[string]int, len(stack))
		for i, l := range stack {
			rank[l.source] = i
		}
		return firstError(v.errs, instance, func(e *field.Error) string {
			return attribute(prov, rank, append([]string{e.Field}, v.related[e]...))
		})
	}
	var applied []*v1alpha1.TiledProfile
	admin := 0
	for i, l := range stack {
		if l.profile != nil {
			applied = append(applied, l.profile)
		}
		if l.source == SourceDefault || l.profile != nil {
			admin = i + 1
		}
	}
	adminSpec := func() (*v1alpha1.TiledInstanceSpec, error) {
		s, _, err := e.expandOne(instance, stack[:admin], admin, ctx)
		return s, err
	}
	return checkAllowed(instance, spec, prov, applied, adminSpec)
}

// attribute returns the highest-ranked provenance source of the leaves at, beneath or above the
// given paths.
func attribute(prov map[string]string, rank map[string]int, paths []string) string {
	best, bestRank := SourceDefault, -1
	consider := func(src string) {
		layer := strings.TrimSuffix(src, ExpressionSuffix)
		if IsDefaultSource(layer) {
			layer = SourceDefault
		}
		r, ok := rank[layer]
		if ok && (r > bestRank || (r == bestRank && src < best)) {
			best, bestRank = src, r
		}
	}
	for _, p := range paths {
		if src, ok := prov[p]; ok {
			consider(src)
			continue
		}
		for leaf, src := range prov {
			if related(leaf, p) || related(p, leaf) {
				consider(src)
			}
		}
	}
	return best
}

// related reports whether path q lies beneath path p (or is p).
func related(q, p string) bool {
	return q == p || (strings.HasPrefix(q, p) && (q[len(p)] == '.' || q[len(p)] == '['))
}
