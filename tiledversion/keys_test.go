package tiledversion

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"
)

func TestLacking(t *testing.T) {
	for _, tc := range []struct {
		version, path string
		lacks         bool
		why           string
	}{
		// catalog.top_level_access_tags replaced catalog.top_level_access_blob in 0.2.19.
		{"0.2.14", "catalog.top_level_access_tags", true, "it was added in 0.2.19; it replaces catalog.top_level_access_blob"},
		{"0.2.18", "catalog.top_level_access_tags", true, "it was added in 0.2.19; it replaces catalog.top_level_access_blob"},
		{"0.2.19", "catalog.top_level_access_tags", false, ""},
		{"0.2.20", "catalog.top_level_access_tags", false, ""},
		{"0.2.14", "catalog.top_level_access_blob", false, ""},
		{"0.2.18", "catalog.top_level_access_blob", false, ""},
		{"0.2.19", "catalog.top_level_access_blob", true, "0.2.18 was the last release with it; catalog.top_level_access_tags replaces it"},
		{"0.2.20", "catalog.top_level_access_blob", true, "0.2.18 was the last release with it; catalog.top_level_access_tags replaces it"},
		// Redis Sentinel came in 0.2.15.
		{"0.2.14", "streaming_cache.sentinels", true, "it was added in 0.2.15"},
		{"0.2.14", "streaming_cache.service_name", true, "it was added in 0.2.15"},
		{"0.2.14", "streaming_cache.password", true, "it was added in 0.2.15"},
		{"0.2.14", "streaming_cache.ssl", true, "it was added in 0.2.15"},
		{"0.2.14", "streaming_cache.health_check_interval", true, "it was added in 0.2.15"},
		{"0.2.15", "streaming_cache.sentinels", false, ""},
		{"0.2.20", "streaming_cache.ssl", false, ""},
		// The webhooks' delivery policy came in 0.2.18.
		{"0.2.17", "webhooks.blocked_networks", true, "it was added in 0.2.18"},
		{"0.2.17", "webhooks.allow_delivery_hosts", true, "it was added in 0.2.18"},
		{"0.2.18", "webhooks.blocked_networks", false, ""},
		{"0.2.20", "webhooks.allow_delivery_hosts", false, ""},
		// Keys every release has, and parents of keys of the table.
		{"0.2.14", "streaming_cache.uri", false, ""},
		{"0.2.14", "webhooks.secret_keys", false, ""},
		{"0.2.14", "catalog", false, ""},
		{"0.2.14", "catalog.top_level_access", false, ""},
		// A path beneath a key of the table is lacking with it.
		{"0.2.14", "catalog.top_level_access_tags.0", true, "it was added in 0.2.19; it replaces catalog.top_level_access_blob"},
		// Outside the range, the bounds hold as they are.
		{"0.3.0", "catalog.top_level_access_tags", false, ""},
		{"0.3.0", "catalog.top_level_access_blob", true, "0.2.18 was the last release with it; catalog.top_level_access_tags replaces it"},
		{"0.2.10", "streaming_cache.sentinels", true, "it was added in 0.2.15"},
		// A version that does not parse lacks nothing this table could say.
		{"latest", "catalog.top_level_access_tags", false, ""},
		{"", "catalog.top_level_access_tags", false, ""},
	} {
		t.Run(tc.version+"/"+tc.path, func(t *testing.T) {
			g := NewWithT(t)
			why, lacks := Lacking(tc.version, tc.path)
			g.Expect(lacks).To(Equal(tc.lacks))
			g.Expect(why).To(Equal(tc.why))
			g.Expect(Lacks(tc.version, tc.path)).To(Equal(tc.lacks))
		})
	}
}

func TestKeysLacking(t *testing.T) {
	all := []string{"catalog.uri", "catalog.top_level_access_blob", "catalog.top_level_access_tags",
		"streaming_cache.uri", "streaming_cache.sentinels", "webhooks.blocked_networks"}
	for _, tc := range []struct {
		version string
		want    []string
	}{
		{"0.2.14", []string{"catalog.top_level_access_tags", "streaming_cache.sentinels", "webhooks.blocked_networks"}},
		{"0.2.15", []string{"catalog.top_level_access_tags", "webhooks.blocked_networks"}},
		{"0.2.16", []string{"catalog.top_level_access_tags", "webhooks.blocked_networks"}},
		{"0.2.17", []string{"catalog.top_level_access_tags", "webhooks.blocked_networks"}},
		{"0.2.18", []string{"catalog.top_level_access_tags"}},
		{"0.2.19", []string{"catalog.top_level_access_blob"}},
		{"0.2.20", []string{"catalog.top_level_access_blob"}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			NewWithT(t).Expect(KeysLacking(tc.version, all)).To(Equal(tc.want))
		})
	}
}

// The table is well formed: sorted, one entry a path, each bound a version within the supported
// range, and the newest release lacks no key of it but those removed.
func TestKeysTable(t *testing.T) {
	g := NewWithT(t)
	ks := Keys()
	g.Expect(ks).NotTo(BeEmpty())
	g.Expect(slices.IsSortedFunc(ks, func(a, b Key) int {
		if a.Path < b.Path {
			return -1
		}
		if a.Path > b.Path {
			return 1
		}
		return 0
	})).To(BeTrue(), "sorted by path")
	seen := map[string]bool{}
	for _, k := range ks {
		g.Expect(seen[k.Path]).To(BeFalse(), "one entry for %s", k.Path)
		seen[k.Path] = true
		g.Expect(k.Since != "" || k.Until != "").To(BeTrue(), "%s has a bound", k.Path)
		for _, b := range []string{k.Since, k.Until} {
			if b != "" {
				g.Expect(Supported(b)).To(BeTrue(), "%s: %s is within the supported range", k.Path, b)
			}
		}
		if k.Since != "" {
			g.Expect(Lacks(Oldest, k.Path)).To(BeTrue(), "%s: added within the range, so the oldest lacks it", k.Path)
		}
		g.Expect(Lacks(Newest, k.Path)).To(Equal(k.Until != ""), k.Path)
	}
	// Keys returns a copy.
	ks[0].Path = "changed"
	g.Expect(Keys()[0].Path).NotTo(Equal("changed"))
}
