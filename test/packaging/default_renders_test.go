package packaging

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/config/crd"
	"github.com/bluesky/tiled-operator/webhooks"
)

const namespace = "tiled-operator-system"

// clusterScoped are the kinds config/default renders without a namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
}

func TestDefaultRenders(t *testing.T) {
	objs := renderDefault(t)
	want := map[string]bool{
		"Namespace/" + namespace: true,
		"CustomResourceDefinition/tiledprofiles.tiled.blueskyproject.io":                 true,
		"CustomResourceDefinition/tiledclusters.tiled.blueskyproject.io":                 true,
		"CustomResourceDefinition/tiledinstances.tiled.blueskyproject.io":                true,
		"ServiceAccount/tiled-operator-controller-manager":                               true,
		"ClusterRole/tiled-operator-manager-role":                                        true,
		"ClusterRoleBinding/tiled-operator-manager-rolebinding":                          true,
		"Role/tiled-operator-manager-role":                                               true,
		"RoleBinding/tiled-operator-manager-rolebinding":                                 true,
		"ClusterRole/tiled-operator-webhook-certs-role":                                  true,
		"ClusterRoleBinding/tiled-operator-webhook-certs-rolebinding":                    true,
		"Role/tiled-operator-webhook-certs-role":                                         true,
		"RoleBinding/tiled-operator-webhook-certs-rolebinding":                           true,
		"ClusterRole/tiled-operator-metrics-reader":                                      true,
		"ClusterRole/tiled-operator-editor-role":                                         true,
		"ClusterRole/tiled-operator-viewer-role":                                         true,
		"Deployment/tiled-operator-controller-manager":                                   true,
		"PodDisruptionBudget/tiled-operator-controller-manager":                          true,
		"NetworkPolicy/tiled-operator-controller-manager":                                true,
		"Service/tiled-operator-controller-manager-metrics-service":                      true,
		"Service/tiled-operator-webhook-service":                                         true,
		"MutatingWebhookConfiguration/tiled-operator-mutating-webhook-configuration":     true,
		"ValidatingWebhookConfiguration/tiled-operator-validating-webhook-configuration": true,
	}
	seen := map[string]bool{}
	for _, o := range objs {
		k := key(o)
		if seen[k] {
			t.Errorf("%s rendered twice", k)
		}
		seen[k] = true
		if clusterScoped[o.GetKind()] {
			if o.GetNamespace() != "" {
				t.Errorf("%s is cluster-scoped but has namespace %q", k, o.GetNamespace())
			}
		} else if o.GetNamespace() != namespace {
			t.Errorf("%s is in namespace %q, want %q", k, o.GetNamespace(), namespace)
		}
		if o.GetKind() != "Namespace" && o.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(o.GetName(), "tiled-operator-") {
			t.Errorf("%s lacks the tiled-operator- prefix", k)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("config/default does not render %s", k)
		}
	}
	for k := range seen {
		if !want[k] {
			t.Errorf("config/default renders %s, which this test does not expect (a plain cluster must accept everything)", k)
		}
	}
}

// The CRDs installed by config/default are the generated ones, unchanged but for labels.
func TestDefaultCRDsAreTheGeneratedOnes(t *testing.T) {
	objs := renderDefault(t)
	generated, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	rendered := only(objs, "CustomResourceDefinition")
	if len(rendered) != len(generated) {
		t.Fatalf("config/default renders %d CRDs, config/crd/bases holds %d", len(rendered), len(generated))
	}
	for _, g := range generated {
		var r map[string]any
		for _, o := range rendered {
			if o.GetName() == g.Name {
				r = o.Object
			}
		}
		if r == nil {
			t.Errorf("CRD %s is not rendered", g.Name)
			continue
		}
		spec, _ := yaml.Marshal(r["spec"])
		var want any
		b, _ := yaml.Marshal(g.Spec)
		_ = yaml.Unmarshal(b, &want)
		var got any
		_ = yaml.Unmarshal(spec, &got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("rendered CRD %s differs from config/crd/bases", g.Name)
		}
	}
}

