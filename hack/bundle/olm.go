package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bluesky/tiled-operator/expansion"
)

// Annotations of the CSV that say the operator can be installed without Internet access: the
// current key (OpenShift 4.14 and later) and the one it replaced, which older clusters read.
const (
	annotationDisconnected       = "features.operators.openshift.io/disconnected"
	annotationInfrastructureFeat = "operators.openshift.io/infrastructure-features"
)

// managerImageName names the manager's own image in relatedImages.
const managerImageName = "tiled-operator"

// relatedImages are every image the operator runs by default, so that a disconnected cluster can
// mirror them: the manager, and each of expansion.BuiltinImages under its role (a profile naming
// other images makes those the facility's to mirror), spelt out in full.
func relatedImages(manager string) []operatorsv1alpha1.RelatedImage {
	out := []operatorsv1alpha1.RelatedImage{{Name: managerImageName, Image: normalizeImage(manager)}}
	for _, bi := range expansion.BuiltinImages() {
		out = append(out, operatorsv1alpha1.RelatedImage{Name: bi.Role, Image: normalizeImage(bi.Default)})
	}
	return out
}

// relatedImageEnv sets, on the manager's container, the RELATED_IMAGE_<ROLE> variable of each
// built-in image to its entry in relatedImages (OLM's convention: tools that pin digests or mirror
// the bundle rewrite both alike, and a Subscription's spec.config.env overrides them). The fully
// qualified spelling names the built-in image itself, so the manager renders what it would without
// them.
func relatedImageEnv(c *corev1.Container) error {
	for _, bi := range expansion.BuiltinImages() {
		if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == bi.Variable() }) {
			return fmt.Errorf("%s: the manager already sets %s: hack/bundle sets it from expansion.BuiltinImages", overlay, bi.Variable())
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: bi.Variable(), Value: normalizeImage(bi.Default)})
	}
	return nil
}

// normalizeImage spells an image reference out in full, as container runtimes read it
// ("postgres:16" is docker.io/library/postgres:16): mirroring tools match on the registry.
func normalizeImage(ref string) string { return expansion.FullImageReference(ref) }

// checkDisconnected refuses a CSV that claims disconnected installs without listing the images to
// mirror, or whose two disconnected annotations disagree.
func checkDisconnected(csv *operatorsv1alpha1.ClusterServiceVersion) error {
	current := csv.Annotations[annotationDisconnected] == "true"
	var legacy []string
	if v := csv.Annotations[annotationInfrastructureFeat]; v != "" {
		if err := json.Unmarshal([]byte(v), &legacy); err != nil {
			return fmt.Errorf("%s: annotation %s is not a JSON list: %w", csvBase, annotationInfrastructureFeat, err)
		}
	}
	if current != slices.Contains(legacy, "disconnected") {
		return fmt.Errorf("%s: %s and %s disagree about disconnected installs", csvBase, annotationDisconnected, annotationInfrastructureFeat)
	}
	if !current {
		return nil
	}
	images := map[string]string{}
	for _, ri := range csv.Spec.RelatedImages {
		images[ri.Name] = ri.Image
	}
	want := map[string]string{managerImageName: csv.Annotations["containerImage"]}
	for _, bi := range expansion.BuiltinImages() {
		want[bi.Role] = bi.Default
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if images[name] != normalizeImage(want[name]) {
			return fmt.Errorf("the CSV claims disconnected installs but relatedImages lacks %s (%s)", name, want[name])
		}
	}
	var env []corev1.EnvVar
	if deps := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs; len(deps) > 0 && len(deps[0].Spec.Template.Spec.Containers) > 0 {
		env = deps[0].Spec.Template.Spec.Containers[0].Env
	}
	for _, bi := range expansion.BuiltinImages() {
		i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == bi.Variable() })
		if i < 0 || env[i].Value != images[bi.Role] {
			return fmt.Errorf("the manager's %s is not relatedImages' %s (%s)", bi.Variable(), bi.Role, images[bi.Role])
		}
	}
	return nil
}

// checkOLMDeployment checks that the manager runs as OLM needs: serving the webhooks with OLM's
// certificate, and watching the OperatorGroup's target namespaces.
func checkOLMDeployment(d *appsv1.Deployment) error {
	c := d.Spec.Template.Spec.Containers[0]
	for _, flag := range []string{"--webhooks", "--cert-management=olm"} {
		if !slices.Contains(c.Args, flag) {
			return fmt.Errorf("%s: the manager's args %q lack %s", overlay, c.Args, flag)
		}
	}
	for _, e := range c.Env {
		if e.Name == "WATCH_NAMESPACES" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
			e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['olm.targetNamespaces']" {
			return nil
		}
	}
	return fmt.Errorf("%s: the manager does not take WATCH_NAMESPACES from the annotation olm.targetNamespaces", overlay)
}

