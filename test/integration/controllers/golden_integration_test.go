package controllers_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// storedYAML reads an object back from the apiserver and renders it without what varies from run to
// run: server-set metadata, the test's namespace, generated secret values and the config hash (which
// covers the namespace).
func storedYAML(t *testing.T, g Gomega, obj client.Object, ns, name string) string {
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	g.Expect(err).NotTo(HaveOccurred())
	meta := m["metadata"].(map[string]any)
	for _, k := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
		delete(meta, k)
	}
	if refs, ok := meta["ownerReferences"].([]any); ok {
		for _, r := range refs {
			delete(r.(map[string]any), "uid")
		}
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok && isService(obj) && spec["clusterIP"] != "None" {
		delete(spec, "clusterIP") // allocated by the apiserver
		delete(spec, "clusterIPs")
	}
	if data, ok := m["data"].(map[string]any); ok && isSecret(obj) {
		for k, v := range data {
			data[k] = "<generated, " + itoa(len(v.(string))) + " base64 characters>"
		}
	}
	out, err := yaml.Marshal(m)
	g.Expect(err).NotTo(HaveOccurred())
	s := strings.ReplaceAll(string(out), ns, "NAMESPACE")
	for _, a := range []string{render.ConfigHashAnnotation, applier.AnnotationIntent} {
		// Hashes of content that includes the namespace.
		s = regexp.MustCompile(`(`+regexp.QuoteMeta(a)+`): [0-9a-f]+`).ReplaceAllString(s, "$1: HASH")
	}
	return s
}

func isSecret(obj client.Object) bool { _, ok := obj.(*corev1.Secret); return ok }

func isService(obj client.Object) bool { _, ok := obj.(*corev1.Service); return ok }

func itoa(n int) string {
	b, _ := yaml.Marshal(n)
	return strings.TrimSpace(string(b))
}

// checkGolden compares the children of one stamped-out instance, as the apiserver stores them, with
// the golden files (go test ./controllers -run TestStampOutTraffic -update rewrites them).
func checkGolden(t *testing.T, g Gomega, ns, instance string) {
	n := fleet.NamesOf(getInstance(t, g, ns, instance))
	objects := []struct {
		file string
		obj  client.Object
		name string
	}{
		{"statefulset.yaml", &appsv1.StatefulSet{}, n.Tiled},
		{"configmap.yaml", &corev1.ConfigMap{}, n.ConfigMap},
		{"secret.yaml", &corev1.Secret{}, n.Secret},
		{"service.yaml", &corev1.Service{}, n.Tiled},
		{"service-headless.yaml", &corev1.Service{}, n.HeadlessService},
		{"postgres-statefulset.yaml", &appsv1.StatefulSet{}, n.Postgres},
		{"data-claim.yaml", &corev1.PersistentVolumeClaim{}, n.DataClaim},
	}
	for _, o := range objects {
		got := storedYAML(t, g, o.obj, ns, o.name)
		path := filepath.Join("testdata", "golden", instance, o.file)
		if *update {
			g.Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
			g.Expect(os.WriteFile(path, []byte(got), 0o644)).To(Succeed())
		}
		want, err := os.ReadFile(path)
		g.Expect(err).NotTo(HaveOccurred(), "run go test ./controllers -run TestStampOutTraffic -update to create %s", path)
		g.Expect(got).To(Equal(string(want)), "%s differs from %s", o.name, path)
	}
}
