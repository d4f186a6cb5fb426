package webhooks_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// versionNS is the namespace of the Tiled-version tests; none of its profiles is selected by a
// cluster.
const versionNS = "tiled-version"

const versionDigest = "registry.example.org/tiled@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// The API server refuses, through the webhooks, a profile or a standalone instance whose spec.config
// holds a key the Tiled release of its image lacks, naming the release, the image and the key; the
// same on a release that has the key is admitted and stored; an image that does not say its release
// is admitted with a warning, which kubectl prints.
func TestConfigCheckedForTheTiledVersion(t *testing.T) {
	startWebhooks(t)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: versionNS}}))).To(Succeed())

	profile := func(name, tiled string) string {
		return `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata:
  name: ` + name + `
  labels: {facility: versioned}
spec:
  priority: 10
  tiled: ` + tiled + `
  config: {catalog: {top_level_access_tags: [public]}}
`
	}
	instance := func(name, tiled string) string {
		return `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledInstance
metadata:
  name: ` + name + `
spec:
  tiled: ` + tiled + `
  config: {catalog: {top_level_access_tags: [public]}}
`
	}
	create := func(g Gomega, doc string) (client.Object, error) {
		u := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		u.SetNamespace(versionNS)
		return u, env.Client.Create(ctx, u, client.FieldValidation("Strict"))
	}
	const tagsRefused = "spec.config.catalog.top_level_access_tags: Unsupported value: Tiled 0.2.14 (image docker.io/local/tiled:0.2.14) has no configuration key catalog.top_level_access_tags (it was added in 0.2.19"

	for _, tc := range []struct {
		name, doc string
		want      []string // nil: admitted
	}{
		{"a profile on 0.2.14", profile("old", `{image: "docker.io/local/tiled:0.2.14"}`),
			[]string{"TiledProfile", "tiled-version/old", tagsRefused}},
		{"a standalone instance on 0.2.14", instance("old", `{image: "docker.io/local/tiled:0.2.14"}`),
			[]string{"TiledInstance", "tiled-version/old", tagsRefused}},
		{"a standalone instance stating 0.2.14 for a digest", instance("stated", `{image: "`+versionDigest+`", version: "0.2.14"}`),
			[]string{"TiledInstance", "tiled-version/stated", "spec.config.catalog.top_level_access_tags",
				"Tiled 0.2.14 (image " + versionDigest + ", spec.tiled.version) has no configuration key catalog.top_level_access_tags"}},
		{"a profile on 0.2.20", profile("new", `{image: "docker.io/local/tiled:0.2.20"}`), nil},
		{"a standalone instance on 0.2.20", instance("new", `{image: "docker.io/local/tiled:0.2.20"}`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, err := create(g, tc.doc)
			if tc.want == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed(), "stored")
				return
			}
			g.Expect(err).To(HaveOccurred(), "admitted")
			t.Log(err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).NotTo(Succeed(), "not stored")
		})
	}

	// The instance admitted on 0.2.20 was expanded by the mutating webhook: its final image is the
	// one checked.
	stored := &v1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: versionNS, Name: "new"}, stored)).To(Succeed())
	g.Expect(stored.Spec.Tiled.Image).To(Equal("docker.io/local/tiled:0.2.20"))
	g.Expect(stored.Provenance).To(HaveKeyWithValue("spec.config.catalog.top_level_access_tags", "instance"))

	// A digest does not say the release: admitted (0.2.20 is assumed, which has the key), with a
	// warning, for a profile and for an instance.
	dir := t.TempDir()
	for _, tc := range []struct{ kind, doc string }{
		{"TiledProfile", profile("digest", `{image: "`+versionDigest+`"}`)},
		{"TiledInstance", instance("digest", `{image: "`+versionDigest+`"}`)},
	} {
		t.Run("a "+tc.kind+" with a digest", func(t *testing.T) {
			g := NewWithT(t)
			file := filepath.Join(dir, tc.kind+".yaml")
			g.Expect(os.WriteFile(file, []byte(tc.doc), 0o600)).To(Succeed())
			out, stderr, err := env.Kubectl(ctx, "apply", "--server-side", "-n", versionNS, "-f", file)
			g.Expect(err).NotTo(HaveOccurred(), stderr)
			t.Log(out, stderr)
			g.Expect(stderr).To(ContainSubstring("Warning: " + tc.kind + " tiled-version/digest: spec.tiled.image: \"" + versionDigest +
				"\" does not say its Tiled version; assuming 0.2.20, the newest supported, for its configuration and upgrades; set spec.tiled.version"))
		})
	}
}
