package render

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// NamespaceNameLabel is the label the API server sets on every namespace to its own name
// (kubernetes.io/metadata.name): the way a NetworkPolicy names a namespace.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// DNSPort is the built-in port the restricted egress keeps open, over UDP and TCP, to any
// destination, for the cluster's DNS (spec.networkPolicy.egress.dnsPorts).
const DNSPort = 53

// NetworkPoliciesEnabled reports whether the instance asks for its NetworkPolicies:
// spec.networkPolicy.enabled true. An instance without spec.networkPolicy (expanded by a release
// before NetworkPolicies, and not admitted since) gets none.
func NetworkPoliciesEnabled(ti *v1alpha1.TiledInstance) bool {
	return ti.Spec.NetworkPolicy != nil && ptr.Deref(ti.Spec.NetworkPolicy.Enabled, false)
}

// EgressRestricted reports whether the instance's pods may connect only where
// spec.networkPolicy.egress allows.
func EgressRestricted(ti *v1alpha1.TiledInstance) bool {
	if !NetworkPoliciesEnabled(ti) {
		return false
	}
	e := ti.Spec.NetworkPolicy.Egress
	return e != nil && ptr.Deref(e.Restricted, false)
}

// NetworkPolicies are the NetworkPolicies of one instance; a nil one is not wanted.
type NetworkPolicies struct {
	// Tiled admits connections to Tiled's port from the instance's namespace, the ingress
	// controller's namespace and spec.networkPolicy.tiledFrom, and to the metrics sidecar's port from
	// the metrics namespace.
	Tiled *networkingv1ac.NetworkPolicyApplyConfiguration
	// Postgres admits connections to the managed database only from the instance's Tiled pods and
	// its Jobs; nil for an external database.
	Postgres *networkingv1ac.NetworkPolicyApplyConfiguration
	// Cache admits connections to the managed streaming cache only from the instance's Tiled pods;
	// nil without a managed cache.
	Cache *networkingv1ac.NetworkPolicyApplyConfiguration
	// Egress restricts the connections the instance's pods open; nil unless egress is restricted.
	Egress *networkingv1ac.NetworkPolicyApplyConfiguration
}

// InstanceNetworkPolicies returns the instance's NetworkPolicies, all nil when
// spec.networkPolicy.enabled is not true. Each selects pods by the selector labels of the workload it
// guards (never by a label the operator adds only for it, so that an upgrade that brings the
// policies restarts no pod) and names the sources allowed by their labels: pods of the instance
// (app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/component) and namespaces by
// kubernetes.io/metadata.name.
func InstanceNetworkPolicies(ti *v1alpha1.TiledInstance, in Inputs) (NetworkPolicies, error) {
	if !NetworkPoliciesEnabled(ti) {
		return NetworkPolicies{}, nil
	}
	n := in.names(ti)
	spec := ti.Spec.NetworkPolicy
	out := NetworkPolicies{}

	// Tiled: its HTTP port from the namespace, the ingress controller and tiledFrom.
	from := []*networkingv1ac.NetworkPolicyPeerApplyConfiguration{
		networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector()),
	}
	if ns := ptr.Deref(spec.IngressControllerNamespace, ""); ns != "" {
		from = append(from, namespacePeer(ns))
	}
	for i := range spec.TiledFrom {
		p, err := applyConfiguration[networkingv1ac.NetworkPolicyPeerApplyConfiguration](&spec.TiledFrom[i])
		if err != nil {
			return NetworkPolicies{}, err
		}
		from = append(from, p)
	}
	tiledRules := []*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration{
		networkingv1ac.NetworkPolicyIngressRule().WithPorts(tcpPort(Port)).WithFrom(from...),
	}
	if ns := ptr.Deref(spec.MetricsNamespace, ""); ns != "" && Monitored(ti) {
		tiledRules = append(tiledRules, networkingv1ac.NetworkPolicyIngressRule().
			WithPorts(tcpPort(MetricsPort)).WithFrom(namespacePeer(ns)))
	}
	out.Tiled = ingressPolicy(ti, n.Tiled, ComponentServer, tiledRules)

	// The managed database: PostgreSQL's port from Tiled and the instance's Jobs only.
	if db := ti.Spec.Database; db != nil && db.Managed != nil {
		out.Postgres = ingressPolicy(ti, n.Postgres, ComponentDatabase,
			[]*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration{
				networkingv1ac.NetworkPolicyIngressRule().WithPorts(tcpPort(PostgresPort)).
					WithFrom(instancePods(ti, ComponentServer, ComponentJob, ComponentBackups)),
			})
	}
	// The managed streaming cache: its port from Tiled only.
	if ManagedCacheEnabled(ti) {
		out.Cache = ingressPolicy(ti, n.Cache, ComponentCache,
			[]*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration{
				networkingv1ac.NetworkPolicyIngressRule().WithPorts(tcpPort(CachePort)).
					WithFrom(instancePods(ti, ComponentServer)),
			})
	}
	if EgressRestricted(ti) {
		var err error
		if out.Egress, err = egressPolicy(ti, in); err != nil {
			return NetworkPolicies{}, err
		}
	}
	return out, nil
}

