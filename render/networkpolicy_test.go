package render

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// typedPolicy is the NetworkPolicy an apply configuration describes.
func typedPolicy(g Gomega, p *networkingv1ac.NetworkPolicyApplyConfiguration) *networkingv1.NetworkPolicy {
	b, err := json.Marshal(p)
	g.Expect(err).NotTo(HaveOccurred())
	var out networkingv1.NetworkPolicy
	g.Expect(json.Unmarshal(b, &out)).To(Succeed())
	return &out
}

func mustSelector(g Gomega, s *metav1.LabelSelector) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(s)
	g.Expect(err).NotTo(HaveOccurred())
	return sel
}

// admits reports whether rule's sources include a pod of the policy's namespace with podLabels.
func admits(g Gomega, rule networkingv1.NetworkPolicyIngressRule, podLabels map[string]string) bool {
	for _, f := range rule.From {
		if f.PodSelector != nil && f.NamespaceSelector == nil && f.IPBlock == nil && mustSelector(g, f.PodSelector).Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

// TestNetworkPoliciesSelectTheRenderedPods: each policy selects the pods of the workload it guards,
// by the labels those pods are rendered with, and the database's admits exactly the instance's Tiled
// pods and its upgrade and backup Jobs' pods, the cache's exactly its Tiled pods — not the other
// workloads' pods, nor another instance's.
func TestNetworkPoliciesSelectTheRenderedPods(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	in := Inputs{SecretData: secretData}
	o, err := Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	job, err := LifecycleJob(ti, lifecycleIn(in, true, &Step{Kind: StepMigrate, Image: newImage}))
	g.Expect(err).NotTo(HaveOccurred())
	cron, err := BackupCronJob(withBackup(singleUserManaged(), claimBackup), in)
	g.Expect(err).NotTo(HaveOccurred())
	other, err := Render(baseInstance("other"), in)
	g.Expect(err).NotTo(HaveOccurred())

	pods := map[string]map[string]string{
		"tiled":        o.StatefulSet.Spec.Template.Labels,
		"postgres":     o.Postgres.Spec.Template.Labels,
		"cache":        o.Cache.Spec.Template.Labels,
		"migrate job":  job.Spec.Template.Labels,
		"backup job":   cron.Spec.JobTemplate.Spec.Template.Labels,
		"other tiled":  other.StatefulSet.Spec.Template.Labels,
		"other backup": other.Postgres.Spec.Template.Labels,
		"foreign":      {"app": "notebook"},
	}
	cases := []struct {
		policy  *networkingv1ac.NetworkPolicyApplyConfiguration
		name    string
		selects string
		port    int32
		admits  []string
	}{
		{o.NetworkPolicies.Postgres, "nsls2-csx-postgres", "postgres", PostgresPort, []string{"tiled", "migrate job", "backup job"}},
		{o.NetworkPolicies.Cache, "nsls2-csx-cache", "cache", CachePort, []string{"tiled"}},
	}
	for _, tc := range cases {
		g.Expect(tc.policy).NotTo(BeNil(), tc.name)
		p := typedPolicy(g, tc.policy)
		g.Expect(p.Name).To(Equal(tc.name))
		g.Expect(p.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
		sel := mustSelector(g, &p.Spec.PodSelector)
		for pod, l := range pods {
			g.Expect(sel.Matches(labels.Set(l))).To(Equal(pod == tc.selects), "%s selects the %s pod", tc.name, pod)
		}
		g.Expect(p.Spec.Ingress).To(HaveLen(1))
		r := p.Spec.Ingress[0]
		g.Expect(r.Ports).To(HaveLen(1))
		g.Expect(r.Ports[0].Port.IntVal).To(Equal(tc.port))
		for pod, l := range pods {
			want := false
			for _, a := range tc.admits {
				want = want || a == pod
			}
			g.Expect(admits(g, r, l)).To(Equal(want), "%s admits the %s pod", tc.name, pod)
		}
	}

	// Tiled: port 8000 from every pod of the namespace and from the ingress controller's namespace.
	p := typedPolicy(g, o.NetworkPolicies.Tiled)
	g.Expect(p.Name).To(Equal("nsls2-csx"))
	sel := mustSelector(g, &p.Spec.PodSelector)
	for pod, l := range pods {
		g.Expect(sel.Matches(labels.Set(l))).To(Equal(pod == "tiled"), "the Tiled policy selects the %s pod", pod)
	}
	g.Expect(p.Spec.Ingress).To(HaveLen(1), "no metrics rule without monitoring")
	g.Expect(admits(g, p.Spec.Ingress[0], pods["foreign"])).To(BeTrue(), "any pod of the namespace reaches Tiled")
	g.Expect(p.Spec.Ingress[0].From).To(ContainElement(networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: "ingress-nginx"}}}))
	g.Expect(o.NetworkPolicies.Egress).To(BeNil(), "egress is open by default")

	// The egress policy, when restricted, selects every pod of the instance and no other's.
	ti.Spec.NetworkPolicy.Egress.Restricted = ptr.To(true)
	o, err = Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	e := typedPolicy(g, o.NetworkPolicies.Egress)
	g.Expect(e.Name).To(Equal("nsls2-csx-egress"))
	g.Expect(e.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}))
	// DNS first: the egress.dnsPorts (as the DNS pods see them), UDP and TCP, to any address.
	dnsPorts := func(e *networkingv1.NetworkPolicy) []string {
		g.Expect(e.Spec.Egress[0].To).To(BeEmpty(), "DNS to any address")
		var out []string
		for _, p := range e.Spec.Egress[0].Ports {
			out = append(out, string(*p.Protocol)+"/"+p.Port.String())
		}
		return out
	}
	g.Expect(dnsPorts(e)).To(Equal([]string{"UDP/53", "TCP/53"}))
	ti.Spec.NetworkPolicy.Egress.DNSPorts = []int32{53, 1053}
	o2, err := Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dnsPorts(typedPolicy(g, o2.NetworkPolicies.Egress))).To(Equal([]string{"UDP/53", "TCP/53", "UDP/1053", "TCP/1053"}))
	sel = mustSelector(g, &e.Spec.PodSelector)
	for pod, l := range pods {
		mine := pod != "other tiled" && pod != "other backup" && pod != "foreign"
		g.Expect(sel.Matches(labels.Set(l))).To(Equal(mine), "the egress policy selects the %s pod", pod)
	}
}

