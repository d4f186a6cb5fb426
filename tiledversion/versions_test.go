// An external test package: it may import the expansion engine (a higher layer) to pin Newest to
// the version it deploys; test/layers reads the packages' own imports, not their tests'.
package tiledversion_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/tiledversion"
)

func TestOf(t *testing.T) {
	cases := []struct {
		name, image, stated string
		version             string
		known               bool
	}{
		{name: "a version tag", image: "ghcr.io/bluesky/tiled:0.2.14", version: "0.2.14", known: true},
		{name: "a v", image: "ghcr.io/bluesky/tiled:v0.2.20", version: "0.2.20", known: true},
		{name: "a suffix", image: "ghcr.io/bluesky/tiled:0.2.20-py3", version: "0.2.20", known: true},
		{name: "a v and a suffix", image: "ghcr.io/bluesky/tiled:v0.2.17_slim", version: "0.2.17", known: true},
		{name: "a registry with a port", image: "registry:5000/x/tiled:0.2.15", version: "0.2.15", known: true},
		{name: "a tag and a digest", image: "ghcr.io/bluesky/tiled:0.2.16@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", version: "0.2.16", known: true},
		{name: "a digest", image: "ghcr.io/bluesky/tiled@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", version: tiledversion.Newest},
		{name: "latest", image: "ghcr.io/bluesky/tiled:latest", version: tiledversion.Newest},
		{name: "no tag", image: "ghcr.io/bluesky/tiled", version: tiledversion.Newest},
		{name: "no tag, a registry with a port", image: "registry:5000/tiled", version: tiledversion.Newest},
		{name: "a tag that is not x.y.z", image: "ghcr.io/bluesky/tiled:0.2", version: tiledversion.Newest},
		{name: "a facility's own tag", image: "registry.nsls2.bnl.gov/tiled:2026-cycle-3", version: tiledversion.Newest},
		{name: "no image", version: tiledversion.Newest},
		{name: "a stated version wins over the tag", image: "ghcr.io/bluesky/tiled:0.2.20", stated: "0.2.14", version: "0.2.14", known: true},
		{name: "a stated version for a digest", image: "ghcr.io/bluesky/tiled@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", stated: "0.2.18", version: "0.2.18", known: true},
		{name: "a stated version for latest", image: "ghcr.io/bluesky/tiled:latest", stated: "0.2.19", version: "0.2.19", known: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			v, known := tiledversion.Of(tc.image, tc.stated)
			g.Expect(v).To(Equal(tc.version))
			g.Expect(known).To(Equal(tc.known))
		})
	}
}

func TestParse(t *testing.T) {
	g := NewWithT(t)
	v, err := tiledversion.Parse("0.2.14")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(tiledversion.Version{0, 2, 14}))
	v, err = tiledversion.Parse("10.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(tiledversion.Version{10, 0, 1}))
	for _, s := range []string{"", "0.2", "0.2.14.1", "v0.2.14", "0.2.x", "0..14", "0.2.-1", "0.2.14-py3", " 0.2.14", "latest"} {
		_, err := tiledversion.Parse(s)
		g.Expect(err).To(MatchError(ContainSubstring("is not a version x.y.z")), "%q", s)
	}
	g.Expect(tiledversion.MustParse("0.2.20")).To(Equal(tiledversion.Version{0, 2, 20}))
	g.Expect(func() { tiledversion.MustParse("0.2") }).To(Panic())
}

func TestCompare(t *testing.T) {
	g := NewWithT(t)
	p := tiledversion.MustParse
	cases := []struct {
		a, b string
		want int
	}{
		{"0.2.14", "0.2.14", 0},
		{"0.2.14", "0.2.20", -1},
		{"0.2.20", "0.2.14", 1},
		{"0.2.9", "0.2.10", -1}, // numbers, not strings
		{"0.3.0", "0.2.99", 1},
		{"1.0.0", "0.99.99", 1},
		{"0.2.20", "1.0.0", -1},
	}
	for _, c := range cases {
		g.Expect(tiledversion.Compare(p(c.a), p(c.b))).To(Equal(c.want), "%s vs %s", c.a, c.b)
	}
}

func TestSupported(t *testing.T) {
	g := NewWithT(t)
	for v, want := range map[string]bool{
		"0.2.13": false, "0.2.14": true, "0.2.17": true, "0.2.20": true,
		"0.2.21": false, "0.3.0": false, "1.0.0": false, "0.1.99": false, "": false, "latest": false, "0.2": false,
	} {
		g.Expect(tiledversion.Supported(v)).To(Equal(want), v)
	}
	g.Expect(tiledversion.Supported(tiledversion.Oldest)).To(BeTrue())
	g.Expect(tiledversion.Supported(tiledversion.Newest)).To(BeTrue())
	g.Expect(tiledversion.Compare(tiledversion.MustParse(tiledversion.Oldest), tiledversion.MustParse(tiledversion.Newest))).To(Equal(-1))
}

// Newest is the version the expansion engine deploys by default.
func TestNewestIsTheDefault(t *testing.T) {
	g := NewWithT(t)
	g.Expect(tiledversion.Newest).To(Equal(expansion.TiledVersion))
	v, known := tiledversion.Of(expansion.TiledImage, "")
	g.Expect(known).To(BeTrue())
	g.Expect(v).To(Equal(tiledversion.Newest))
}