// All returns the wanted policies, in the order they are applied.
func (p NetworkPolicies) All() []*networkingv1ac.NetworkPolicyApplyConfiguration {
	var out []*networkingv1ac.NetworkPolicyApplyConfiguration
	for _, x := range []*networkingv1ac.NetworkPolicyApplyConfiguration{p.Postgres, p.Cache, p.Tiled, p.Egress} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// ingressPolicy is the NetworkPolicy name selecting the instance's pods of component (by the
// workload's own selector labels) and admitting only rules.
func ingressPolicy(ti *v1alpha1.TiledInstance, name, component string, rules []*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration) *networkingv1ac.NetworkPolicyApplyConfiguration {
	return networkingv1ac.NetworkPolicy(name, ti.Namespace).
		WithLabels(Labels(ti, component)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(ti, component))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(rules...))
}

// egressPolicy restricts the connections of every pod of the instance (Tiled, its database and
// cache, its Jobs) to DNS (egress.dnsPorts, any address), the instance's managed database and cache,
// and egress.allow.
func egressPolicy(ti *v1alpha1.TiledInstance, in Inputs) (*networkingv1ac.NetworkPolicyApplyConfiguration, error) {
	n := in.names(ti)
	e := ti.Spec.NetworkPolicy.Egress
	dnsPorts := e.DNSPorts
	if len(dnsPorts) == 0 {
		dnsPorts = []int32{DNSPort}
	}
	dns := networkingv1ac.NetworkPolicyEgressRule()
	for _, p := range dnsPorts {
		dns.WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolUDP).WithPort(intstr.FromInt32(p)), tcpPort(p))
	}
	rules := []*networkingv1ac.NetworkPolicyEgressRuleApplyConfiguration{dns}
	if db := ti.Spec.Database; db != nil && db.Managed != nil {
		rules = append(rules, networkingv1ac.NetworkPolicyEgressRule().
			WithPorts(tcpPort(PostgresPort)).WithTo(instancePods(ti, ComponentDatabase)))
	}
	if ManagedCacheEnabled(ti) {
		rules = append(rules, networkingv1ac.NetworkPolicyEgressRule().
			WithPorts(tcpPort(CachePort)).WithTo(instancePods(ti, ComponentCache)))
	}
	for i := range e.Allow {
		r, err := applyConfiguration[networkingv1ac.NetworkPolicyEgressRuleApplyConfiguration](&e.Allow[i])
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return networkingv1ac.NetworkPolicy(n.EgressPolicy, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(instanceSelector(ti)).
			WithPolicyTypes(networkingv1.PolicyTypeEgress).
			WithEgress(rules...)), nil
}

// instancePods is the peer of the instance's own pods of the given components.
func instancePods(ti *v1alpha1.TiledInstance, components ...string) *networkingv1ac.NetworkPolicyPeerApplyConfiguration {
	sel := instanceSelector(ti)
	if len(components) == 1 {
		sel.MatchLabels[v1alpha1.LabelAppComponent] = components[0]
	} else {
		sel.WithMatchExpressions(metav1ac.LabelSelectorRequirement().
			WithKey(v1alpha1.LabelAppComponent).WithOperator(metav1.LabelSelectorOpIn).WithValues(components...))
	}
	return networkingv1ac.NetworkPolicyPeer().WithPodSelector(sel)
}

// instanceSelector selects every pod of the instance, whatever its component.
func instanceSelector(ti *v1alpha1.TiledInstance) *metav1ac.LabelSelectorApplyConfiguration {
	return metav1ac.LabelSelector().WithMatchLabels(map[string]string{
		v1alpha1.LabelAppName:     AppName,
		v1alpha1.LabelAppInstance: ti.Name,
	})
}

// namespacePeer is every pod of the namespace ns.
func namespacePeer(ns string) *networkingv1ac.NetworkPolicyPeerApplyConfiguration {
	return networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(
		metav1ac.LabelSelector().WithMatchLabels(map[string]string{NamespaceNameLabel: ns}))
}

func tcpPort(p int32) *networkingv1ac.NetworkPolicyPortApplyConfiguration {
	return networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(p))
}
