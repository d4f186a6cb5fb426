package expansion

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// Examples of each rule of the reference grammar (github.com/distribution/reference).
func TestImageReference(t *testing.T) {
	valid := []string{
		"postgres", "postgres:16", "ghcr.io/bluesky/tiled:0.2.20", "localhost:5000/tiled:dev",
		"registry.example.org:443/a/b/c:1.0_rc-1", "[::1]:5000/tiled:x", "Registry.Example.org/tiled",
		"docker.io/library/postgres@sha256:" + strings.Repeat("ab", 32),
		"ghcr.io/bluesky/tiled:0.2.20@sha256:" + strings.Repeat("0f", 32),
		"a__b/c-d.e:" + strings.Repeat("t", 128),
	}
	invalid := map[string]string{
		"":                                     "must not be empty",
		" postgres":                            "whitespace",
		"ghcr.io/bluesky/tiled: 0.2.20":        "whitespace",
		"https://ghcr.io/bluesky/tiled:0.2.20": "URL scheme",
		"ghcr.io/Bluesky/Tiled:0.2.20":         "lower case",
		"ghcr.io/bluesky/tiled:" + strings.Repeat("t", 129):     "not a valid image reference",
		"ghcr.io/bluesky/tiled@sha256:abc":                      "not a valid image reference",
		"ghcr.io/bluesky//tiled":                                "not a valid image reference",
		"-tiled":                                                "not a valid image reference",
		"ghcr.io/" + strings.Repeat("a", 250) + "/tiled:0.2.20": "longer than 255",
	}
	for _, ref := range valid {
		if msg := imageReferenceError(ref); msg != "" {
			t.Errorf("%q refused: %s", ref, msg)
		}
	}
	for ref, want := range invalid {
		g := NewWithT(t)
		g.Expect(imageReferenceError(ref)).To(ContainSubstring(want), ref)
	}
}
