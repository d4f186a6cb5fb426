package expansion

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Every pair of layers: the higher one wins, and provenance names it.
func TestPrecedence(t *testing.T) {
	image := func(tag string) string { return "tiled: {image: ghcr.io/bluesky/tiled:" + tag + "}" }
	cases := []struct {
		name               string
		low, high          string // profile priorities 0 and 10
		template, override string
		want, source       string
	}{
		{name: "default only", want: TiledVersion, source: "default"},
		{name: "profile over default", low: image("1.0.0"), want: "1.0.0", source: "profile/low@1"},
		{name: "higher priority profile over lower", low: image("1.0.0"), high: image("2.0.0"), want: "2.0.0", source: "profile/high@1"},
		{name: "template over profiles", low: image("1.0.0"), high: image("2.0.0"), template: image("3.0.0"), want: "3.0.0", source: "cluster/template"},
		{name: "template over default", template: image("3.0.0"), want: "3.0.0", source: "cluster/template"},
		{name: "override over template", template: image("3.0.0"), override: image("4.0.0"), want: "4.0.0", source: "instance/x/overrides"},
		{name: "override over profile", high: image("2.0.0"), override: image("4.0.0"), want: "4.0.0", source: "instance/x/overrides"},
		{name: "override over default", override: image("4.0.0"), want: "4.0.0", source: "instance/x/overrides"},
		{name: "override over everything", low: image("1.0.0"), high: image("2.0.0"), template: image("3.0.0"), override: image("4.0.0"), want: "4.0.0", source: "instance/x/overrides"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// Declared high first: the order of the input does not matter, priority does.
			profs := []v1alpha1.TiledProfile{P(t, "high", 10, tc.high), P(t, "low", 0, tc.low)}
			o := one(t, C(tc.template, I("x", T(t, tc.override))), profs...)
			g.Expect(o.Spec.Tiled.Image).To(Equal("ghcr.io/bluesky/tiled:" + strings.TrimPrefix(tc.want, "ghcr.io/bluesky/tiled:")))
			g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.image", tc.source))
		})
	}

	t.Run("profiles of equal priority apply by name", func(t *testing.T) {
		g := NewWithT(t)
		// Different fields: no conflict; both apply, and b (later by name) is applied over a.
		o := one(t, C("", I("x", nil)),
			P(t, "b", 0, "tiled: {nodeSelector: {zone: b}, priorityClassName: high}"),
			P(t, "a", 0, "tiled: {nodeSelector: {rack: a}}"))
		g.Expect(o.Spec.Tiled.NodeSelector).To(Equal(map[string]string{"zone": "b", "rack": "a"}))
		g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.nodeSelector.rack", "profile/a@1"))
		g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.nodeSelector.zone", "profile/b@1"))
	})
}

