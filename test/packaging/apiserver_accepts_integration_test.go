package packaging

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// standInCRDs are minimal CustomResourceDefinitions for the third-party kinds config/default may
// render (prometheus-operator's ServiceMonitor and PrometheusRule; cert-manager's Certificate and Issuer when
// config/certmanager is composed in). They accept any spec: the dry run proves that the apiserver
// knows the kind, that names, namespaces and metadata are valid and that nothing collides, not that
// the spec matches the third party's schema, which only its own CRD can check. Installing the real
// CRDs would mean vendoring hundreds of kilobytes of other projects' schemas into this repository.
var standInCRDs = map[string][3]string{ // kind -> group, plural, singular
	"ServiceMonitor": {"monitoring.coreos.com", "servicemonitors", "servicemonitor"},
	"PodMonitor":     {"monitoring.coreos.com", "podmonitors", "podmonitor"},
	"PrometheusRule": {"monitoring.coreos.com", "prometheusrules", "prometheusrule"},
	"Certificate":    {"cert-manager.io", "certificates", "certificate"},
	"Issuer":         {"cert-manager.io", "issuers", "issuer"},
}

func standInCRD(kind string) map[string]any {
	g := standInCRDs[kind]
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": g[1] + "." + g[0]},
		"spec": map[string]any{
			"group": g[0],
			"names": map[string]any{"kind": kind, "plural": g[1], "singular": g[2], "listKind": kind + "List"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}
}

func toYAML(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes()
}

// kubectlStdin runs kubectl against the control plane with stdin.
func kubectlStdin(ctx context.Context, t *testing.T, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	e := controlPlane(t)
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not on PATH: %v", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// Every object config/default renders is accepted by the real apiserver. The Namespace and the
// CustomResourceDefinitions (ours, and stand-ins for third-party kinds) are created for real first,
// since a dry run creates nothing later objects could rely on; then the whole rendering is applied
// with --dry-run=server, which runs validation, defaulting and admission (PodSecurity included:
// the namespace warns on restricted violations, and a warning fails the test) without storing.
func TestDefaultAcceptedByAPIServer(t *testing.T) {
	if _, ok := os.LookupEnv("KUBEBUILDER_ASSETS"); !ok && testing.Short() {
		t.Skip("needs the control plane")
	}
	acceptedByAPIServer(t, renderDefault(t))
}

// The opt-in overlays build on config/default and are accepted too: config/prometheus adds a
// ServiceMonitor, the PrometheusRule of the alerts and the Grafana dashboard's ConfigMap; config/certmanager swaps the manager's own CA for cert-manager's Certificate (the
// CA-injector annotations, the manager's flag and mounted Secret, and none of the RBAC of the
// manager's own CA); config/olm is what the bundle is made from. Each keeps the manager's other
// arguments and passes the restricted Pod Security Standard.
func TestOverlaysAccepted(t *testing.T) {
	for _, tc := range []struct {
		dir        string
		adds       []string // kinds the overlay adds to config/default
		removes    []string // kind/name it removes
		args       []string // manager arguments it must have
		notArgs    []string
		annotation string // on both webhook configurations
	}{
		{dir: "config/prometheus", adds: []string{"ServiceMonitor", "PrometheusRule", "ConfigMap"}, args: []string{"--cert-management=self"}},
		{
			dir: "config/certmanager", adds: []string{"Certificate", "Issuer"},
			removes: []string{"ClusterRole/tiled-operator-webhook-certs-role", "ClusterRoleBinding/tiled-operator-webhook-certs-rolebinding",
				"Role/tiled-operator-webhook-certs-role", "RoleBinding/tiled-operator-webhook-certs-rolebinding"},
			args:       []string{"--cert-management=cert-manager", "--webhook-cert-dir=/var/run/webhook-certs"},
			notArgs:    []string{"--cert-management=self"},
			annotation: "cert-manager.io/inject-ca-from",
		},
		{
			dir: "config/olm",
			removes: []string{"ClusterRole/tiled-operator-webhook-certs-role", "ClusterRoleBinding/tiled-operator-webhook-certs-rolebinding",
				"Role/tiled-operator-webhook-certs-role", "RoleBinding/tiled-operator-webhook-certs-rolebinding"},
			args:    []string{"--cert-management=olm"},
			notArgs: []string{"--cert-management=self"},
		},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			base := map[string]bool{}
			for _, o := range renderDefault(t) {
				base[key(o)] = true
			}
			objs, err := decodeAll(kustomize(t, tc.dir))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, o := range objs {
				got[key(o)] = true
				if !base[key(o)] && !slices.Contains(tc.adds, o.GetKind()) {
					t.Errorf("%s adds %s", tc.dir, key(o))
				}
			}
			for _, kind := range tc.adds {
				if len(only(objs, kind)) == 0 {
					t.Errorf("%s renders no %s", tc.dir, kind)
				}
			}
			for k := range base {
				if !got[k] && !slices.Contains(tc.removes, k) {
					t.Errorf("%s drops %s", tc.dir, k)
				}
			}
			for _, k := range tc.removes {
				if got[k] {
					t.Errorf("%s keeps %s", tc.dir, k)
				}
			}
			dep := one[appsv1.Deployment](t, objs, "Deployment")
			args := dep.Spec.Template.Spec.Containers[0].Args
			for _, flag := range append([]string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--webhooks"}, tc.args...) {
				if !slices.Contains(args, flag) {
					t.Errorf("%s: the manager's args %q lack %s", tc.dir, args, flag)
				}
			}
			for _, flag := range tc.notArgs {
				if slices.Contains(args, flag) {
					t.Errorf("%s: the manager's args %q still have %s", tc.dir, args, flag)
				}
			}
			if tc.annotation != "" {
				for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
					for _, o := range only(objs, kind) {
						if o.GetAnnotations()[tc.annotation] == "" {
							t.Errorf("%s: %s lacks the annotation %s", tc.dir, key(o), tc.annotation)
						}
					}
				}
			}
			if v := violations(t, &dep.Spec.Template); len(v) > 0 {
				t.Errorf("%s: the manager violates the restricted standard: %v", tc.dir, v)
			}
			acceptedByAPIServer(t, objs)
		})
	}
}

