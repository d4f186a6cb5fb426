package expansion

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// one expands a cluster expected to have one instance and returns it.
func one(t *testing.T, c *v1alpha1.TiledCluster, p ...v1alpha1.TiledProfile) *v1alpha1.TiledInstance {
	t.Helper()
	res, err := Expand(c, p, DefaultBuiltins())
	if err != nil {
		t.Fatalf("expand: %v", err)
	}
	if len(res.Instances) != 1 {
		t.Fatalf("want 1 instance, got %d", len(res.Instances))
	}
	return res.Instances[0].Object
}

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

// Expressions see instance (name, labels), cluster (name, labels) and namespace.
func TestExpressionVariables(t *testing.T) {
	g := NewWithT(t)
	c := C("", v1alpha1.ClusterInstance{Name: "chx", Labels: map[string]string{"sector": "11"}})
	o := one(t, c, P(t, "p", 0, `tiled:
  env:
  - {name: ALL, valueExpression: "instance.namespace + '/' + cluster.namespace + '/' + cluster.name + '/' + cluster.labels['site'] + '/' + instance.name + '/' + instance.labels['sector'] + '/' + instance.labels['tiled.blueskyproject.io/cluster']"}
  - {name: UPPER, valueExpression: "instance.name.upperAscii()"}`))
	g.Expect(*o.Spec.Tiled.Env[0].Value).To(Equal("beamlines/beamlines/c/lab/chx/11/c"))
	g.Expect(*o.Spec.Tiled.Env[1].Value).To(Equal("CHX"))
	g.Expect(o.Provenance).To(HaveKeyWithValue("spec.tiled.env[name=ALL].value", "profile/p@1 (expression)"))
	g.Expect(o.Labels).To(HaveKeyWithValue("sector", "11"))
}

// Two profiles of equal priority setting one field differently conflict; equal values, or
// different priorities, do not.
func TestConflicts(t *testing.T) {
	cases := []struct {
		name      string
		a, b      string
		prioB     int32
		field     string
		conflicts bool
	}{
		{name: "scalar", a: "tiled: {image: 'x:1'}", b: "tiled: {image: 'x:2'}", field: "spec.tiled.image", conflicts: true},
		{name: "equal values", a: "tiled: {image: 'x:1'}", b: "tiled: {image: 'x:1'}"},
		{name: "different priorities", a: "tiled: {image: 'x:1'}", b: "tiled: {image: 'x:2'}", prioB: 1},
		{name: "keyed list item", a: "tiled: {env: [{name: A, value: '1'}]}", b: "tiled: {env: [{name: A, value: '2'}]}", field: "spec.tiled.env[name=A].value", conflicts: true},
		{name: "keyed list, other keys", a: "tiled: {env: [{name: A, value: '1'}]}", b: "tiled: {env: [{name: B, value: '2'}]}"},
		{name: "mount, disjoint fields", a: "storage: {readOnlyMounts: [{name: m, mountPath: /m}]}", b: "storage: {readOnlyMounts: [{name: m, existingClaimName: c}]}"},
		{name: "atomic list", a: "storage: {data: {accessModes: [ReadWriteOnce]}}", b: "storage: {data: {accessModes: [ReadWriteMany]}}", field: "spec.storage.data.accessModes", conflicts: true},
		{name: "map keys merge", a: "tiled: {podLabels: {a: '1'}}", b: "tiled: {podLabels: {b: '1'}}"},
		{name: "exclusive group", a: "database: {managed: {size: 1Gi}}", b: "database: {external: {uriSecretRef: {name: s}}}", field: "spec.database", conflicts: true},
		{name: "expressions with different values", a: "expose: {ingress: {hostExpression: \"instance.name + '.a.org'\"}}", b: "expose: {ingress: {host: x.b.org}}", field: "spec.expose.ingress.host", conflicts: true},
		{name: "expressions with equal values", a: "expose: {ingress: {hostExpression: \"instance.name + '.a.org'\"}}", b: "expose: {ingress: {host: x.a.org}}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res, err := Expand(C("", I("x", nil)), []v1alpha1.TiledProfile{P(t, "b", tc.prioB, tc.b), P(t, "a", 0, tc.a)}, DefaultBuiltins())
			if !tc.conflicts {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(res).To(BeNil())
			var ce *ConflictError
			g.Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
			g.Expect(ce.Profiles).To(Equal([2]string{"profile/a@1", "profile/b@1"}))
			g.Expect(ce.Field).To(Equal(tc.field))
			g.Expect(ce.Instance).To(Equal("x"))
			g.Expect(err.Error()).To(And(ContainSubstring("profile/a@1"), ContainSubstring("profile/b@1"), ContainSubstring(tc.field)))
		})
	}
}