// Maps merge, scalars replace, keyed lists merge by key, atomic lists are replaced whole.
func TestMergeSemantics(t *testing.T) {
	g := NewWithT(t)
	o := one(t,
		C(`tiled:
  env:
  - {name: B, value: template}
  - {name: D, valueFrom: {secretKeyRef: {name: s, key: k}}}
  tolerations: [{key: gpu, operator: Exists}]
  podAnnotations: {t: "1"}
storage:
  readOnlyMounts:
  - {name: raw, mountPath: /raw2}
config: {authentication: {tiled_admins: [x]}, response_bytesize_limit: 1}`,
			I("x", T(t, `tiled: {env: [{name: C, value: override}]}
storage: {data: {accessModes: [ReadWriteMany]}}
config: {response_bytesize_limit: 2}`))),
		P(t, "base", 0, `tiled:
  env:
  - {name: A, value: profile}
  - {name: B, value: profile}
  tolerations: [{key: a, operator: Exists}, {key: b, operator: Exists}]
  podAnnotations: {p: "1"}
storage:
  data: {accessModes: [ReadWriteOnce, ReadOnlyMany]}
  readOnlyMounts:
  - {name: raw, mountPath: /raw, nfs: {server: nfs, path: /raw}}
  - {name: proc, existingClaimName: proc}
config: {authentication: {allow_anonymous_access: false}}`))

	env := map[string]string{}
	for _, e := range o.Spec.Tiled.Env {
		if e.Value != nil {
			env[e.Name] = *e.Value
		} else {
			env[e.Name] = "from:" + e.ValueFrom.SecretKeyRef.Name
		}
	}
	g.Expect(env).To(Equal(map[string]string{"A": "profile", "B": "template", "C": "override", "D": "from:s"}))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=A].value", "profile/base@1"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=B].value", "cluster/template"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=C].value", "instance/x/overrides"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=D].valueFrom.secretKeyRef", "cluster/template"), "an atomic struct is one leaf")

	// Atomic lists: replaced whole.
	g.Expect(o.Spec.Tiled.Tolerations).To(HaveLen(1))
	g.Expect(o.Spec.Tiled.Tolerations[0].Key).To(Equal("gpu"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.tolerations", "cluster/template"))
	g.Expect(o.Spec.Storage.Data.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}))

	// Maps merge.
	g.Expect(o.Spec.Tiled.PodAnnotations).To(Equal(map[string]string{"p": "1", "t": "1"}))

	// Read-only mounts merge by name, field by field.
	g.Expect(o.Spec.Storage.ReadOnlyMounts).To(HaveLen(2))
	byName := map[string]v1alpha1.ReadOnlyMount{}
	for _, m := range o.Spec.Storage.ReadOnlyMounts {
		byName[m.Name] = m
	}
	g.Expect(byName["raw"].MountPath).To(Equal("/raw2"))
	g.Expect(byName["raw"].NFS.Path).To(Equal("/raw"))
	g.Expect(byName["proc"].ExistingClaimName).To(Equal("proc"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.storage.readOnlyMounts[name=raw].mountPath", "cluster/template"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.storage.readOnlyMounts[name=raw].nfs.server", "profile/base@1"))

	// The free-form config merges maps too.
	g.Expect(string(o.Spec.Config.Raw)).To(Equal(`{"authentication":{"allow_anonymous_access":false,"tiled_admins":["x"]},"response_bytesize_limit":2}`))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.config.response_bytesize_limit", "instance/x/overrides"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.config.authentication.allow_anonymous_access", "profile/base@1"))
}