// webhookDefinitions turns the rendered webhook configurations into the CSV's webhookdefinitions,
// served by the manager Deployment on the container port the webhook Service targets. It returns
// them sorted by name, and the name of the webhook Service (which OLM replaces with its own).
func webhookDefinitions(mutating []*admissionregistrationv1.MutatingWebhookConfiguration, validating []*admissionregistrationv1.ValidatingWebhookConfiguration,
	services []*corev1.Service, d *appsv1.Deployment) ([]operatorsv1alpha1.WebhookDescription, string, error) {
	var defs []operatorsv1alpha1.WebhookDescription
	serviceName := ""
	base := func(name string, cc admissionregistrationv1.WebhookClientConfig, ns *metav1.LabelSelector, conditions int) (operatorsv1alpha1.WebhookDescription, error) {
		if ns != nil {
			return operatorsv1alpha1.WebhookDescription{}, fmt.Errorf("webhook %s has a namespaceSelector: OLM sets it from the OperatorGroup's target namespaces, and the CSV cannot carry another", name)
		}
		if conditions > 0 {
			return operatorsv1alpha1.WebhookDescription{}, fmt.Errorf("webhook %s has matchConditions, which the CSV's webhookdefinitions cannot carry", name)
		}
		if cc.Service == nil || cc.Service.Path == nil || len(cc.CABundle) > 0 {
			return operatorsv1alpha1.WebhookDescription{}, fmt.Errorf("webhook %s does not call a Service path without a caBundle", name)
		}
		if serviceName != "" && cc.Service.Name != serviceName {
			return operatorsv1alpha1.WebhookDescription{}, fmt.Errorf("webhooks call two Services, %s and %s: OLM makes one per Deployment", serviceName, cc.Service.Name)
		}
		serviceName = cc.Service.Name
		containerPort, targetPort, err := webhookPorts(services, cc.Service, d)
		if err != nil {
			return operatorsv1alpha1.WebhookDescription{}, fmt.Errorf("webhook %s: %w", name, err)
		}
		return operatorsv1alpha1.WebhookDescription{
			GenerateName: name, DeploymentName: d.Name, ContainerPort: containerPort,
			TargetPort: &targetPort, WebhookPath: cc.Service.Path,
		}, nil
	}
	for _, m := range mutating {
		for _, w := range m.Webhooks {
			def, err := base(w.Name, w.ClientConfig, w.NamespaceSelector, len(w.MatchConditions))
			if err != nil {
				return nil, "", err
			}
			def.Type = operatorsv1alpha1.MutatingAdmissionWebhook
			def.Rules, def.FailurePolicy, def.MatchPolicy, def.ObjectSelector = w.Rules, w.FailurePolicy, w.MatchPolicy, w.ObjectSelector
			def.SideEffects, def.TimeoutSeconds, def.AdmissionReviewVersions = w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions
			def.ReinvocationPolicy = w.ReinvocationPolicy
			defs = append(defs, def)
		}
	}
	for _, v := range validating {
		for _, w := range v.Webhooks {
			def, err := base(w.Name, w.ClientConfig, w.NamespaceSelector, len(w.MatchConditions))
			if err != nil {
				return nil, "", err
			}
			def.Type = operatorsv1alpha1.ValidatingAdmissionWebhook
			def.Rules, def.FailurePolicy, def.MatchPolicy, def.ObjectSelector = w.Rules, w.FailurePolicy, w.MatchPolicy, w.ObjectSelector
			def.SideEffects, def.TimeoutSeconds, def.AdmissionReviewVersions = w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions
			defs = append(defs, def)
		}
	}
	if len(defs) == 0 {
		return nil, "", fmt.Errorf("%s renders no webhook configuration", overlay)
	}
	slices.SortFunc(defs, func(a, b operatorsv1alpha1.WebhookDescription) int {
		return strings.Compare(a.GenerateName, b.GenerateName)
	})
	return defs, serviceName, nil
}

// webhookPorts resolves the port a webhook calls on its Service, and the container port of the
// manager that Service sends it to.
func webhookPorts(services []*corev1.Service, ref *admissionregistrationv1.ServiceReference, d *appsv1.Deployment) (int32, intstr.IntOrString, error) {
	var svc *corev1.Service
	for _, s := range services {
		if s.Name == ref.Name {
			svc = s
		}
	}
	if svc == nil {
		return 0, intstr.IntOrString{}, fmt.Errorf("the Service %s is not rendered", ref.Name)
	}
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	for _, p := range svc.Spec.Ports {
		if p.Port != port {
			continue
		}
		if p.TargetPort.Type == intstr.Int {
			return port, p.TargetPort, nil
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == p.TargetPort.StrVal {
					return port, intstr.FromInt32(cp.ContainerPort), nil
				}
			}
		}
		return 0, intstr.IntOrString{}, fmt.Errorf("the Service %s targets port %q, which the manager does not name", svc.Name, p.TargetPort.StrVal)
	}
	return 0, intstr.IntOrString{}, fmt.Errorf("the Service %s has no port %d", svc.Name, port)
}
