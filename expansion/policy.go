package expansion

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Host-reaching settings are an administrator's decision. An NFS export (storage.data.nfs,
// storage.readOnlyMounts[].nfs) makes the operator create a cluster-scoped PersistentVolume to that
// server and path, which a namespace editor cannot create; the uid and gids of the Tiled pods are
// the identity the NFS server checks. So:
//
//   - values set by the built-in defaults or by TiledProfiles (literal or computed by a profile's
//     expression) are allowed: profiles are written by the people who decide;
//   - values set by anything else — a cluster's template, an instance's overrides, a standalone
//     instance's own spec, whether literal or computed by their expressions — must lie within what
//     the TiledProfiles applied to that instance allow: spec.allowedNFS (server and path prefix;
//     readOnly entries for read-only mounts only), spec.allowedUserIDs, spec.allowedGroupIDs;
//   - or equal what the defaults and profiles alone give the same place (the data volume, the
//     read-only mount of the same name, the same id field): restating the profiles' choice invents
//     nothing, and so expanding an expanded instance again gives it back.
//
// A setting counts as set by the highest layer that sets any part of it (the NFS server or the
// path), as provenance records. The check runs on every expansion (the controllers, the webhooks
// and kubectl-tiled alike); a violation is a *NotAllowedError.

// NotAllowedError reports a host-reaching setting — an NFS export, a uid or gid — that a layer other
// than the built-in defaults and the TiledProfiles sets, and that no TiledProfile applied to the
// instance allows.
type NotAllowedError struct {
	// Instance is the short name of the instance.
	Instance string
	// Layer is the provenance source that set the value, e.g. instance/chx/overrides.
	Layer string
	// Field is the path of the setting, e.g. spec.storage.data.nfs or spec.tiled.runAsUser.
	Field string
	// Value is the value set, e.g. nfs.example.org:/export or 0.
	Value string
	// Allowed describes what the instance's profiles allow, e.g.
	// "nfs.nsls2.bnl.gov:/nsls2/data (profile/nsls2@3)"; empty when they allow nothing.
	Allowed string
}

func (e *NotAllowedError) Error() string {
	what := "NFS exports"
	field := "allowedNFS"
	switch {
	case strings.HasSuffix(e.Field, "runAsUser"):
		what, field = "uids", "allowedUserIDs"
	case !strings.Contains(e.Field, ".nfs"):
		what, field = "gids", "allowedGroupIDs"
	}
	allowed := "they allow none"
	if e.Allowed != "" {
		allowed = "they allow " + e.Allowed
	}
	return fmt.Sprintf("instance %s: %s: %s sets %s, which none of the instance's TiledProfiles allows in spec.%s (%s); only TiledProfiles may introduce %s",
		e.Instance, e.Field, e.Layer, e.Value, field, allowed, what)
}

// adminSource reports whether a provenance source is the built-in defaults or a profile.
func adminSource(src string) bool {
	return IsDefaultSource(src) || strings.HasPrefix(src, "profile/")
}

// IsDefaultSource reports whether a provenance source is the built-in defaults: "default", or
// "default (RELATED_IMAGE_<ROLE>)" for a built-in image the manager's environment replaced.
func IsDefaultSource(src string) bool {
	return src == SourceDefault || (strings.HasPrefix(src, SourceDefault+" ("+RelatedImagePrefix) && strings.HasSuffix(src, ")"))
}

// setter returns the source among the given fields' that decides whether a setting is allowed: the
// first that is not an administrator's, or "" when all are.
func setter(prov map[string]string, fields ...string) string {
	for _, f := range fields {
		if src, ok := prov[f]; ok && !adminSource(src) {
			return src
		}
	}
	return ""
}