// A higher layer choosing one member of an exclusive group removes the others inherited from below.
func TestUnions(t *testing.T) {
	cases := []struct {
		name, profile, override string
		check                   func(g Gomega, o *v1alpha1.TiledInstance)
	}{
		{
			name:     "external database replaces the managed one",
			profile:  "database: {managed: {image: 'postgres:15', size: 5Gi}}",
			override: "database: {external: {uriSecretRef: {name: db, key: uri}}}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Database.Managed).To(BeNil())
				g.Expect(o.Spec.Database.External.URISecretRef.Name).To(Equal("db"))
				g.Expect(o.Provenance).NotTo(HaveKey(HavePrefix("spec.database.managed")))
			},
		},
		{
			name:     "managed database replaces an external one",
			profile:  "database: {external: {uriSecretRef: {name: db}}}",
			override: "database: {managed: {size: 1Gi}}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Database.External).To(BeNil())
				// Choosing the managed database again restores its defaults from lower layers.
				g.Expect(o.Spec.Database.Managed.Size).To(Equal("1Gi"))
				g.Expect(o.Spec.Database.Managed.Image).To(Equal(PostgresImage))
				g.Expect(o.Provenance).To(HaveKeyWithValue("spec.database.managed.image", "default"))
			},
		},
		{
			name:     "existing claim replaces NFS data",
			profile:  "storage: {data: {size: 1Ti, nfs: {server: nfs, path: /data}}}",
			override: "storage: {data: {existingClaimName: mine}}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Storage.Data.NFS).To(BeNil())
				g.Expect(o.Spec.Storage.Data.ExistingClaimName).To(Equal("mine"))
				g.Expect(o.Spec.Storage.Data.Size).To(Equal("1Ti"))
			},
		},
		{
			name:     "NFS replaces a read-only mount's existing claim, per mount",
			profile:  "{storage: {readOnlyMounts: [{name: a, existingClaimName: a}, {name: b, existingClaimName: b}]}, allowedNFS: [{server: nfs, pathPrefix: /a}]}",
			override: "storage: {readOnlyMounts: [{name: a, nfs: {server: nfs, path: /a}}]}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				m := o.Spec.Storage.ReadOnlyMounts
				g.Expect(m).To(HaveLen(2))
				for _, x := range m {
					if x.Name == "a" {
						g.Expect(x.ExistingClaimName).To(BeEmpty())
						g.Expect(x.NFS.Path).To(Equal("/a"))
					} else {
						g.Expect(x.ExistingClaimName).To(Equal("b"))
					}
				}
			},
		},
		{
			name:     "OIDC replaces the single-user API key",
			profile:  "auth: {allowAnonymousAccess: true}",
			override: "auth: {oidc: {providers: [{name: orcid, clientID: x, clientSecretRef: {name: orcid}, wellKnownURI: 'https://orcid.org/.well-known/openid-configuration'}]}}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Auth.SingleUserAPIKey).To(BeNil())
				g.Expect(o.Spec.Auth.OIDC.Providers).To(HaveLen(1))
				g.Expect(*o.Spec.Auth.AllowAnonymousAccess).To(BeTrue())
			},
		},
		{
			name:     "a literal path beats a lower pathExpression",
			profile:  "{storage: {data: {nfs: {server: nfs, pathExpression: \"'/expr/' + instance.name\"}}}, allowedNFS: [{server: nfs, pathPrefix: /literal}]}",
			override: "storage: {data: {nfs: {path: /literal}}}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Storage.Data.NFS.Path).To(Equal("/literal"))
				g.Expect(o.Spec.Storage.Data.NFS.PathExpression).To(BeEmpty())
				g.Expect(o.Provenance).To(HaveKeyWithValue("spec.storage.data.nfs.path", "instance/x/overrides"))
			},
		},
		{
			name:     "a pathExpression beats a lower literal path",
			profile:  "{storage: {data: {nfs: {server: nfs, path: /literal}}}, allowedNFS: [{server: nfs, pathPrefix: /expr}]}",
			override: "storage: {data: {nfs: {pathExpression: \"'/expr/' + instance.name\"}}}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Storage.Data.NFS.Path).To(Equal("/expr/x"))
				g.Expect(o.Provenance).To(HaveKeyWithValue("spec.storage.data.nfs.path", "instance/x/overrides (expression)"))
				g.Expect(o.Provenance).To(HaveKeyWithValue("spec.storage.data.nfs.server", "profile/p@1"))
			},
		},
		{
			name:     "env valueFrom replaces a value and a valueExpression",
			profile:  "tiled: {env: [{name: A, value: a}, {name: B, valueExpression: 'instance.name'}]}",
			override: "tiled: {env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: a}}}, {name: B, valueFrom: {secretKeyRef: {name: s, key: b}}}]}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				for _, e := range o.Spec.Tiled.Env {
					g.Expect(e.Value).To(BeNil(), e.Name)
					g.Expect(e.ValueExpression).To(BeNil(), e.Name)
					g.Expect(e.ValueFrom.SecretKeyRef.Key).To(Equal(strings.ToLower(e.Name)))
				}
			},
		},
		{
			name:     "env value replaces valueFrom",
			profile:  "tiled: {env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: a}}}]}",
			override: "tiled: {env: [{name: A, valueExpression: \"'v-' + instance.name\"}]}",
			check: func(g Gomega, o *v1alpha1.TiledInstance) {
				g.Expect(o.Spec.Tiled.Env).To(HaveLen(1))
				g.Expect(o.Spec.Tiled.Env[0].ValueFrom).To(BeNil())
				g.Expect(*o.Spec.Tiled.Env[0].Value).To(Equal("v-x"))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := one(t, C("", I("x", T(t, tc.override))), P(t, "p", 0, tc.profile))
			tc.check(g, o)
			// The result passes the CRD's exclusivity rules, and every leaf has a source. (Expanded
			// again with the profile, whose allowances its NFS exports need.)
			standalone := o.DeepCopy()
			standalone.Spec.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}}
			again, err := ExpandInstance(standalone, []v1alpha1.TiledProfile{P(t, "p", 0, tc.profile)}, DefaultBuiltins())
			g.Expect(err).NotTo(HaveOccurred())
			again.Spec.ProfileSelector = nil
			g.Expect(again.Spec).To(Equal(o.Spec))
			g.Expect(o.Provenance).To(HaveLen(len(leaves(t, o))))
		})
	}
}