// Bad input: each a typed error naming the object, the field and the reason, and no result.
func TestBadInput(t *testing.T) {
	ok := P(t, "ok", 0, "tiled: {replicas: 1}")
	withExpr := func(expr string) []v1alpha1.TiledProfile {
		return []v1alpha1.TiledProfile{ok, P(t, "expr", 1, `storage: {data: {nfs: {server: nfs, pathExpression: "`+expr+`"}}}`)}
	}
	exprErr := func(reason ExpressionReason, expr string) func(Gomega, error) {
		return func(g Gomega, err error) {
			var xe *ExpressionError
			g.Expect(errors.As(err, &xe)).To(BeTrue(), "%v", err)
			g.Expect(xe.Reason).To(Equal(reason))
			g.Expect(xe.Layer).To(Equal("profile/expr@1"))
			g.Expect(xe.Field).To(Equal("spec.storage.data.nfs.pathExpression"))
			g.Expect(xe.Expression).To(Equal(expr))
			g.Expect(err.Error()).To(And(ContainSubstring("profile/expr@1"), ContainSubstring("pathExpression"), ContainSubstring(expr)))
		}
	}
	costly := "'/' + string([0,1,2,3,4,5,6,7,8,9].map(a, [0,1,2,3,4,5,6,7,8,9].map(b, [0,1,2,3,4,5,6,7,8,9].map(c, [0,1,2,3,4,5,6,7,8,9].map(d, [0,1,2,3,4,5,6,7,8,9].map(e, a+b+c+d+e))))).size())"
	cases := []struct {
		name     string
		cluster  *v1alpha1.TiledCluster
		profiles []v1alpha1.TiledProfile
		check    func(Gomega, error)
	}{
		{
			name:     "conflicting profiles",
			cluster:  C("", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{P(t, "a", 0, "tiled: {replicas: 2}"), P(t, "b", 0, "tiled: {replicas: 3}")},
			check: func(g Gomega, err error) {
				var ce *ConflictError
				g.Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
				g.Expect(ce.Field).To(Equal("spec.tiled.replicas"))
				g.Expect(ce.Values).To(Equal([2]string{"2", "3"}))
			},
		},
		{
			name: "selector matching nothing",
			cluster: func() *v1alpha1.TiledCluster {
				c := C("", I("x", nil))
				c.Spec.ProfileSelector.MatchLabels["facility"] = "nope"
				return c
			}(),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ne *NoProfilesError
				g.Expect(errors.As(err, &ne)).To(BeTrue(), "%v", err)
				g.Expect(ne.Object).To(Equal("cluster/c"))
				g.Expect(ne.Field).To(Equal("spec.profileSelector"))
				g.Expect(ne.Selector).To(Equal("facility=nope"))
			},
		},
		{
			name: "instance selector matching nothing",
			cluster: C("", v1alpha1.ClusterInstance{Name: "x",
				ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"family": "nope"}}}),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ne *NoProfilesError
				g.Expect(errors.As(err, &ne)).To(BeTrue(), "%v", err)
				g.Expect(ne.Field).To(Equal("spec.instances[name=x].profileSelector"))
			},
		},
		{
			name:     "nil selector",
			cluster:  func() *v1alpha1.TiledCluster { c := C("", I("x", nil)); c.Spec.ProfileSelector = nil; return c }(),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var se *SelectorError
				g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
				g.Expect(se.Field).To(Equal("spec.profileSelector"))
			},
		},
		{
			name: "invalid selector",
			cluster: func() *v1alpha1.TiledCluster {
				c := C("", I("x", nil))
				c.Spec.ProfileSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
				return c
			}(),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var se *SelectorError
				g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
				g.Expect(se.Reason).To(ContainSubstring("Near"))
			},
		},
		{name: "expression that does not compile", cluster: C("", I("x", nil)), profiles: withExpr("'/data/' + instance.nmae"),
			check: exprErr(ExpressionCompile, "'/data/' + instance.nmae")},
		{name: "expression with a syntax error", cluster: C("", I("x", nil)), profiles: withExpr("'/data/' +"),
			check: exprErr(ExpressionCompile, "'/data/' +")},
		{name: "expression of the wrong type", cluster: C("", I("x", nil)), profiles: withExpr("size(instance.name) + 1"),
			check: exprErr(ExpressionType, "size(instance.name) + 1")},
		{name: "expression exceeding its cost", cluster: C("", I("x", nil)), profiles: withExpr(costly),
			check: exprErr(ExpressionCost, costly)},
		{
			name: "expression failing at evaluation", cluster: C("", I("x", nil)), profiles: withExpr("'/data/' + instance.labels['missing']"),
			check: func(g Gomega, err error) {
				exprErr(ExpressionEval, "'/data/' + instance.labels['missing']")(g, err)
				var xe *ExpressionError
				errors.As(err, &xe)
				g.Expect(xe.Instance).To(Equal("x"))
				g.Expect(err.Error()).To(ContainSubstring("missing"))
			},
		},
		{
			name:     "expression in an override",
			cluster:  C("", I("x", nil), I("y", T(t, "expose: {ingress: {hostExpression: \"instance.name + 1\"}}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var xe *ExpressionError
				g.Expect(errors.As(err, &xe)).To(BeTrue(), "%v", err)
				g.Expect(xe.Layer).To(Equal("instance/y/overrides"))
				g.Expect(xe.Field).To(Equal("spec.expose.ingress.hostExpression"))
				g.Expect(xe.Reason).To(Equal(ExpressionCompile))
			},
		},
		{
			name:     "path and pathExpression in one layer",
			cluster:  C("storage: {data: {nfs: {path: /a, pathExpression: \"'/b'\"}}}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Layer).To(Equal("cluster/template"))
				g.Expect(ie.Field).To(Equal("spec.storage.data.nfs"))
				g.Expect(ie.Reason).To(ContainSubstring("mutually exclusive"))
			},
		},
		{
			name:     "duplicate env names",
			cluster:  C("", I("x", T(t, "tiled: {env: [{name: A, value: '1'}, {name: A, value: '2'}]}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Layer).To(Equal("instance/x/overrides"))
				g.Expect(ie.Field).To(Equal("spec.tiled.env"))
			},
		},
		{
			name:     "duplicate instance names",
			cluster:  C("", I("x", nil), I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.instances[name=x]"))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res, err := Expand(tc.cluster, tc.profiles, DefaultBuiltins())
			g.Expect(err).To(HaveOccurred())
			g.Expect(res).To(BeNil())
			t.Log(err)
			tc.check(g, err)
		})
	}
}

// An override of a field that does not exist cannot be written in Go, so it is caught where
// objects are read: Decode checks them against the CRD's schema.
func TestDecodeUnknownFields(t *testing.T) {
	cases := []struct {
		name, doc            string
		object, layer, field string
	}{
		{
			name: "override",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: nsls2}
spec:
  profileSelector: {}
  instances:
  - {name: chx, overrides: {storage: {data: {sise: 2Ti}}}}`,
			object: "TiledCluster/nsls2", layer: "instance/chx/overrides", field: "spec.storage.data.sise",
		},
		{
			name: "keyed list item of the template",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: nsls2}
spec:
  profileSelector: {}
  template: {tiled: {env: [{name: A, vaule: x}]}}`,
			object: "TiledCluster/nsls2", layer: "cluster/template", field: "spec.tiled.env[name=A].vaule",
		},
		{
			name: "profile",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata: {name: p, generation: 4}
spec: {databse: {}}`,
			object: "TiledProfile/p", layer: "profile/p@4", field: "spec.databse",
		},
		{
			name: "outside the layers",
			doc: `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: nsls2}
spec: {profileSelecter: {}}`,
			object: "TiledCluster/nsls2", field: "spec.profileSelecter",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, err := Decode([]byte(tc.doc))
			g.Expect(obj).To(BeNil())
			var ue *UnknownFieldError
			g.Expect(errors.As(err, &ue)).To(BeTrue(), "%v", err)
			g.Expect(*ue).To(Equal(UnknownFieldError{Object: tc.object, Layer: tc.layer, Field: tc.field}))
			g.Expect(err.Error()).To(ContainSubstring(tc.field))
		})
	}

	t.Run("wrong kind", func(t *testing.T) {
		g := NewWithT(t)
		_, err := Decode([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
		g.Expect(err).To(MatchError(ContainSubstring("not a tiled.blueskyproject.io/v1alpha1 object")))
	})
}

func TestExpandInstance(t *testing.T) {
	g := NewWithT(t)
	in := &v1alpha1.TiledInstance{}
	in.Name, in.Namespace = "demo", testNS
	in.Spec.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}}
	in.Spec.InstanceTemplate = *T(t, "storage: {data: {size: 3Gi}}\nexpose: {ingress: {hostExpression: \"instance.name + '.example.org'\"}}")
	out, err := ExpandInstance(in, []v1alpha1.TiledProfile{P(t, "p", 0, "storage: {data: {size: 1Gi, storageClassName: fast}}")}, DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Spec.Storage.Data.Size).To(Equal("3Gi"))
	g.Expect(out.Spec.Expose.Ingress.Host).To(Equal("demo.example.org"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.storage.data.size", "instance"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.expose.ingress.host", "instance (expression)"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.storage.data.storageClassName", "profile/p@1"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.profileSelector", "instance"), "a label selector is atomic")
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.tiled.image", "default"))
	g.Expect(in.Spec.Storage.Data.StorageClassName).To(BeNil(), "the input is not modified")

	// Without a selector: built-in defaults and its own fields only.
	in.Spec.ProfileSelector = nil
	out, err = ExpandInstance(in, []v1alpha1.TiledProfile{P(t, "p", 0, "storage: {data: {storageClassName: fast}}")}, DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Spec.Storage.Data.StorageClassName).To(BeNil())
}

func TestWhy(t *testing.T) {
	g := NewWithT(t)
	o := one(t, C("", I("x", nil)), P(t, "p", 0, "tiled: {env: [{name: A, value: a}]}"))
	got, err := Why(o, ".spec.tiled.env")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]FieldSource{
		{Path: "spec.tiled.env[name=A].name", Value: `"A"`, Source: "profile/p@1"},
		{Path: "spec.tiled.env[name=A].value", Value: `"a"`, Source: "profile/p@1"},
	}))
	short, err := Why(o, "tiled.env")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(short).To(Equal(got), "spec. may be left out")
	_, err = Why(o, "spec.tiled.nothing")
	g.Expect(err).To(MatchError(ContainSubstring("does not set spec.tiled.nothing")))
	// A prefix that is not a whole field name does not match.
	_, err = Why(o, "spec.tiled.im")
	g.Expect(err).To(HaveOccurred())
}
