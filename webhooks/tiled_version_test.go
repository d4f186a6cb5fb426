package webhooks_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

// A profile of its own facility, so that no cluster of the fixtures selects it.
const versionProfileHead = `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata:
  name: versioned
  labels: {facility: elsewhere}
spec:
`

const imageDigest = "registry.example.org/tiled@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Admission checks spec.config against the Tiled release of the image: a key that release lacks is
// refused, naming the key, the release and the image.
func TestConfigRefusedForTheImagesRelease(t *testing.T) {
	f := loadFixtures(t, ns)
	hs := handlers(f.reader())
	for _, tc := range []struct {
		name, handler, object string
		want                  []string // nil admits
	}{
		{"a profile on 0.2.14 with access tags", "validate-profile", versionProfileHead + `  tiled: {image: "docker.io/local/tiled:0.2.14"}
  config: {catalog: {top_level_access_tags: [public]}}`, []string{"TiledProfile beamlines/versioned refused",
			"spec.config.catalog.top_level_access_tags: Unsupported value: Tiled 0.2.14 (image docker.io/local/tiled:0.2.14) has no configuration key catalog.top_level_access_tags (it was added in 0.2.19"}},
		{"a profile on 0.2.20 with access tags", "validate-profile", versionProfileHead + `  tiled: {image: "docker.io/local/tiled:0.2.20"}
  config: {catalog: {top_level_access_tags: [public]}}`, nil},
		{"a standalone instance on 0.2.14 with access tags", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "docker.io/local/tiled:0.2.14"}
  config: {catalog: {top_level_access_tags: [public]}}`, []string{"TiledInstance beamlines/bad refused",
			"spec.config.catalog.top_level_access_tags", "Tiled 0.2.14 (image docker.io/local/tiled:0.2.14) has no configuration key catalog.top_level_access_tags"}},
		{"a standalone instance on 0.2.14 with access tags (mutating)", "mutate", admissiontable.InstanceHead + `  tiled: {image: "docker.io/local/tiled:0.2.14"}
  config: {catalog: {top_level_access_tags: [public]}}`, []string{"spec.config.catalog.top_level_access_tags", "Tiled 0.2.14"}},
		{"a standalone instance on the default image with the access blob", "mutate", admissiontable.InstanceHead + `  config: {catalog: {top_level_access_blob: {}}}`,
			[]string{"spec.config.catalog.top_level_access_blob", "Tiled 0.2.20 (image ghcr.io/bluesky/tiled:0.2.20) has no configuration key catalog.top_level_access_blob (0.2.18 was the last release with it"}},
		{"a standalone instance stating 0.2.14 for a digest", "mutate", admissiontable.InstanceHead + `  tiled: {image: "` + imageDigest + `", version: 0.2.14}
  config: {catalog: {top_level_access_blob: {}}}`, nil},
		{"a cluster on 0.2.17 with blocked networks", "validate-cluster", admissiontable.ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {tiled: {image: "docker.io/local/tiled:0.2.17"}, config: {webhooks: {blocked_networks: [10.0.0.0/8]}}}
  instances: [{name: a}]`, []string{"TiledCluster beamlines/bad refused", "spec.template", "spec.config.webhooks.blocked_networks", "Tiled 0.2.17", "(it was added in 0.2.18)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			resp := hs[tc.handler].Handle(context.Background(), request(t, admissionv1.Create, tc.object, nil))
			if tc.want == nil {
				g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
				return
			}
			g.Expect(resp.Allowed).To(BeFalse(), "allowed: %+v", resp.Result)
			t.Log(resp.Result.Message)
			for _, w := range tc.want {
				g.Expect(resp.Result.Message).To(ContainSubstring(w))
			}
		})
	}
}

// Admission warns when the image does not say its Tiled release, when the release is outside the
// supported range, and when a stated version disagrees with the image's tag.
func TestTiledVersionWarnings(t *testing.T) {
	f := loadFixtures(t, ns)
	hs := handlers(f.reader())
	const notSaid = "does not say its Tiled version; assuming 0.2.20"
	for _, tc := range []struct {
		name, handler, object string
		want                  []string
		not                   []string
	}{
		{"a profile with a digest", "validate-profile", versionProfileHead + `  tiled: {image: "` + imageDigest + `"}`,
			[]string{`TiledProfile beamlines/versioned: spec.tiled.image: "` + imageDigest + `" ` + notSaid + `, the newest supported, for its configuration and upgrades; set spec.tiled.version`}, nil},
		{"a profile with latest", "validate-profile", versionProfileHead + `  tiled: {image: "ghcr.io/bluesky/tiled:latest"}`,
			[]string{`"ghcr.io/bluesky/tiled:latest" ` + notSaid, "uses the tag latest"}, nil},
		{"a profile with a digest and a version", "validate-profile", versionProfileHead + `  tiled: {image: "` + imageDigest + `", version: 0.2.14}`,
			nil, []string{notSaid}},
		{"a profile with a tagged release", "validate-profile", versionProfileHead + `  tiled: {image: "docker.io/local/tiled:0.2.14"}`,
			nil, []string{"spec.tiled"}},
		{"a profile with a release too new", "validate-profile", versionProfileHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.3.1"}`,
			[]string{`spec.tiled.image: "ghcr.io/bluesky/tiled:0.3.1" runs Tiled 0.3.1, outside the supported range 0.2.14 to 0.2.20`}, nil},
		{"a profile stating a release too old", "validate-profile", versionProfileHead + `  tiled: {image: "` + imageDigest + `", version: 0.2.9}`,
			[]string{"spec.tiled.version: Tiled 0.2.9, outside the supported range 0.2.14 to 0.2.20"}, []string{notSaid}},
		{"a profile stating another release than its tag", "validate-profile", versionProfileHead + `  tiled: {image: "docker.io/local/tiled:0.2.14", version: 0.2.20}`,
			[]string{`spec.tiled.version: 0.2.20, but the image "docker.io/local/tiled:0.2.14" is tagged 0.2.14`}, nil},
		{"an expanded instance with a digest", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "` + imageDigest + `", resources: {limits: {memory: 1Gi}}}
provenance: {spec.tiled.image: instance}`, []string{`TiledInstance beamlines/bad: spec.tiled.image: "` + imageDigest + `" ` + notSaid}, nil},
		{"a cluster template with a digest", "validate-cluster", admissiontable.ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {tiled: {image: "` + imageDigest + `"}}
  instances: [{name: a}]`, []string{`TiledCluster beamlines/bad: spec.template: spec.tiled.image: "` + imageDigest + `" ` + notSaid}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			resp := hs[tc.handler].Handle(context.Background(), request(t, admissionv1.Create, tc.object, nil))
			g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
			all := strings.Join(resp.Warnings, "\n")
			t.Log(all)
			for _, w := range tc.want {
				g.Expect(all).To(ContainSubstring(w))
			}
			for _, w := range tc.not {
				g.Expect(all).NotTo(ContainSubstring(w))
			}
		})
	}
}
