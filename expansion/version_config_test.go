package expansion

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// The expanded instance's spec.config is checked against the Tiled release of its final image: a
// key another release of the range has but that one lacks is refused, naming the key, the release,
// the image and why.
func TestConfigCheckedForTheInstancesRelease(t *testing.T) {
	const (
		tags = "config: {catalog: {top_level_access_tags: [public]}}"
		blob = "config: {catalog: {top_level_access_blob: {tags: [public]}}}"
	)
	for _, tc := range []struct {
		name, instance string
		field, reason  string // "" admits
	}{
		{"tags on 0.2.14", "tiled: {image: docker.io/local/tiled:0.2.14}\n" + tags,
			"spec.config.catalog.top_level_access_tags",
			"Unsupported value: Tiled 0.2.14 (image docker.io/local/tiled:0.2.14) has no configuration key catalog.top_level_access_tags (it was added in 0.2.19; it replaces catalog.top_level_access_blob)"},
		{"tags on 0.2.18", "tiled: {image: ghcr.io/bluesky/tiled:0.2.18}\n" + tags,
			"spec.config.catalog.top_level_access_tags", "Tiled 0.2.18 (image ghcr.io/bluesky/tiled:0.2.18) has no configuration key"},
		{"tags on 0.2.19", "tiled: {image: ghcr.io/bluesky/tiled:0.2.19}\n" + tags, "", ""},
		{"tags on the default image", tags, "", ""},
		{"blob on the default image", blob,
			"spec.config.catalog.top_level_access_blob",
			"Tiled 0.2.20 (image ghcr.io/bluesky/tiled:0.2.20) has no configuration key catalog.top_level_access_blob (0.2.18 was the last release with it; catalog.top_level_access_tags replaces it)"},
		{"blob on 0.2.14", "tiled: {image: docker.io/local/tiled:0.2.14}\n" + blob, "", ""},
		{"sentinels on 0.2.14", "tiled: {image: docker.io/local/tiled:0.2.14}\nconfig: {streaming_cache: {sentinels: ['redis:26379'], service_name: m}}",
			"spec.config.streaming_cache.sentinels", "(it was added in 0.2.15) (and 1 more: spec.config.streaming_cache.service_name)"},
		{"sentinels on 0.2.15", "tiled: {image: docker.io/local/tiled:0.2.15}\nconfig: {streaming_cache: {sentinels: ['redis:26379'], service_name: m}}", "", ""},
		{"blocked networks on 0.2.17", "tiled: {image: docker.io/local/tiled:0.2.17}\nconfig: {webhooks: {blocked_networks: [10.0.0.0/8]}}",
			"spec.config.webhooks.blocked_networks", "Tiled 0.2.17 (image docker.io/local/tiled:0.2.17) has no configuration key webhooks.blocked_networks (it was added in 0.2.18)"},
		// The stated version wins over the tag.
		{"stated version", "tiled: {image: 'registry.example.org/tiled@sha256:" + digest + "', version: 0.2.14}\n" + tags,
			"spec.config.catalog.top_level_access_tags",
			"Tiled 0.2.14 (image registry.example.org/tiled@sha256:" + digest + ", spec.tiled.version) has no configuration key catalog.top_level_access_tags"},
		{"stated version over a tag", "tiled: {image: ghcr.io/bluesky/tiled:0.2.14, version: 0.2.20}\n" + tags, "", ""},
		// An image that does not say its release is taken for the newest.
		{"digest", "tiled: {image: 'registry.example.org/tiled@sha256:" + digest + "'}\n" + blob,
			"spec.config.catalog.top_level_access_blob",
			"Tiled 0.2.20 (assumed: image registry.example.org/tiled@sha256:" + digest + " does not say its release; set spec.tiled.version) has no configuration key catalog.top_level_access_blob"},
		{"latest", "tiled: {image: ghcr.io/bluesky/tiled:latest}\n" + tags, "", ""},
		// A key no release knows is refused as before, whatever the release.
		{"unknown key", "tiled: {image: docker.io/local/tiled:0.2.14}\nconfig: {catalogue: {}}",
			"spec.config.catalogue", `supported values: "the keys of Tiled's configuration (releases 0.2.14 to 0.2.20)"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := &v1alpha1.TiledInstance{}
			in.Name, in.Namespace = "demo", testNS
			in.Spec.InstanceTemplate = *T(t, tc.instance)
			_, err := ExpandInstance(in, nil, DefaultBuiltins())
			if tc.field == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var ie *InvalidFieldError
			g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
			t.Log(err)
			g.Expect(ie.Field).To(Equal(tc.field))
			g.Expect(ie.Layer).To(Equal(SourceInstance))
			g.Expect(ie.Reason).To(ContainSubstring(tc.reason))
		})
	}
}

const digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// The check runs on the complete instance: the release is the final image's, whichever layer set
// it, and the refusal is laid at the door of the highest layer that set the key or the image.
func TestConfigCheckedForTheFinalImage(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}}
	for _, tc := range []struct {
		name     string
		profiles []v1alpha1.TiledProfile
		instance string
		layer    string // "" admits
	}{
		{"a profile pins 0.2.14, the instance sets the key",
			[]v1alpha1.TiledProfile{P(t, "old", 0, "tiled: {image: docker.io/local/tiled:0.2.14}")},
			"config: {catalog: {top_level_access_tags: [public]}}", SourceInstance},
		{"a profile sets the key, the instance pins 0.2.14",
			[]v1alpha1.TiledProfile{P(t, "tags", 0, "config: {catalog: {top_level_access_tags: [public]}}")},
			"tiled: {image: docker.io/local/tiled:0.2.14}", SourceInstance},
		{"a profile sets the key over an older profile's image",
			[]v1alpha1.TiledProfile{P(t, "old", 0, "tiled: {image: docker.io/local/tiled:0.2.14}"), P(t, "tags", 5, "config: {catalog: {top_level_access_tags: [public]}}")},
			"storage: {data: {size: 1Gi}}", "profile/tags@1"},
		{"the instance moves to 0.2.20 over a profile's 0.2.14",
			[]v1alpha1.TiledProfile{P(t, "old", 0, "tiled: {image: docker.io/local/tiled:0.2.14}")},
			"tiled: {image: ghcr.io/bluesky/tiled:0.2.20}\nconfig: {catalog: {top_level_access_tags: [public]}}", ""},
		{"the instance states the version of a profile's digest",
			[]v1alpha1.TiledProfile{P(t, "pinned", 0, "tiled: {image: 'registry.example.org/tiled@sha256:"+digest+"'}")},
			"tiled: {version: 0.2.14}\nconfig: {catalog: {top_level_access_blob: {}}}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := &v1alpha1.TiledInstance{}
			in.Name, in.Namespace = "demo", testNS
			in.Spec.ProfileSelector = sel
			in.Spec.InstanceTemplate = *T(t, tc.instance)
			_, err := ExpandInstance(in, tc.profiles, DefaultBuiltins())
			if tc.layer == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var ie *InvalidFieldError
			g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
			t.Log(err)
			g.Expect(ie.Field).To(Equal("spec.config.catalog.top_level_access_tags"))
			g.Expect(ie.Layer).To(Equal(tc.layer))
			g.Expect(ie.Reason).To(ContainSubstring("Tiled 0.2.14 (image docker.io/local/tiled:0.2.14) has no configuration key catalog.top_level_access_tags"))
		})
	}
}

// One layer is checked against the release it names itself (its image or its version); a layer
// that names none is left to the expanded instance.
func TestLayerCheckedForTheReleaseItNames(t *testing.T) {
	for _, tc := range []struct {
		name, layer string
		reason      string // "" admits
	}{
		{"image and key", "tiled: {image: docker.io/local/tiled:0.2.14}\nconfig: {catalog: {top_level_access_tags: [public]}}",
			"Tiled 0.2.14 (image docker.io/local/tiled:0.2.14) has no configuration key catalog.top_level_access_tags"},
		{"version and key", "tiled: {version: 0.2.14}\nconfig: {catalog: {top_level_access_tags: [public]}}",
			"Tiled 0.2.14 (spec.tiled.version) has no configuration key catalog.top_level_access_tags"},
		{"key alone", "config: {catalog: {top_level_access_tags: [public]}}", ""},
		{"old key alone", "config: {catalog: {top_level_access_blob: {}}}", ""},
		{"digest and key", "tiled: {image: 'registry.example.org/tiled@sha256:" + digest + "'}\nconfig: {catalog: {top_level_access_blob: {}}}", ""},
		{"unknown key alone", "config: {catalogue: {}}", "Unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := P(t, "p", 0, tc.layer)
			err := CheckProfile(&p)
			if tc.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			t.Log(err)
			g.Expect(err.Error()).To(ContainSubstring("profile/p@1"))
			g.Expect(err.Error()).To(ContainSubstring(tc.reason))
		})
	}
}

func TestTiledVersionChecked(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"0.2.14", true}, {"0.2.20", true}, {"0.3.0", true}, {"0.2", false}, {"v0.2.14", false}, {"latest", false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			g := NewWithT(t)
			tmpl := &v1alpha1.InstanceTemplate{Tiled: &v1alpha1.TiledServerSpec{Version: tc.version}}
			err := CheckLayer(SourceClusterTemplate, tmpl)
			if tc.ok {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var ie *InvalidFieldError
			g.Expect(errors.As(err, &ie)).To(BeTrue(), "%v", err)
			g.Expect(ie.Field).To(Equal("spec.tiled.version"))
			g.Expect(ie.Reason).To(ContainSubstring("must be a Tiled release x.y.z"))
		})
	}
	NewWithT(t).Expect(TiledVersion).To(Equal(tiledversion.Newest))
}