// The manager's roles are controller-gen's, rule for rule: role.yaml (the ClusterRole and the
// leader-election Role) and webhookcerts/role.yaml (the roles of the manager's own CA).
func TestDefaultRolesAreGenerated(t *testing.T) {
	objs := renderDefault(t)
	for _, file := range []string{"role.yaml", "webhookcerts/role.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		generated, err := decodeAll(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(generated) == 0 {
			t.Fatalf("%s holds no role", file)
		}
		for _, gen := range generated {
			var want rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(gen.Object, &want); err != nil {
				t.Fatal(err)
			}
			rendered := named[rbacv1.ClusterRole](t, objs, gen.GetKind(), "tiled-operator-"+gen.GetName())
			if !reflect.DeepEqual(rendered.Rules, want.Rules) {
				t.Errorf("rendered %s %s differs from the generated config/rbac/%s:\n%v\n%v", gen.GetKind(), rendered.Name, file, rendered.Rules, want.Rules)
			}
			if gen.GetKind() == "Role" && rendered.Namespace != namespace {
				t.Errorf("Role %s is in %q, want the manager's namespace", rendered.Name, rendered.Namespace)
			}
		}
	}
}

// The objects refer to each other by the names and labels kustomize gives them: the Deployment runs
// as the ServiceAccount, bindings bind rendered roles to it, Services select the manager's pods and
// target ports it names, and the webhook configurations call the webhook Service at paths the
// manager serves.
func TestDefaultReferencesResolve(t *testing.T) {
	objs := renderDefault(t)
	dep := one[appsv1.Deployment](t, objs, "Deployment")
	sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount")

	if dep.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("Deployment runs as %q, the rendered ServiceAccount is %q", dep.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
	roles := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "Role" || o.GetKind() == "ClusterRole" {
			roles[o.GetKind()+"/"+o.GetName()] = true
		}
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, o := range only(objs, kind) {
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			if !roles[b.RoleRef.Kind+"/"+b.RoleRef.Name] {
				t.Errorf("%s refers to %s/%s, which is not rendered", key(o), b.RoleRef.Kind, b.RoleRef.Name)
			}
			for _, s := range b.Subjects {
				if s.Kind != "ServiceAccount" || s.Name != sa.Name || s.Namespace != namespace {
					t.Errorf("%s binds %s %s/%s, want the manager's ServiceAccount", key(o), s.Kind, s.Namespace, s.Name)
				}
			}
		}
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	if !labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("Deployment selector does not match its own pods")
	}
	pdb := one[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget")
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not match the manager pods", pdb.Spec.Selector)
	}
	ports := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	services := map[string]*corev1.Service{}
	for _, o := range only(objs, "Service") {
		svc := named[corev1.Service](t, objs, "Service", o.GetName())
		services[svc.Name] = svc
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selector %v does not match the manager pods %v", svc.Name, svc.Spec.Selector, podLabels)
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok {
				t.Errorf("Service %s targets port %q, which the manager does not name", svc.Name, p.TargetPort.String())
			}
		}
	}
	if len(services) != 2 {
		t.Errorf("config/default renders %d Services, want the metrics and the webhook Service", len(services))
	}
	paths := map[string]bool{webhooks.MutateInstancePath: true, webhooks.MutateApprovalPath: true, webhooks.ValidateInstancePath: true, webhooks.ValidateProfilePath: true,
		webhooks.ValidateProfileDeletePath: true, webhooks.ValidateClusterPath: true}
	var refs []admissionregistrationv1.WebhookClientConfig
	m := named[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", webhooks.MutatingConfigurationName)
	for _, w := range m.Webhooks {
		refs = append(refs, w.ClientConfig)
	}
	v := named[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", webhooks.ValidatingConfigurationName)
	for _, w := range v.Webhooks {
		refs = append(refs, w.ClientConfig)
	}
	for _, cc := range refs {
		if cc.Service == nil || cc.URL != nil || len(cc.CABundle) > 0 {
			t.Errorf("webhook client config %+v: want a Service reference and no caBundle (the manager fills it)", cc)
			continue
		}
		svc, ok := services[cc.Service.Name]
		if !ok || cc.Service.Namespace != namespace {
			t.Errorf("a webhook calls Service %s/%s, which is not rendered", cc.Service.Namespace, cc.Service.Name)
			continue
		}
		if cc.Service.Port != nil && *cc.Service.Port != svc.Spec.Ports[0].Port {
			t.Errorf("a webhook calls port %d of %s, which it does not have", *cc.Service.Port, svc.Name)
		}
		if cc.Service.Path == nil || !paths[*cc.Service.Path] {
			t.Errorf("a webhook calls path %v, which the manager does not serve", cc.Service.Path)
		}
		if svc.Spec.Ports[0].TargetPort.String() != "webhook" {
			t.Errorf("the webhook Service targets %s, not the manager's webhook port", svc.Spec.Ports[0].TargetPort.String())
		}
	}
	// The ServiceMonitor of config/prometheus scrapes the metrics Service.
	prom, err := decodeAll(kustomize(t, "config/prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	monitors := only(prom, "ServiceMonitor")
	if len(monitors) != 1 {
		t.Fatalf("config/prometheus renders %d ServiceMonitors, want 1", len(monitors))
	}
	metrics := services["tiled-operator-controller-manager-metrics-service"]
	if metrics == nil {
		t.Fatal("no metrics Service")
	}
	for _, mon := range monitors {
		if mon.GetNamespace() != namespace {
			t.Errorf("ServiceMonitor in %q, want %q", mon.GetNamespace(), namespace)
		}
		endpoints, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
		for _, e := range endpoints {
			port, _ := e.(map[string]any)["port"].(string)
			found := false
			for _, p := range metrics.Spec.Ports {
				found = found || p.Name == port
			}
			if !found {
				t.Errorf("ServiceMonitor scrapes port %q, which the metrics Service does not name", port)
			}
		}
		match, _, _ := unstructured.NestedStringMap(mon.Object, "spec", "selector", "matchLabels")
		if !labels.SelectorFromSet(match).Matches(labels.Set(metrics.Labels)) {
			t.Errorf("ServiceMonitor selector %v does not match the metrics Service %v", match, metrics.Labels)
		}
	}
}

// Two replicas, a PodDisruptionBudget keeping one, the webhooks on with the manager's own CA, its
// namespace and identity from the downward API, and readiness on /readyz (which includes the
// webhook server and its certificate).
func TestDefaultManagerDeployment(t *testing.T) {
	objs := renderDefault(t)
	dep := one[appsv1.Deployment](t, objs, "Deployment")
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v: want maxUnavailable 0", dep.Spec.Strategy.RollingUpdate)
	}
	pdb := one[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, flag := range []string{"--webhooks", "--cert-management=self", "--leader-elect"} {
		if !slices.Contains(c.Args, flag) {
			t.Errorf("manager args %q lack %s", c.Args, flag)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" || env["SERVICE_ACCOUNT_NAME"] != "spec.serviceAccountName" {
		t.Errorf("manager env %v: want POD_NAMESPACE and SERVICE_ACCOUNT_NAME from the downward API", env)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want /readyz", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want /healthz", c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
}

// An overlay can point the manager at another image with kustomize's images transformer, naming
// only the rendered image (the e2e overlay does: docker.io/local/tiled-operator:e2e, pulled only if
// absent).
func TestImageOverride(t *testing.T) {
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	k := "resources: [" + rel + "]\nimages:\n- {name: ghcr.io/bluesky/tiled-operator, newName: docker.io/local/tiled-operator, newTag: e2e}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(kustomizeAt(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	c := one[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec.Containers[0]
	if c.Image != "docker.io/local/tiled-operator:e2e" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s (%s), want docker.io/local/tiled-operator:e2e, IfNotPresent", c.Image, c.ImagePullPolicy)
	}
}

// The image is a pinned release, never a moving tag.
func TestDefaultImageIsPinned(t *testing.T) {
	dep := one[appsv1.Deployment](t, renderDefault(t), "Deployment")
	image := dep.Spec.Template.Spec.Containers[0].Image
	if !strings.HasPrefix(image, "ghcr.io/bluesky/tiled-operator:") || strings.HasSuffix(image, ":latest") {
		t.Errorf("manager image is %q, want ghcr.io/bluesky/tiled-operator:<release>", image)
	}
}
