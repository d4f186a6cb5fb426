package expansion

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

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
			name:     "a backup schedule that is not cron",
			cluster:  C("", I("x", T(t, "backup: {schedule: 'every night', claim: {claimName: b}}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Layer).To(Equal("instance/x/overrides"))
				g.Expect(ie.Field).To(Equal("spec.backup.schedule"))
				g.Expect(ie.Reason).To(ContainSubstring("must be a cron schedule"))
			},
		},
		{
			name:     "a backup schedule with its time zone in it",
			cluster:  C("backup: {schedule: 'CRON_TZ=UTC 0 2 * * *', claim: {claimName: b}}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.backup.schedule"))
				g.Expect(ie.Reason).To(ContainSubstring("spec.backup.timeZone"))
			},
		},
		{
			name:     "a maintenance window that is not cron",
			cluster:  C("", I("x", T(t, "maintenance: {windows: [{schedule: '0 8 * * 2', duration: 4h}, {schedule: 'tuesdays', duration: 4h}]}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Layer).To(Equal("instance/x/overrides"))
				g.Expect(ie.Field).To(Equal("spec.maintenance.windows[1].schedule"))
				g.Expect(ie.Reason).To(ContainSubstring("must be a cron schedule"))
			},
		},
		{
			name:     "a maintenance window in an unknown time zone",
			cluster:  C("maintenance: {windows: [{schedule: '0 8 * * 2', duration: 4h, timeZone: America/Gotham}]}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.maintenance.windows[0].timeZone"))
				g.Expect(ie.Reason).To(ContainSubstring(`unknown time zone "America/Gotham"`))
			},
		},
		{
			name:     "a maintenance window of no duration",
			cluster:  C("maintenance: {windows: [{schedule: '@weekly', duration: 30s}]}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.maintenance.windows[0].duration"))
				g.Expect(ie.Reason).To(ContainSubstring("at least one minute"))
			},
		},
		{
			name:     "a notification webhook that is not http(s)",
			cluster:  C("notifications: {webhook: {url: 'ftp://hooks.example.org/x?token=SECRET'}}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.notifications.webhook.url"))
				g.Expect(ie.Reason).To(ContainSubstring("http:// or https://"))
				g.Expect(err.Error()).NotTo(ContainSubstring("SECRET"), "a webhook URL may carry a token")
			},
		},
		{
			name:     "a notification webhook without a URL once merged",
			cluster:  C("notifications: {webhook: {minSeverity: Error}}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.notifications.webhook.url"))
			},
		},
		{
			name:     "a maintenance exclusion that ends before it starts",
			cluster:  C("", I("x", T(t, "maintenance: {exclusions: [{name: run-1, start: '2026-12-10T00:00:00Z', end: '2026-12-09T00:00:00Z'}]}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.maintenance.exclusions[name=run-1].end"))
				g.Expect(ie.Reason).To(ContainSubstring("must be after start"))
			},
		},
		{
			name:     "an autoscaler above one pod on a ReadWriteOnce data claim",
			cluster:  C("", I("x", T(t, "tiled: {autoscaling: {enabled: true, maxReplicas: 4}}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.tiled.autoscaling.maxReplicas"))
				g.Expect(ie.Reason).To(ContainSubstring("4 replicas share one data claim with access modes [ReadWriteOnce]"))
			},
		},
		{
			name: "Redis Sentinel with a Tiled that lacks it",
			cluster: C(`tiled: {image: "ghcr.io/bluesky/tiled:0.2.14"}
streaming: {external: {sentinel: {addresses: ["s0:26379"], serviceName: tiled}}}`, I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.streaming.external.sentinel"))
				g.Expect(ie.Reason).To(ContainSubstring("Tiled 0.2.14 (image ghcr.io/bluesky/tiled:0.2.14) cannot use Redis Sentinel"))
			},
		},
		{
			name:     "a NetworkPolicy peer with nothing in it",
			cluster:  C("", I("x", T(t, "networkPolicy: {tiledFrom: [{namespaceSelector: {}}, {}]}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Layer).To(Equal("instance/x/overrides"))
				g.Expect(ie.Field).To(Equal("spec.networkPolicy.tiledFrom[1]"))
				g.Expect(ie.Reason).To(ContainSubstring("sets podSelector, namespaceSelector or ipBlock"))
			},
		},
		{
			name:     "an ipBlock beside a selector",
			cluster:  C("networkPolicy: {tiledFrom: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}", I("x", nil)),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.networkPolicy.tiledFrom[0].ipBlock"))
				g.Expect(ie.Reason).To(ContainSubstring("may not be combined"))
			},
		},
		{
			name:     "an egress exception outside its CIDR",
			cluster:  C("", I("x", T(t, "networkPolicy: {egress: {restricted: true, allow: [{to: [{ipBlock: {cidr: 10.1.0.0/16, except: [10.2.0.0/24]}}]}]}}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.networkPolicy.egress.allow[0].to[0].ipBlock.except[0]"))
				g.Expect(ie.Reason).To(ContainSubstring("within the cidr 10.1.0.0/16"))
			},
		},
		{
			name:     "an egress port range below its port",
			cluster:  C("", I("x", T(t, "networkPolicy: {egress: {restricted: true, allow: [{ports: [{port: 5432, endPort: 80}]}]}}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(Equal("spec.networkPolicy.egress.allow[0].ports[0].endPort"))
				g.Expect(ie.Reason).To(ContainSubstring("must not be below port 5432"))
			},
		},
		{
			name:     "a bad namespace selector",
			cluster:  C("", I("x", T(t, "networkPolicy: {tiledFrom: [{namespaceSelector: {matchLabels: {'bad key!': x}}}]}"))),
			profiles: []v1alpha1.TiledProfile{ok},
			check: func(g Gomega, err error) {
				var ie *InvalidFieldError
				g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
				g.Expect(ie.Field).To(ContainSubstring("spec.networkPolicy.tiledFrom[0].namespaceSelector.matchLabels"))
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
