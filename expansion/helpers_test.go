package expansion

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

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
