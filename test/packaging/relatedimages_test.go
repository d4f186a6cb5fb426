package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/bluesky/tiled-operator/expansion"
)

// The kustomize overlay docs/disconnected.md shows renders config/default with the manager's
// RELATED_IMAGE_<ROLE> variables, one per built-in image, which the manager accepts and which
// replace every built-in image.
func TestDisconnectedOverlayFromDocs(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "disconnected.md"))
	g.Expect(err).NotTo(HaveOccurred())
	const marker = "# my-tiled-operator/kustomization.yaml\n"
	_, rest, found := strings.Cut(string(doc), marker)
	g.Expect(found).To(BeTrue(), "docs/disconnected.md has no block starting %q", marker)
	block, _, found := strings.Cut(rest, "```")
	g.Expect(found).To(BeTrue())
	// The block's lines are indented under a list item.
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "  "))
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(HaveOccurred())
	k := strings.ReplaceAll(strings.Join(lines, "\n"), "../tiled-operator/config/default", rel)
	g.Expect(k).NotTo(Equal(strings.Join(lines, "\n")), "the overlay does not include ../tiled-operator/config/default")
	g.Expect(os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)).To(Succeed())
	objs, err := decodeAll(kustomizeAt(t, dir))
	g.Expect(err).NotTo(HaveOccurred())
	c := one[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec.Containers[0]
	var environ []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			environ = append(environ, e.Name+"="+e.Value)
		}
	}
	images, err := expansion.ImagesFromEnvironment(environ)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := expansion.DefaultBuiltins().WithImages(images)
	g.Expect(err).NotTo(HaveOccurred())
	for _, bi := range expansion.BuiltinImages() {
		g.Expect(images).To(HaveKey(bi.Role), "the overlay does not set %s", bi.Variable())
		g.Expect(b.Image(bi.Role)).To(HavePrefix("registry.example.org/"), bi.Variable())
	}
}