// checkAllowed checks the host-reaching settings of an expanded instance, whose provenance is
// prov, against the allowances of the profiles applied to it. admin returns the spec the defaults
// and profiles alone give (computed only when needed).
func checkAllowed(instance string, spec *v1alpha1.TiledInstanceSpec, prov map[string]string, applied []*v1alpha1.TiledProfile,
	admin func() (*v1alpha1.TiledInstanceSpec, error)) error {
	var adminSpec *v1alpha1.TiledInstanceSpec
	base := func() (*v1alpha1.TiledInstanceSpec, error) {
		if adminSpec != nil {
			return adminSpec, nil
		}
		var err error
		adminSpec, err = admin()
		return adminSpec, err
	}
	if s := spec.Storage; s != nil {
		if d := s.Data; d != nil && d.NFS != nil && d.ExistingClaimName == "" {
			same := func(a *v1alpha1.TiledInstanceSpec) bool {
				return a.Storage != nil && a.Storage.Data != nil && sameNFS(a.Storage.Data.NFS, d.NFS) && a.Storage.Data.ExistingClaimName == ""
			}
			if err := checkNFS(instance, "spec.storage.data.nfs", d.NFS, false, prov, applied, base, same); err != nil {
				return err
			}
		}
		for _, m := range s.ReadOnlyMounts {
			if m.NFS == nil || m.ExistingClaimName != "" {
				continue
			}
			site := "spec.storage.readOnlyMounts[name=" + m.Name + "].nfs"
			same := func(a *v1alpha1.TiledInstanceSpec) bool {
				if a.Storage == nil {
					return false
				}
				for _, am := range a.Storage.ReadOnlyMounts {
					if am.Name == m.Name && am.ExistingClaimName == "" && sameNFS(am.NFS, m.NFS) {
						return true
					}
				}
				return false
			}
			if err := checkNFS(instance, site, m.NFS, true, prov, applied, base, same); err != nil {
				return err
			}
		}
	}
	t := spec.Tiled
	if t == nil {
		return nil
	}
	ids := []struct {
		field string
		value *int64
		users bool
		of    func(*v1alpha1.TiledServerSpec) *int64
	}{
		{"spec.tiled.runAsUser", t.RunAsUser, true, func(a *v1alpha1.TiledServerSpec) *int64 { return a.RunAsUser }},
		{"spec.tiled.runAsGroup", t.RunAsGroup, false, func(a *v1alpha1.TiledServerSpec) *int64 { return a.RunAsGroup }},
		{"spec.tiled.fsGroup", t.FSGroup, false, func(a *v1alpha1.TiledServerSpec) *int64 { return a.FSGroup }},
	}
	for _, id := range ids {
		if id.value == nil {
			continue
		}
		same := func(a *v1alpha1.TiledInstanceSpec) bool {
			return a.Tiled != nil && id.of(a.Tiled) != nil && *id.of(a.Tiled) == *id.value
		}
		if err := checkID(instance, id.field, *id.value, id.users, prov, applied, base, same); err != nil {
			return err
		}
	}
	for _, gid := range t.SupplementalGroups {
		same := func(a *v1alpha1.TiledInstanceSpec) bool {
			return a.Tiled != nil && slices.Contains(a.Tiled.SupplementalGroups, gid)
		}
		if err := checkID(instance, "spec.tiled.supplementalGroups", gid, false, prov, applied, base, same); err != nil {
			return err
		}
	}
	return nil
}

func sameNFS(a, b *v1alpha1.NFSVolumeSource) bool {
	return a != nil && b != nil && a.Server == b.Server && a.Path == b.Path
}

// restated reports whether the defaults and profiles alone give the same value (same says whether
// their spec holds it).
func restated(base func() (*v1alpha1.TiledInstanceSpec, error), same func(*v1alpha1.TiledInstanceSpec) bool) (bool, error) {
	a, err := base()
	if err != nil {
		return false, err
	}
	return a != nil && same(a), nil
}

func checkNFS(instance, site string, n *v1alpha1.NFSVolumeSource, readOnly bool, prov map[string]string, applied []*v1alpha1.TiledProfile,
	base func() (*v1alpha1.TiledInstanceSpec, error), same func(*v1alpha1.TiledInstanceSpec) bool) error {
	src := setter(prov, site+".server", site+".path")
	if src == "" {
		return nil
	}
	if ok, err := restated(base, same); ok || err != nil {
		return err
	}
	var allowed []string
	for _, p := range applied {
		for _, a := range p.Spec.AllowedNFS {
			if a.ReadOnly && !readOnly {
				continue
			}
			allowed = append(allowed, fmt.Sprintf("%s:%s (%s)", a.Server, a.PathPrefix, ProfileSource(p)))
			if strings.EqualFold(a.Server, n.Server) && cleanAbsolute(n.Path) && within(n.Path, path.Clean(a.PathPrefix)) {
				return nil
			}
		}
	}
	return &NotAllowedError{Instance: instance, Layer: src, Field: site, Value: "NFS export " + n.Server + ":" + n.Path,
		Allowed: summarize(allowed)}
}

func checkID(instance, field string, id int64, users bool, prov map[string]string, applied []*v1alpha1.TiledProfile,
	base func() (*v1alpha1.TiledInstanceSpec, error), same func(*v1alpha1.TiledInstanceSpec) bool) error {
	src := setter(prov, field)
	if src == "" {
		return nil
	}
	if ok, err := restated(base, same); ok || err != nil {
		return err
	}
	var allowed []string
	for _, p := range applied {
		ranges := p.Spec.AllowedGroupIDs
		if users {
			ranges = p.Spec.AllowedUserIDs
		}
		for _, r := range ranges {
			allowed = append(allowed, fmt.Sprintf("%d-%d (%s)", r.Min, r.Max, ProfileSource(p)))
			if id >= r.Min && id <= r.Max && (!users || id != 0) {
				return nil
			}
		}
	}
	return &NotAllowedError{Instance: instance, Layer: src, Field: field, Value: fmt.Sprint(id), Allowed: summarize(allowed)}
}

// summarize joins at most five allowances.
func summarize(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
	}
	return strings.Join(items, ", ")
}
