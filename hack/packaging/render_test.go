package packaging

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/config/crd"
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
		"CustomResourceDefinition/tiledprofiles.tiled.blueskyproject.io":   true,
		"CustomResourceDefinition/tiledclusters.tiled.blueskyproject.io":   true,
		"CustomResourceDefinition/tiledinstances.tiled.blueskyproject.io":  true,
		"ServiceAccount/tiled-operator-controller-manager":                 true,
		"ClusterRole/tiled-operator-manager-role":                          true,
		"ClusterRoleBinding/tiled-operator-manager-rolebinding":            true,
		"Role/tiled-operator-leader-election-role":                         true,
		"RoleBinding/tiled-operator-leader-election-rolebinding":           true,
		"ClusterRole/tiled-operator-metrics-auth-role":                     true,
		"ClusterRoleBinding/tiled-operator-metrics-auth-rolebinding":       true,
		"ClusterRole/tiled-operator-metrics-reader":                        true,
		"ClusterRole/tiled-operator-editor-role":                           true,
		"ClusterRole/tiled-operator-viewer-role":                           true,
		"Deployment/tiled-operator-controller-manager":                     true,
		"Service/tiled-operator-controller-manager-metrics-service":        true,
		"ServiceMonitor/tiled-operator-controller-manager-metrics-monitor": true,
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

// The manager's ClusterRole is controller-gen's role.yaml, rule for rule.
func TestDefaultManagerRoleIsGenerated(t *testing.T) {
	rendered := named[rbacv1.ClusterRole](t, renderDefault(t), "ClusterRole", "tiled-operator-manager-role")
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var generated rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &generated); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rendered.Rules, generated.Rules) {
		t.Errorf("rendered manager role differs from the generated config/rbac/role.yaml:\n%v\n%v", rendered.Rules, generated.Rules)
	}
}

// The objects refer to each other by the names and labels kustomize gives them.
func TestDefaultReferencesResolve(t *testing.T) {
	objs := renderDefault(t)
	dep := one[appsv1.Deployment](t, objs, "Deployment")
	sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount")
	svc := one[corev1.Service](t, objs, "Service")

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
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("metrics Service selector %v does not match the manager pods %v", svc.Spec.Selector, podLabels)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	if !sel.Matches(podLabels) {
		t.Errorf("Deployment selector does not match its own pods")
	}
	ports := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort.String()]; !ok {
			t.Errorf("metrics Service targets port %q, which the manager does not name", p.TargetPort.String())
		}
	}
	monitors := only(objs, "ServiceMonitor")
	for _, m := range monitors {
		endpoints, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
		for _, e := range endpoints {
			port, _ := e.(map[string]any)["port"].(string)
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == port
			}
			if !found {
				t.Errorf("ServiceMonitor scrapes port %q, which the metrics Service does not name", port)
			}
		}
		match, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
		if !labels.SelectorFromSet(match).Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor selector %v does not match the metrics Service %v", match, svc.Labels)
		}
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
