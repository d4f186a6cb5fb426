package main

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bluesky/tiled-operator/expansion"
)

// OLM's olm.targetNamespaces is "" for AllNamespaces, one name for OwnNamespace and
// SingleNamespace, several comma-separated for MultiNamespace.
func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{"beamlines", []string{"beamlines"}},
		{"a,b", []string{"a", "b"}},
		{" a , b ,,a", []string{"a", "b"}},
	} {
		g := NewWithT(t)
		g.Expect(ParseNamespaces(tc.in)).To(Equal(tc.want), "%q", tc.in)
	}
}

// --help prints the flags and succeeds; an unknown flag or certificate mode fails naming it.
func TestFlags(t *testing.T) {
	g := NewWithT(t)
	g.Expect(run([]string{"--help"})).To(Succeed())
	err := run([]string{"--cert-management=vault"})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(ContainSubstring("vault"), ContainSubstring("self, cert-manager, olm")))
	g.Expect(run([]string{"--no-such-flag"})).To(MatchError(ContainSubstring("no-such-flag")))
}

func TestBuildInfo(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	buildInfo(reg, "v9.9.9-test")
	n, err := testutil.GatherAndCount(reg, "tiled_operator_build_info")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(`# HELP tiled_operator_build_info Always 1; the label version is the release the manager was built as.
# TYPE tiled_operator_build_info gauge
tiled_operator_build_info{version="v9.9.9-test"} 1
`), "tiled_operator_build_info")).To(Succeed())
}

// The RELATED_IMAGE_<ROLE> variables replace the built-in images; a bad one stops the manager at
// start, before it reaches the cluster, with an error naming the variable.
func TestRelatedImageVariables(t *testing.T) {
	g := NewWithT(t)
	b, err := builtins([]string{"RELATED_IMAGE_CACHE=registry.example.org/valkey/valkey:8.1", "HOME=/"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Image(expansion.ImageCache)).To(Equal("registry.example.org/valkey/valkey:8.1"))
	g.Expect(b.Image(expansion.ImageTiled)).To(Equal(expansion.TiledImage))

	t.Setenv("KUBECONFIG", "/nonexistent")
	t.Setenv("RELATED_IMAGE_CACHE", "Registry.example.org/Valkey:8.1")
	g.Expect(run(nil)).To(MatchError(ContainSubstring(`RELATED_IMAGE_CACHE="Registry.example.org/Valkey:8.1" is not a valid image reference`)))
	t.Setenv("RELATED_IMAGE_CACHE", "valkey:8.1")
	t.Setenv("RELATED_IMAGE_REDIS", "redis:7")
	g.Expect(run(nil)).To(MatchError(ContainSubstring("RELATED_IMAGE_REDIS: no built-in image has this variable")))
}