// TestNetworkPoliciesFollowTheSpec: which policies and rules each setting renders.
func TestNetworkPoliciesFollowTheSpec(t *testing.T) {
	type want struct{ tiled, postgres, cache, egress bool }
	cases := []struct {
		name    string
		edit    func(*v1alpha1.TiledInstance)
		want    want
		tiledNS []string // namespaces admitted to Tiled's port
		metrics bool     // a rule for the metrics port
	}{
		{"built-in defaults", func(*v1alpha1.TiledInstance) {}, want{true, true, true, false}, []string{"ingress-nginx"}, false},
		{"off", func(ti *v1alpha1.TiledInstance) { ti.Spec.NetworkPolicy.Enabled = ptr.To(false) }, want{}, nil, false},
		{"absent (expanded by an older release)", func(ti *v1alpha1.TiledInstance) { ti.Spec.NetworkPolicy = nil }, want{}, nil, false},
		{"external database, streaming off", func(ti *v1alpha1.TiledInstance) {
			ti.Spec.Database = &v1alpha1.DatabaseSpec{External: &v1alpha1.ExternalDatabase{URISecretRef: &v1alpha1.SecretKeyRef{Name: "db", Key: "uri"}}}
			ti.Spec.Streaming.Enabled = ptr.To(false)
		}, want{tiled: true}, []string{"ingress-nginx"}, false},
		{"no ingress controller", func(ti *v1alpha1.TiledInstance) { ti.Spec.NetworkPolicy.IngressControllerNamespace = ptr.To("") }, want{true, true, true, false}, nil, false},
		{"monitored", func(ti *v1alpha1.TiledInstance) { ti.Spec.Monitoring.ServiceMonitor = ptr.To(true) }, want{true, true, true, false}, []string{"ingress-nginx"}, true},
		{"monitored, no metrics namespace", func(ti *v1alpha1.TiledInstance) {
			ti.Spec.Monitoring.ServiceMonitor = ptr.To(true)
			ti.Spec.NetworkPolicy.MetricsNamespace = ptr.To("")
		}, want{true, true, true, false}, []string{"ingress-nginx"}, false},
		{"egress restricted", func(ti *v1alpha1.TiledInstance) { ti.Spec.NetworkPolicy.Egress.Restricted = ptr.To(true) }, want{true, true, true, true}, []string{"ingress-nginx"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := singleUserManaged()
			tc.edit(ti)
			p, err := InstanceNetworkPolicies(ti, Inputs{SecretData: secretData})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(want{p.Tiled != nil, p.Postgres != nil, p.Cache != nil, p.Egress != nil}).To(Equal(tc.want))
			if p.Tiled == nil {
				return
			}
			tp := typedPolicy(g, p.Tiled)
			var ns []string
			for _, f := range tp.Spec.Ingress[0].From {
				if f.NamespaceSelector != nil {
					ns = append(ns, f.NamespaceSelector.MatchLabels[NamespaceNameLabel])
				}
			}
			g.Expect(ns).To(Equal(tc.tiledNS))
			g.Expect(len(tp.Spec.Ingress) == 2).To(Equal(tc.metrics))
			if tc.metrics {
				g.Expect(tp.Spec.Ingress[1].Ports[0].Port.IntVal).To(Equal(int32(MetricsPort)))
				g.Expect(tp.Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels).To(Equal(map[string]string{NamespaceNameLabel: "monitoring"}))
			}
		})
	}
}

// TestNetworkPoliciesAppliedFirst: the policies come first in Objects.All, the order the controller
// applies in, so that no database or cache pod is ever up without the policy that guards it.
func TestNetworkPoliciesAppliedFirst(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	ti.Spec.NetworkPolicy.Egress.Restricted = ptr.To(true)
	o, err := Render(ti, Inputs{SecretData: secretData})
	g.Expect(err).NotTo(HaveOccurred())
	all := o.All()
	g.Expect(len(all)).To(BeNumerically(">", 4))
	for i, v := range all {
		_, isPolicy := v.(*networkingv1ac.NetworkPolicyApplyConfiguration)
		g.Expect(isPolicy).To(Equal(i < 4), "object %d of %d (%T)", i, len(all), v)
	}
}
