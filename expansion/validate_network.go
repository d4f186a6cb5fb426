package expansion

import (
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// networkPolicy checks spec.networkPolicy (at p) the way the API server checks a NetworkPolicy, so
// that a peer or rule it would refuse is refused at admission, naming the instance's field, rather
// than when the operator applies <instance> or <instance>-egress.
func (v *validator) networkPolicy(p *field.Path, n *v1alpha1.NetworkPolicySpec) {
	for i := range n.TiledFrom {
		v.networkPeer(p.Child("tiledFrom").Index(i), &n.TiledFrom[i])
	}
	if n.Egress == nil {
		return
	}
	for i, r := range n.Egress.Allow {
		rp := p.Child("egress", "allow").Index(i)
		for j := range r.Ports {
			v.networkPort(rp.Child("ports").Index(j), &r.Ports[j])
		}
		for j := range r.To {
			v.networkPeer(rp.Child("to").Index(j), &r.To[j])
		}
	}
}

// networkPeer checks one NetworkPolicyPeer: at least one of podSelector, namespaceSelector and
// ipBlock, ipBlock alone, valid selectors, an ipBlock CIDR with exceptions inside it.
func (v *validator) networkPeer(p *field.Path, peer *networkingv1.NetworkPolicyPeer) {
	switch {
	case peer.PodSelector == nil && peer.NamespaceSelector == nil && peer.IPBlock == nil:
		v.add(field.Required(p, "a peer sets podSelector, namespaceSelector or ipBlock (an empty selector {} selects all)"))
	case peer.IPBlock != nil && (peer.PodSelector != nil || peer.NamespaceSelector != nil):
		v.add(field.Forbidden(p.Child("ipBlock"), "may not be combined with podSelector or namespaceSelector in one peer: list them as separate peers"))
	}
	if peer.PodSelector != nil {
		v.labelSelector(p.Child("podSelector"), peer.PodSelector)
	}
	if peer.NamespaceSelector != nil {
		v.labelSelector(p.Child("namespaceSelector"), peer.NamespaceSelector)
	}
	if b := peer.IPBlock; b != nil {
		_, cidr, err := net.ParseCIDR(b.CIDR)
		if err != nil {
			v.add(field.Invalid(p.Child("ipBlock", "cidr"), b.CIDR, "must be a CIDR, e.g. 10.0.0.0/16"))
			return
		}
		for i, e := range b.Except {
			_, ex, err := net.ParseCIDR(e)
			ep := p.Child("ipBlock", "except").Index(i)
			switch {
			case err != nil:
				v.add(field.Invalid(ep, e, "must be a CIDR, e.g. 10.0.1.0/24"))
			case !cidr.Contains(ex.IP) || maskBits(ex) < maskBits(cidr):
				v.add(field.Invalid(ep, e, fmt.Sprintf("must be within the cidr %s", b.CIDR)))
			}
		}
	}
}

func maskBits(n *net.IPNet) int { ones, _ := n.Mask.Size(); return ones }

// networkPort checks one NetworkPolicyPort: protocol TCP, UDP or SCTP; a port number 1-65535 or a
// port name; endPort only after a numeric port, not below it.
func (v *validator) networkPort(p *field.Path, port *networkingv1.NetworkPolicyPort) {
	if pr := port.Protocol; pr != nil && *pr != corev1.ProtocolTCP && *pr != corev1.ProtocolUDP && *pr != corev1.ProtocolSCTP {
		v.add(field.NotSupported(p.Child("protocol"), *pr, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}))
	}
	if port.Port != nil {
		if port.Port.Type == intstr.String {
			for _, msg := range validation.IsValidPortName(port.Port.StrVal) {
				v.add(field.Invalid(p.Child("port"), port.Port.StrVal, msg))
			}
		} else {
			for _, msg := range validation.IsValidPortNum(int(port.Port.IntVal)) {
				v.add(field.Invalid(p.Child("port"), port.Port.IntVal, msg))
			}
		}
	}
	if port.EndPort == nil {
		return
	}
	switch {
	case port.Port == nil || port.Port.Type == intstr.String:
		v.add(field.Required(p.Child("port"), "endPort needs a numeric port"))
	case *port.EndPort < port.Port.IntVal:
		v.add(field.Invalid(p.Child("endPort"), *port.EndPort, fmt.Sprintf("must not be below port %d", port.Port.IntVal)))
	default:
		for _, msg := range validation.IsValidPortNum(int(*port.EndPort)) {
			v.add(field.Invalid(p.Child("endPort"), *port.EndPort, msg))
		}
	}
}
