package expansion

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// loadFleet reads the NSLS-II sample: the cluster and its three profiles.
func loadFleet(t testing.TB) (*v1alpha1.TiledCluster, []v1alpha1.TiledProfile) {
	t.Helper()
	var cluster *v1alpha1.TiledCluster
	var profs []v1alpha1.TiledProfile
	for _, name := range []string{"cluster.yaml", "profiles.yaml"} {
		f, err := os.Open(filepath.Join("testdata", "fleet", name))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := DecodeAll(name, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *v1alpha1.TiledCluster:
				cluster = o
			case *v1alpha1.TiledProfile:
				profs = append(profs, *o)
			}
		}
	}
	if cluster == nil || len(profs) != 3 {
		t.Fatalf("fleet: want a cluster and 3 profiles, got %v and %d", cluster != nil, len(profs))
	}
	return cluster, profs
}

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, g Gomega, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		g.Expect(os.WriteFile(path, got, 0o644)).To(Succeed())
	}
	want, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred(), "missing golden file; run go test -update")
	g.Expect(string(got)).To(Equal(string(want)), "golden file %s differs; run go test -update and review the diff", path)
}

func mustExpand(t testing.TB, c *v1alpha1.TiledCluster, p []v1alpha1.TiledProfile) *Result {
	t.Helper()
	res, err := Expand(c, p, DefaultBuiltins())
	if err != nil {
		t.Fatalf("expand: %v", err)
	}
	return res
}

func mustMarshal(t testing.TB, res *Result) []byte {
	t.Helper()
	b, err := Marshal(res.Objects()...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const testNS = "beamlines"

// P builds a profile labelled facility=test from the YAML of its template.
func P(t testing.TB, name string, priority int32, template string) v1alpha1.TiledProfile {
	t.Helper()
	p := v1alpha1.TiledProfile{}
	p.Name, p.Namespace, p.Generation = name, testNS, 1
	p.Labels = map[string]string{"facility": "test"}
	// The spec: the template's fields and the allowances (allowedNFS, ...).
	if err := yaml.UnmarshalStrict([]byte(template), &p.Spec); err != nil {
		t.Fatalf("profile %s: %v", name, err)
	}
	p.Spec.Priority = priority
	return p
}

// T parses the YAML of an InstanceTemplate (nil for "").
func T(t testing.TB, template string) *v1alpha1.InstanceTemplate {
	t.Helper()
	if template == "" {
		return nil
	}
	out := &v1alpha1.InstanceTemplate{}
	if err := yaml.UnmarshalStrict([]byte(template), out); err != nil {
		t.Fatalf("template: %v", err)
	}
	return out
}

// C builds a cluster "c" selecting facility=test, with a template and instances.
func C(template string, instances ...v1alpha1.ClusterInstance) *v1alpha1.TiledCluster {
	c := &v1alpha1.TiledCluster{}
	c.Name, c.Namespace = "c", testNS
	c.Labels = map[string]string{"site": "lab"}
	c.Spec.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}}
	if template != "" {
		c.Spec.Template = &v1alpha1.InstanceTemplate{}
		if err := yaml.UnmarshalStrict([]byte(template), c.Spec.Template); err != nil {
			panic(err)
		}
	}
	c.Spec.Instances = instances
	return c
}

// I is an instance of a cluster, with optional overrides.
func I(name string, overrides *v1alpha1.InstanceTemplate) v1alpha1.ClusterInstance {
	return v1alpha1.ClusterInstance{Name: name, Overrides: overrides}
}

// leaves flattens an expanded instance into its leaf fields and their values (JSON), keyed like
// provenance.
func leaves(t testing.TB, obj *v1alpha1.TiledInstance) map[string]string {
	t.Helper()
	fs, err := Why(obj, "spec")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range fs {
		out[f.Path] = f.Value
	}
	return out
}

// one expands a cluster expected to have one instance and returns it.
func one(t *testing.T, c *v1alpha1.TiledCluster, p ...v1alpha1.TiledProfile) *v1alpha1.TiledInstance {
	t.Helper()
	res, err := Expand(c, p, DefaultBuiltins())
	if err != nil {
		t.Fatalf("expand: %v", err)
	}
	if len(res.Instances) != 1 {
		t.Fatalf("want 1 instance, got %d", len(res.Instances))
	}
	return res.Instances[0].Object
}