// spec.backup.onCatalogLost flows as any field: a profile sets it for a facility, an instance's
// overrides set it for one beamline, and provenance names who did.
func TestOnCatalogLostFromProfiles(t *testing.T) {
	g := NewWithT(t)
	profile := P(t, "facility", 0, "backup: {claim: {claimName: backups}, onCatalogLost: RestoreLatest}")
	o := one(t, C("", I("x", nil)), profile)
	g.Expect(o.Spec.Backup.OnCatalogLost).To(Equal(v1alpha1.CatalogLostRestoreLatest))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.backup.onCatalogLost", "profile/facility@1"))
	o = one(t, C("", I("x", T(t, "backup: {onCatalogLost: Stall}"))), profile)
	g.Expect(o.Spec.Backup.OnCatalogLost).To(Equal(v1alpha1.CatalogLostStall))
	g.Expect(o.Spec.Backup.Claim.ClaimName).To(Equal("backups"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.backup.onCatalogLost", "instance/x/overrides"))
}

// spec.maintenance layers as documented (docs/maintenance.md): windows replaced whole by a higher
// layer, exclusions merged by name, provenance for each.
func TestMaintenanceLayers(t *testing.T) {
	g := NewWithT(t)
	o := one(t, C("", I("x", T(t, `maintenance:
  windows: [{schedule: "0 22 * * *", duration: 2h, timeZone: America/New_York}]
  exclusions: [{name: user-week, start: "2027-02-01T00:00:00Z", end: "2027-02-08T00:00:00Z"}]`))),
		P(t, "calendar", 0, `maintenance:
  windows: [{schedule: "0 8 * * 2", duration: 8h, timeZone: America/New_York}, {schedule: "0 8 * * 4", duration: 4h}]
  exclusions: [{name: run-1, start: "2027-01-12T08:00:00-05:00", end: "2027-04-30T08:00:00-04:00"}]`))
	m := o.Spec.Maintenance
	g.Expect(m).NotTo(BeNil())
	g.Expect(m.Windows).To(HaveLen(1), "windows are replaced whole")
	g.Expect(m.Windows[0].Schedule).To(Equal("0 22 * * *"))
	g.Expect(m.Exclusions).To(HaveLen(2), "exclusions merge by name")
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.maintenance.windows", "instance/x/overrides"))
	g.Expect(o.Provenance).To(HaveKeyWithValue(HavePrefix("spec.maintenance.exclusions[name=run-1]"), "profile/calendar@1"))
	g.Expect(o.Provenance).To(HaveKeyWithValue(HavePrefix("spec.maintenance.exclusions[name=user-week]"), "instance/x/overrides"))
}

// spec.maintenance.approval is a scalar like any other: set in a profile, overridden by a beamline,
// with provenance (docs/maintenance.md, "Approvals").
func TestMaintenanceApprovalLayers(t *testing.T) {
	g := NewWithT(t)
	profile := P(t, "calendar", 0, `maintenance:
  approval: Manual
  exclusions: [{name: run-1, start: "2027-01-12T08:00:00-05:00", end: "2027-04-30T08:00:00-04:00"}]`)
	o := one(t, C("", I("x", nil)), profile)
	g.Expect(o.Spec.Maintenance.Approval).To(Equal("Manual"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.maintenance.approval", "profile/calendar@1"))
	o = one(t, C("", I("x", T(t, `maintenance: {approval: Automatic}`))), profile)
	g.Expect(o.Spec.Maintenance.Approval).To(Equal("Automatic"))
	g.Expect(o.Spec.Maintenance.Exclusions).To(HaveLen(1), "the profile's exclusions stay")
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.maintenance.approval", "instance/x/overrides"))
}

// spec.notifications flows from a profile to its instances with provenance; a beamline overrides
// one field (minSeverity) and keeps the profile's URL and Secret (docs/maintenance.md,
// "Notifications").
func TestNotificationsLayers(t *testing.T) {
	g := NewWithT(t)
	profile := P(t, "ops", 0, `notifications:
  webhook: {url: "https://hooks.example.org/tiled", secretRef: {name: tiled-hooks, key: hmac}, minSeverity: Warning}`)
	o := one(t, C("", I("x", nil)), profile)
	w := o.Spec.Notifications.Webhook
	g.Expect(w.URL).To(Equal("https://hooks.example.org/tiled"))
	g.Expect(w.SecretRef.Name).To(Equal("tiled-hooks"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.notifications.webhook.url", "profile/ops@1"))
	o = one(t, C("", I("x", T(t, `notifications: {webhook: {minSeverity: Error}}`))), profile)
	w = o.Spec.Notifications.Webhook
	g.Expect(w.MinSeverity).To(Equal("Error"))
	g.Expect(w.URL).To(Equal("https://hooks.example.org/tiled"), "the profile's URL stays")
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.notifications.webhook.minSeverity", "instance/x/overrides"))
}
