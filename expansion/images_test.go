package expansion

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The built-in defaults run the images of BuiltinImages, each under its own variable.
func TestBuiltinImagesAreTheDefaults(t *testing.T) {
	g := NewWithT(t)
	b := DefaultBuiltins()
	g.Expect(b.Defaults.Tiled.Image).To(Equal(TiledImage))
	g.Expect(b.Defaults.Database.Managed.Image).To(Equal(PostgresImage))
	g.Expect(b.Defaults.Streaming.Managed.Image).To(Equal(CacheImage))
	vars := map[string]bool{}
	for _, bi := range BuiltinImages() {
		g.Expect(b.Image(bi.Role)).To(Equal(bi.Default), bi.Role)
		g.Expect(Builtins{}.Image(bi.Role)).To(Equal(bi.Default), "a zero Builtins runs the built-in %s", bi.Role)
		g.Expect(bi.Fields).NotTo(BeEmpty(), bi.Role)
		g.Expect(imageReferenceError(bi.Default)).To(BeEmpty(), bi.Role)
		g.Expect(vars[bi.Variable()]).To(BeFalse(), "two images share %s", bi.Variable())
		vars[bi.Variable()] = true
	}
	g.Expect(vars).To(HaveKey("RELATED_IMAGE_CACHE"))
	g.Expect(b.Image("nope")).To(BeEmpty())
}

func TestImagesFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    map[string]string
		err     string
	}{
		{name: "none", environ: []string{"HOME=/root", "WATCH_NAMESPACES="}, want: map[string]string{}},
		{name: "all", environ: []string{"RELATED_IMAGE_TILED=r.example.org/tiled:1", "RELATED_IMAGE_POSTGRESQL=r.example.org/postgres:16",
			"RELATED_IMAGE_CACHE=r.example.org/valkey:8.1", "PATH=/bin"},
			want: map[string]string{ImageTiled: "r.example.org/tiled:1", ImagePostgreSQL: "r.example.org/postgres:16", ImageCache: "r.example.org/valkey:8.1"}},
		{name: "value with =", environ: []string{"RELATED_IMAGE_CACHE=a=b"}, want: map[string]string{ImageCache: "a=b"}},
		{name: "misspelt", environ: []string{"RELATED_IMAGE_VALKEY=r.example.org/valkey:8.1"},
			err: "RELATED_IMAGE_VALKEY: no built-in image has this variable (they are RELATED_IMAGE_TILED, RELATED_IMAGE_POSTGRESQL, RELATED_IMAGE_CACHE)"},
		{name: "lower case", environ: []string{"RELATED_IMAGE_cache=r.example.org/valkey:8.1"}, err: "RELATED_IMAGE_cache: no built-in image"},
		{name: "empty", environ: []string{"RELATED_IMAGE_TILED="}, err: "RELATED_IMAGE_TILED is empty: set it to an image reference, or unset it to run the built-in " + TiledImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ImagesFromEnvironment(tc.environ)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestWithImagesRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		images map[string]string
		err    string
	}{
		{map[string]string{ImageCache: "https://r.example.org/valkey:8.1"}, `RELATED_IMAGE_CACHE="https://r.example.org/valkey:8.1" must not hold a URL scheme`},
		{map[string]string{ImageTiled: "R.example.org/Tiled:1"}, `RELATED_IMAGE_TILED="R.example.org/Tiled:1" is not a valid image reference: the repository path must be lower case`},
		{map[string]string{ImagePostgreSQL: "postgres:16 "}, `RELATED_IMAGE_POSTGRESQL="postgres:16 " must not contain whitespace`},
		{map[string]string{"valkey": "valkey:8"}, `RELATED_IMAGE_VALKEY: no built-in image has the role "valkey" (the roles are tiled, postgresql, cache)`},
	} {
		g := NewWithT(t)
		_, err := DefaultBuiltins().WithImages(tc.images)
		g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
	}
}

// A replaced built-in image is the default of every instance, with a provenance that names the
// variable; a profile or the instance naming an image still wins; the same image in another
// spelling (the bundle's fully qualified one) replaces nothing; the built-ins are not changed.
func TestWithImagesProvenance(t *testing.T) {
	g := NewWithT(t)
	base := DefaultBuiltins()
	b, err := base.WithImages(map[string]string{
		ImageTiled:      "r.example.org/bluesky/tiled:" + TiledVersion,
		ImageCache:      "r.example.org/valkey/valkey:8.1",
		ImagePostgreSQL: "docker.io/library/" + PostgresImage,
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(base.Defaults.Tiled.Image).To(Equal(TiledImage), "WithImages changed its receiver")
	g.Expect(base.Sources).To(BeEmpty())
	g.Expect(b.Image(ImagePostgreSQL)).To(Equal(PostgresImage))
	g.Expect(b.Version).To(Equal(BuiltinsVersion))

	profile := v1alpha1.TiledProfile{}
	profile.Name, profile.Namespace, profile.Generation = "site", "beamlines", 2
	profile.Spec.Streaming = &v1alpha1.StreamingSpec{Managed: &v1alpha1.ManagedCache{Image: "r.example.org/redis:7"}}
	ti := &v1alpha1.TiledInstance{}
	ti.Name, ti.Namespace = "a", "beamlines"
	ti.Labels = map[string]string{"site": "x"}
	ti.Spec.ProfileSelector = &metav1.LabelSelector{}
	out, err := ExpandInstance(ti, []v1alpha1.TiledProfile{profile}, b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Spec.Tiled.Image).To(Equal("r.example.org/bluesky/tiled:" + TiledVersion))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.tiled.image", "default (RELATED_IMAGE_TILED)"))
	g.Expect(out.Spec.Streaming.Managed.Image).To(Equal("r.example.org/redis:7"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.streaming.managed.image", "profile/site@2"))
	g.Expect(out.Spec.Database.Managed.Image).To(Equal(PostgresImage))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.database.managed.image", SourceDefault))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.tiled.replicas", SourceDefault))

	// Expanding the expansion again changes nothing (the mutating webhook's idempotence).
	again, err := Reexpand(out, out, []v1alpha1.TiledProfile{profile}, b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Spec).To(Equal(out.Spec))
	g.Expect(again.Provenance).To(Equal(out.Provenance))

	// The built-in value is still an administrator's choice, not the instance's own.
	g.Expect(IsDefaultSource("default (RELATED_IMAGE_TILED)")).To(BeTrue())
	g.Expect(IsDefaultSource("default (expression)")).To(BeFalse())
	g.Expect(adminSource("default (RELATED_IMAGE_CACHE)")).To(BeTrue())
}

func TestFullImageReference(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]string{
		"postgres:16":                     "docker.io/library/postgres:16",
		"valkey/valkey:8.1":               "docker.io/valkey/valkey:8.1",
		"ghcr.io/bluesky/tiled:0.2.20":    "ghcr.io/bluesky/tiled:0.2.20",
		"localhost/tiled:dev":             "localhost/tiled:dev",
		"registry:5000/tiled:1":           "registry:5000/tiled:1",
		"docker.io/library/postgres:16.4": "docker.io/library/postgres:16.4",
		"docker.io/postgres:16":           "docker.io/library/postgres:16",
		"index.docker.io/valkey/valkey:8": "docker.io/valkey/valkey:8",
	} {
		g.Expect(FullImageReference(in)).To(Equal(want), in)
	}
}
