package expansion

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The allowances, case by case: what a cluster's template or overrides may set, against what its
// profiles allow.
func TestAllowances(t *testing.T) {
	const allow = `allowedNFS:
- {server: nfs.example.org, pathPrefix: /gpfs}
- {server: detectors.example.org, pathPrefix: /raw, readOnly: true}
allowedUserIDs: [{min: 5000, max: 5999}]
allowedGroupIDs: [{min: 100, max: 199}]
`
	cases := []struct {
		name              string
		profile, template string
		override          string
		// field is the refused field ("" when allowed).
		field string
	}{
		{name: "nothing host-reaching", override: "tiled: {replicas: 1}"},
		{name: "a profile's own export, literal", profile: "storage: {data: {nfs: {server: other.example.org, path: /x}}}"},
		{name: "a profile's own export, computed", profile: `storage: {readOnlyMounts: [{name: p, nfs: {server: other.example.org, pathExpression: "'/x/' + instance.name"}}]}`},
		{name: "beneath an allowed prefix", override: "storage: {data: {nfs: {server: nfs.example.org, path: /gpfs/x/y}}}"},
		{name: "the prefix itself", override: "storage: {data: {nfs: {server: nfs.example.org, path: /gpfs}}}"},
		{name: "an upper-case server is not a DNS name", override: "storage: {data: {nfs: {server: NFS.example.org, path: /gpfs/x}}}", field: "spec.storage.data.nfs.server"},
		{name: "a prefix is a directory, not a string prefix", override: "storage: {data: {nfs: {server: nfs.example.org, path: /gpfsx}}}", field: "spec.storage.data.nfs"},
		{name: "another server", override: "storage: {data: {nfs: {server: evil.example.org, path: /gpfs/x}}}", field: "spec.storage.data.nfs"},
		{name: "a read-only allowance for a read-only mount", override: "storage: {readOnlyMounts: [{name: raw, nfs: {server: detectors.example.org, path: /raw/x}}]}"},
		{name: "a read-only allowance for the data volume", override: "storage: {data: {nfs: {server: detectors.example.org, path: /raw/x}}}", field: "spec.storage.data.nfs"},
		{name: "the template, too", template: "storage: {data: {nfs: {server: evil.example.org, path: /x}}}", field: "spec.storage.data.nfs"},
		{name: "an override's expression", override: `storage: {data: {nfs: {server: nfs.example.org, pathExpression: "'/home/' + instance.name"}}}`, field: "spec.storage.data.nfs"},
		{name: "the server from a profile, the path from an override", profile: "storage: {data: {nfs: {server: nfs.example.org, path: /gpfs/a}}}", override: "storage: {data: {nfs: {path: /etc}}}", field: "spec.storage.data.nfs"},
		{name: "restating the profile's export", profile: "storage: {data: {nfs: {server: other.example.org, path: /x}}}", override: "storage: {data: {nfs: {server: other.example.org, path: /x}}}"},
		{name: "moving a profile's read-only export to the data volume", profile: "storage: {readOnlyMounts: [{name: p, nfs: {server: other.example.org, path: /x}}]}", override: "storage: {data: {nfs: {server: other.example.org, path: /x}}}", field: "spec.storage.data.nfs"},
		{name: "a uid in range", override: "tiled: {runAsUser: 5500}"},
		{name: "a uid out of range", override: "tiled: {runAsUser: 6000}", field: "spec.tiled.runAsUser"},
		{name: "restating the default uid", override: "tiled: {runAsUser: 999}"},
		{name: "groups in range", template: "tiled: {runAsGroup: 150, fsGroup: 100, supplementalGroups: [199]}"},
		{name: "an fsGroup out of range", template: "tiled: {fsGroup: 200}", field: "spec.tiled.fsGroup"},
		{name: "a supplemental group out of range", override: "tiled: {supplementalGroups: [150, 99]}", field: "spec.tiled.supplementalGroups"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Expand(C(tc.template, I("x", T(t, tc.override))), []v1alpha1.TiledProfile{
				P(t, "admin", 0, allow+tc.profile),
			}, DefaultBuiltins())
			if tc.field == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			var na *NotAllowedError
			var ie *InvalidFieldError
			switch {
			case errors.As(err, &na):
				g.Expect(na.Field).To(Equal(tc.field))
				g.Expect(na.Layer).NotTo(HavePrefix("profile/"))
				g.Expect(na.Instance).To(Equal("x"))
			case errors.As(err, &ie):
				g.Expect(ie.Field).To(Equal(tc.field), err.Error())
			default:
				t.Fatalf("unexpected error %T: %v", err, err)
			}
		})
	}
}
