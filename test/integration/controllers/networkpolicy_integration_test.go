package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// networkPolicies lists the NetworkPolicies of namespace ns by name.
func networkPolicies(t *testing.T, g Gomega, ns string) map[string]networkingv1.NetworkPolicy {
	var l networkingv1.NetworkPolicyList
	g.Expect(env.Client.List(ctxT(t), &l, client.InNamespace(ns))).To(Succeed())
	out := map[string]networkingv1.NetworkPolicy{}
	for _, p := range l.Items {
		out[p.Name] = p
	}
	return out
}

func policyNames(m map[string]networkingv1.NetworkPolicy) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

// TestNetworkPolicies, on the real API server: an instance gets its NetworkPolicies by default (the
// built-ins), owned by it and selecting the pods of the StatefulSets the operator rendered beside
// them; a deleted one comes back; egress.restricted adds <instance>-egress; enabled: false in the
// cluster's template prunes them all, and true again brings them back.
func TestNetworkPolicies(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "netpol")
	op := startOperator(t, ns)
	// With a managed streaming cache (smallFleet's profile turns it off).
	smallFleet(t, g, ns, tiledv1alpha1.ClusterInstance{Name: "a", Overrides: &tiledv1alpha1.InstanceTemplate{
		Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(true)},
	}})
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)

	got := networkPolicies(t, g, ns)
	g.Expect(policyNames(got)).To(ConsistOf(n.Tiled, n.Postgres, n.Cache), "the NetworkPolicies of %s/fleet-a", ns)
	// Each is controlled by the instance and selects the pods of the workload it guards.
	for name, sts := range map[string]string{n.Tiled: n.Tiled, n.Postgres: n.Postgres, n.Cache: n.Cache} {
		p, ok := got[name]
		g.Expect(ok).To(BeTrue(), "NetworkPolicy %s/%s", ns, name)
		ref := metav1.GetControllerOf(&p)
		g.Expect(ref).NotTo(BeNil(), "NetworkPolicy %s has no controller", name)
		g.Expect(ref.UID).To(Equal(ti.UID), "NetworkPolicy %s: controller", name)
		var s appsv1.StatefulSet
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: sts}, &s)).To(Succeed())
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sel.Matches(labels.Set(s.Spec.Template.Labels))).To(BeTrue(), "NetworkPolicy %s selects the pods of StatefulSet %s", name, sts)
		g.Expect(p.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
	}

	// A deleted policy comes back.
	pg := got[n.Postgres]
	g.Expect(env.Client.Delete(ctxT(t), &pg)).To(Succeed())
	g.Eventually(func() bool {
		var p networkingv1.NetworkPolicy
		err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: n.Postgres}, &p)
		return err == nil && p.UID != pg.UID
	}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "the deleted NetworkPolicy %s came back", n.Postgres)

	setTemplate := func(np *tiledv1alpha1.NetworkPolicySpec) {
		t.Helper()
		c := getCluster(t, g, ns)
		if c.Spec.Template == nil {
			c.Spec.Template = &tiledv1alpha1.InstanceTemplate{}
		}
		c.Spec.Template.NetworkPolicy = np
		g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	}
	eventuallyPolicies := func(want ...string) {
		t.Helper()
		g.Eventually(func() []string { return policyNames(networkPolicies(t, g, ns)) }, time.Minute, 250*time.Millisecond).
			Should(ConsistOf(want), "the NetworkPolicies of %s/fleet-a", ns)
	}

	// Egress restricted: one more policy, over every pod of the instance.
	setTemplate(&tiledv1alpha1.NetworkPolicySpec{Egress: &tiledv1alpha1.NetworkEgressSpec{Restricted: ptr.To(true)}})
	eventuallyPolicies(n.Tiled, n.Postgres, n.Cache, n.EgressPolicy)
	var eg networkingv1.NetworkPolicy
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: n.EgressPolicy}, &eg)).To(Succeed())
	g.Expect(eg.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}))
	g.Expect(eg.Spec.Egress).To(HaveLen(3), "DNS, the database and the cache")

	// Off: all pruned; the workloads stay.
	setTemplate(&tiledv1alpha1.NetworkPolicySpec{Enabled: ptr.To(false)})
	eventuallyPolicies()
	var s appsv1.StatefulSet
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: n.Postgres}, &s)).To(Succeed())

	// On again.
	setTemplate(nil)
	eventuallyPolicies(n.Tiled, n.Postgres, n.Cache)
}
