package render

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// MetricsPath is where Tiled serves Prometheus metrics, to a key with the `metrics` scope
// (`Authorization: Apikey <key>`). The ServiceMonitor does not scrape it: it scrapes the metrics
// sidecar (MetricsSidecar), which needs no Tiled key.
const MetricsPath = "/api/v1/metrics"

func httpPort() *corev1ac.ServicePortApplyConfiguration {
	return corev1ac.ServicePort().WithName(PortName).WithPort(Port).
		WithTargetPort(intstr.FromString(PortName)).WithProtocol(corev1.ProtocolTCP)
}

// Service returns the Service in front of Tiled: port 8000 named http, type from spec.expose.service
// (ClusterIP by default), and the metrics sidecar's port MetricsPort named MetricsPortName when the
// instance asks for a ServiceMonitor.
func Service(ti *v1alpha1.TiledInstance, in Inputs) *corev1ac.ServiceApplyConfiguration {
	n := in.names(ti)
	typ := corev1.ServiceTypeClusterIP
	var ann map[string]string
	if e := ti.Spec.Expose; e != nil && e.Service != nil {
		if e.Service.Type != "" {
			typ = e.Service.Type
		}
		ann = e.Service.Annotations
	}
	s := corev1ac.Service(n.Tiled, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(typ).
			WithSelector(SelectorLabels(ti, ComponentServer)).
			WithPorts(httpPort()))
	if Monitored(ti) {
		s.Spec.WithPorts(corev1ac.ServicePort().WithName(MetricsPortName).WithPort(MetricsPort).
			WithTargetPort(intstr.FromString(MetricsPortName)).WithProtocol(corev1.ProtocolTCP))
	}
	if len(ann) > 0 {
		s.WithAnnotations(ann)
	}
	return s
}

// HeadlessService returns the headless Service governing the Tiled StatefulSet.
func HeadlessService(ti *v1alpha1.TiledInstance, in Inputs) *corev1ac.ServiceApplyConfiguration {
	n := in.names(ti)
	return corev1ac.Service(n.HeadlessService, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(SelectorLabels(ti, ComponentServer)).
			WithPorts(httpPort()))
}

// Ingress returns the Ingress when spec.expose.ingress.enabled is true, else nil.
func Ingress(ti *v1alpha1.TiledInstance, in Inputs) *networkingv1ac.IngressApplyConfiguration {
	e := ti.Spec.Expose
	if e == nil || e.Ingress == nil || e.Ingress.Enabled == nil || !*e.Ingress.Enabled {
		return nil
	}
	n := in.names(ti)
	ing := e.Ingress
	backend := networkingv1ac.IngressBackend().WithService(networkingv1ac.IngressServiceBackend().
		WithName(n.Tiled).WithPort(networkingv1ac.ServiceBackendPort().WithName(PortName)))
	rule := networkingv1ac.IngressRule().WithHTTP(networkingv1ac.HTTPIngressRuleValue().WithPaths(
		networkingv1ac.HTTPIngressPath().WithPath("/").WithPathType(networkingv1.PathTypePrefix).WithBackend(backend)))
	if ing.Host != "" {
		rule.WithHost(ing.Host)
	}
	spec := networkingv1ac.IngressSpec().WithRules(rule)
	if ing.ClassName != "" {
		spec.WithIngressClassName(ing.ClassName)
	}
	if ing.TLSSecretName != "" {
		tls := networkingv1ac.IngressTLS().WithSecretName(ing.TLSSecretName)
		if ing.Host != "" {
			tls.WithHosts(ing.Host)
		}
		spec.WithTLS(tls)
	}
	out := networkingv1ac.Ingress(n.Tiled, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(spec)
	if len(ing.Annotations) > 0 {
		out.WithAnnotations(ing.Annotations)
	}
	return out
}

// PodDisruptionBudget returns a PDB allowing one Tiled pod down at a time when replicas > 1, else nil.
func PodDisruptionBudget(ti *v1alpha1.TiledInstance, in Inputs) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	if MaxReplicas(ti) <= 1 {
		return nil
	}
	n := in.names(ti)
	return policyv1ac.PodDisruptionBudget(n.Tiled, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(ti, ComponentServer))))
}

// ServiceMonitor returns a prometheus-operator ServiceMonitor (monitoring.coreos.com/v1) scraping the
// metrics sidecar (MetricsSidecar: port MetricsPortName, MetricsSidecarPath) with the token of the
// metrics Secret as `Authorization: Bearer`, or nil when not asked for or when the CRD is absent
// (in.ServiceMonitorAvailable). It names no Tiled key, so it works alike in single-user mode and
// under OIDC.
func ServiceMonitor(ti *v1alpha1.TiledInstance, in Inputs) *unstructured.Unstructured {
	if !Monitored(ti) || !in.ServiceMonitorAvailable {
		return nil
	}
	m := ti.Spec.Monitoring
	n := in.names(ti)
	endpoint := map[string]any{
		"port":   MetricsPortName,
		"path":   MetricsSidecarPath,
		"scheme": "http",
		"authorization": map[string]any{
			"type":        "Bearer",
			"credentials": map[string]any{"name": n.MetricsSecret, "key": SecretKeyMetricsToken},
		},
	}
	if m.Interval != "" {
		endpoint["interval"] = m.Interval
	}
	labels := map[string]any{}
	for k, v := range Labels(ti, ComponentServer) {
		labels[k] = v
	}
	sel := map[string]any{}
	for k, v := range SelectorLabels(ti, ComponentServer) {
		sel[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "ServiceMonitor",
		"metadata": map[string]any{
			"name":      n.Tiled,
			"namespace": ti.Namespace,
			"labels":    labels,
		},
		"spec": map[string]any{
			"selector":  map[string]any{"matchLabels": sel},
			"endpoints": []any{endpoint},
		},
	}}
}
