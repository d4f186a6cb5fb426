package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// The krew manifest, rendered as krew-release-bot renders it, is a valid krew Plugin: every
// platform of `make plugin-dist` once, each pointing at its archive and naming the binary in it.
func TestKrewManifest(t *testing.T) {
	g := NewWithT(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "hack", "krew", "tiled.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	const tag = "v1.2.3"
	tpl, err := template.New("krew").Funcs(template.FuncMap{
		"addURIAndSha": func(uri, tag string) string {
			uri = strings.ReplaceAll(uri, "{{ .TagName }}", tag)
			return fmt.Sprintf("uri: %s\n    sha256: %s", uri, strings.Repeat("0123456789abcdef", 4))
		},
	}).Parse(string(src))
	g.Expect(err).NotTo(HaveOccurred())
	var out bytes.Buffer
	g.Expect(tpl.Execute(&out, map[string]string{"TagName": tag})).To(Succeed())

	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Caveats          string `json:"caveats"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				Sha256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	g.Expect(yaml.UnmarshalStrict(out.Bytes(), &plugin)).To(Succeed(), out.String())
	g.Expect(plugin.APIVersion).To(Equal("krew.googlecontainertools.github.com/v1alpha2"))
	g.Expect(plugin.Kind).To(Equal("Plugin"))
	g.Expect(plugin.Metadata.Name).To(Equal("tiled"), "kubectl tiled runs kubectl-tiled")
	g.Expect(plugin.Spec.Version).To(Equal(tag))
	g.Expect(len(plugin.Spec.ShortDescription)).To(BeNumerically("<=", 80))
	for _, c := range []string{"expand", "why", "diff", "import-helm"} {
		g.Expect(plugin.Spec.Description).To(ContainSubstring(c))
	}
	var platforms []string
	for _, p := range plugin.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		platforms = append(platforms, os+"/"+arch)
		g.Expect(p.URI).To(Equal(fmt.Sprintf("https://github.com/bluesky/tiled-operator/releases/download/%s/kubectl-tiled_%s_%s.tar.gz", tag, os, arch)))
		g.Expect(p.Sha256).To(HaveLen(64))
		bin := "kubectl-tiled"
		if os == "windows" {
			bin += ".exe"
		}
		g.Expect(p.Bin).To(Equal(bin))
	}
	// The platforms make plugin-dist builds.
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(makefile)).To(ContainSubstring("PLUGIN_PLATFORMS ?= " + strings.Join(platforms, " ") + "\n"))
}