// acceptedByAPIServer creates the namespace and CRDs for real and applies everything else with a
// server-side dry run.
func acceptedByAPIServer(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var prerequisites []*unstructured.Unstructured
	needed := map[string]bool{}
	for _, o := range objs {
		switch {
		case o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition":
			prerequisites = append(prerequisites, o)
		case !strings.HasSuffix(o.GetAPIVersion(), "tiled.blueskyproject.io/v1alpha1") && !builtin(o.GetAPIVersion()):
			if _, ok := standInCRDs[o.GetKind()]; !ok {
				t.Fatalf("%s (%s) is a third-party kind this test has no stand-in CRD for", key(o), o.GetAPIVersion())
			}
			if !needed[o.GetKind()] {
				needed[o.GetKind()] = true
				prerequisites = append(prerequisites, &unstructured.Unstructured{Object: standInCRD(o.GetKind())})
			}
		}
	}
	out, stderr, err := kubectlStdin(ctx, t, toYAML(t, prerequisites), "apply", "--server-side", "--field-manager=packaging-test", "-f", "-")
	if err != nil {
		t.Fatalf("creating the namespace and CRDs: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = kubectlStdin(ctx, t, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	if err != nil {
		t.Fatalf("CRDs not established: %v\n%s%s", err, out, stderr)
	}

	out, stderr, err = kubectlStdin(ctx, t, toYAML(t, objs), "apply", "--server-side", "--dry-run=server", "--field-manager=packaging-test", "-f", "-")
	if err != nil {
		t.Fatalf("the apiserver refused config/default: %v\n%s%s", err, out, stderr)
	}
	if strings.Contains(stderr, "Warning") {
		t.Errorf("the apiserver warned about config/default:\n%s", stderr)
	}
	for _, o := range objs {
		if !strings.Contains(out, o.GetName()) {
			t.Errorf("kubectl did not report %s:\n%s", key(o), out)
		}
	}
	t.Logf("dry run accepted %d objects:\n%s", len(objs), out)
}

// builtin says whether an apiVersion is served by kube-apiserver itself.
func builtin(apiVersion string) bool {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return true // core group, "v1"
	}
	return !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io")
}

// The warning check above can fail: the namespace's Pod Security labels make the real apiserver
// warn about a manager Deployment that breaks the restricted standard, even in a dry run.
func TestDryRunWarnsAboutPodSecurityViolations(t *testing.T) {
	objs := renderDefault(t)
	acceptedByAPIServer(t, objs) // the namespace and CRDs exist
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dep := only(objs, "Deployment")[0].DeepCopy()
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	c["securityContext"].(map[string]any)["allowPrivilegeEscalation"] = true
	if err := unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := kubectlStdin(ctx, t, toYAML(t, []*unstructured.Unstructured{dep}), "apply", "--server-side", "--dry-run=server", "--field-manager=packaging-test", "-f", "-")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "Warning") || !strings.Contains(stderr, "allowPrivilegeEscalation") {
		t.Errorf("no Pod Security warning for allowPrivilegeEscalation=true:\n%s", stderr)
	}
}
