package render

import (
	"testing"

	"strings"

	. "github.com/onsi/gomega"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/tiledversion"
)

// supportedReleases are the releases of the supported range, oldest first.
var supportedReleases = []string{"0.2.14", "0.2.15", "0.2.16", "0.2.17", "0.2.18", "0.2.19", "0.2.20"}

func TestConfigEmitsOnlyKnownKeys(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := f.ti()
			ti.Spec.Config = nil
			cfg, err := Config(ti, f.in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(UnknownConfigKeys(cfg)).To(BeEmpty())
			b, err := ConfigYAML(ti, f.in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).NotTo(ContainSubstring("golden0"), "no secret value in config.yml")
		})
	}
	g := NewWithT(t)
	g.Expect(UnknownConfigKeys(map[string]any{
		"bogus":   1,
		"catalog": map[string]any{"uri": "x", "cache": 2},
		"trees":   []any{map[string]any{"anything": 1}},
		"uvicorn": map[string]any{"port": 1, "prt": 2},
	})).To(Equal([]string{"bogus", "catalog.cache", "uvicorn.prt"}))
}

// What the operator renders itself is accepted by every supported release: only spec.config can
// hold a key that a release lacks (and admission refuses it, see expansion's config check).
func TestConfigEmitsOnlyKeysEveryReleaseKnows(t *testing.T) {
	g := NewWithT(t)
	g.Expect(supportedReleases[0]).To(Equal(tiledversion.Oldest))
	g.Expect(supportedReleases[len(supportedReleases)-1]).To(Equal(tiledversion.Newest))
	for _, f := range fixtures() {
		for _, v := range supportedReleases {
			t.Run(f.name+"/"+v, func(t *testing.T) {
				g := NewWithT(t)
				ti := f.ti()
				ti.Spec.Config = nil
				cfg, err := Config(ti, f.in)
				g.Expect(err).NotTo(HaveOccurred())
				if s := ti.Spec.Streaming; s != nil && s.External != nil && s.External.Sentinel != nil && tiledversion.Lacks(v, "streaming_cache.sentinels") {
					// Redis Sentinel came in 0.2.15: admission refuses spec.streaming.external.sentinel
					// on an older release (expansion's streaming check), so these keys never reach it.
					g.Expect(UnknownConfigKeysFor(v, cfg)).To(ConsistOf("streaming_cache.password", "streaming_cache.sentinels",
						"streaming_cache.service_name", "streaming_cache.ssl"))
					return
				}
				g.Expect(UnknownConfigKeysFor(v, cfg)).To(BeEmpty())
			})
		}
	}
}

func TestUnknownConfigKeysFor(t *testing.T) {
	cfg := map[string]any{
		"bogus": 1,
		"catalog": map[string]any{"uri": "x", "cache": 2,
			"top_level_access_tags": []any{"public"}, "top_level_access_blob": map[string]any{"tags": []any{"public"}}},
		"streaming_cache": map[string]any{"sentinels": []any{"redis-0:26379"}, "service_name": "mymaster", "data_ttl": 60},
		"webhooks":        map[string]any{"blocked_networks": []any{"10.0.0.0/8"}, "allow_http": true},
		"trees":           []any{map[string]any{"args": map[string]any{"top_level_access_blob": 1}}},
	}
	for _, tc := range []struct {
		version string
		want    []string
	}{
		// An empty version checks against the union of the range only.
		{"", []string{"bogus", "catalog.cache"}},
		{"0.2.14", []string{"bogus", "catalog.cache", "catalog.top_level_access_tags",
			"streaming_cache.sentinels", "streaming_cache.service_name", "webhooks.blocked_networks"}},
		{"0.2.15", []string{"bogus", "catalog.cache", "catalog.top_level_access_tags", "webhooks.blocked_networks"}},
		{"0.2.17", []string{"bogus", "catalog.cache", "catalog.top_level_access_tags", "webhooks.blocked_networks"}},
		{"0.2.18", []string{"bogus", "catalog.cache", "catalog.top_level_access_tags"}},
		{"0.2.19", []string{"bogus", "catalog.cache", "catalog.top_level_access_blob"}},
		{"0.2.20", []string{"bogus", "catalog.cache", "catalog.top_level_access_blob"}},
	} {
		t.Run("version "+tc.version, func(t *testing.T) {
			NewWithT(t).Expect(UnknownConfigKeysFor(tc.version, cfg)).To(Equal(tc.want))
		})
	}
	g := NewWithT(t)
	g.Expect(UnknownConfigKeys(cfg)).To(Equal(UnknownConfigKeysFor(tiledversion.Newest, cfg)), "UnknownConfigKeys is the newest release's")
}

// Every key of tiledversion's table is a key of knownConfigKeys, the union of the range: the table
// only takes keys away.
func TestKnownConfigKeysHoldTheVersionTable(t *testing.T) {
	for _, k := range tiledversion.Keys() {
		g := NewWithT(t)
		known := knownConfigKeys
		parts := strings.Split(k.Path, ".")
		for i, p := range parts {
			g.Expect(known).To(HaveKey(p), k.Path)
			if i < len(parts)-1 {
				sub, ok := known[p].(map[string]any)
				g.Expect(ok).To(BeTrue(), "%s: %s lists its keys", k.Path, p)
				known = sub
			}
		}
		g.Expect(UnknownConfigKeysFor("", nested(parts))).To(BeEmpty(), k.Path)
	}
}

// nested builds {a: {b: {c: 1}}} of a path a.b.c.
func nested(parts []string) map[string]any {
	if len(parts) == 1 {
		return map[string]any{parts[0]: 1}
	}
	return map[string]any{parts[0]: nested(parts[1:])}
}

func TestConfigFragmentMergesOverRendered(t *testing.T) {
	g := NewWithT(t)
	cfg, err := Config(oidcExternal(), Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg["response_bytesize_limit"]).To(BeNumerically("==", 500000000))
	g.Expect(cfg["uvicorn"]).To(Equal(map[string]any{"host": "0.0.0.0", "port": Port, "proxy_headers": true}))
	g.Expect(cfg["database"]).To(HaveKeyWithValue("uri", "${AUTH_DATABASE_URI}"))
}

func TestConfigAndMigrateCommand(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	in := Inputs{DatabaseAddress: "127.0.0.1:5433"}
	b, err := ConfigYAML(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	// A managed database's URIs carry no credentials: PGUSER and PGPASSWORD do.
	g.Expect(string(b)).To(ContainSubstring("uri: postgresql://127.0.0.1:5433/catalog\n"))
	g.Expect(string(b)).To(ContainSubstring("- postgresql://127.0.0.1:5433/storage\n"))
	cmd, err := MigrateCommand(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd).To(Equal([]string{"python", "/deploy/config/entrypoint.py", "migrate", "--wait", "300",
		"--catalog", "postgresql://127.0.0.1:5433/catalog"}))
	cmd, err = MigrateCommand(oidcExternal(), Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd[5:]).To(Equal([]string{"--catalog", "${CATALOG_DATABASE_URI}", "--auth", "${AUTH_DATABASE_URI}"}))

	o, err := Render(ti, Inputs{SecretData: secretData})
	g.Expect(err).NotTo(HaveOccurred())
	spec := o.StatefulSet.Spec.Template.Spec
	env := map[string]*corev1ac.EnvVarApplyConfiguration{}
	for i := range spec.Containers[0].Env {
		env[*spec.Containers[0].Env[i].Name] = &spec.Containers[0].Env[i]
	}
	g.Expect(*env[EnvDatabaseUser].Value).To(Equal(DatabaseUser))
	g.Expect(*env[EnvDatabasePassword].ValueFrom.SecretKeyRef.Key).To(Equal(SecretKeyDatabasePassword))
	g.Expect(spec.InitContainers[0].Env).To(Equal(spec.Containers[0].Env))
}

// The entrypoint names the operator's environment variables as the render package does, and Tiled's
// command line is what the design says, run inside it.
func TestEntrypoint(t *testing.T) {
	g := NewWithT(t)
	py := Entrypoint()
	g.Expect(py).To(ContainSubstring(`URI_VARIABLES = ("` + EnvCatalogURI + `", "` + EnvAuthURI + `")`))
	g.Expect(py).To(ContainSubstring(`API_KEY_VARIABLE = "` + EnvAPIKey + `"`))
	g.Expect(ServeCommand()).To(Equal([]string{"python", ConfigDir + "/" + EntrypointKey,
		"serve", "config", "--host", "0.0.0.0", "--port", "8000", "--scalable"}))
	o, err := Render(singleUserManaged(), Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.ConfigMap.Data).To(HaveKeyWithValue(EntrypointKey, py))
	// The entrypoint is part of what the config hash covers: a new one rolls the pods.
	g.Expect(o.ConfigHash).To(Equal(Hash([]byte(o.ConfigMap.Data[ConfigKey]), []byte(py))))
	g.Expect(o.ConfigHash).NotTo(Equal(Hash([]byte(o.ConfigMap.Data[ConfigKey]))))
}

func TestConfigHashFollowsConfig(t *testing.T) {
	g := NewWithT(t)
	a, _ := Render(singleUserManaged(), Inputs{})
	ti := singleUserManaged()
	ti.Spec.Auth.AllowAnonymousAccess = ptr.To(true)
	b, _ := Render(ti, Inputs{})
	g.Expect(a.ConfigHash).NotTo(Equal(b.ConfigHash))
	g.Expect(a.StatefulSet.Spec.Template.Annotations).To(HaveKeyWithValue(ConfigHashAnnotation, a.ConfigHash))
	// Secrets are not part of the pod template: a regenerated value could not roll pods silently.
	c, _ := Render(singleUserManaged(), Inputs{SecretData: secretData})
	g.Expect(c.ConfigHash).To(Equal(a.ConfigHash))
}

// catalog-expected is written once the instance had a catalog, outside the config hash: writing it
// rolls no pod (an operator upgrade writes it into the ConfigMaps of instances that had one).
func TestCatalogExpectedOutsideTheHash(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	without, hashWithout, err := ConfigMap(ti, Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	with, hashWith, err := ConfigMap(ti, Inputs{CatalogExpected: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(without.Data).NotTo(HaveKey(CatalogExpectedKey), "a new instance initialises its catalog")
	g.Expect(with.Data).To(HaveKeyWithValue(CatalogExpectedKey, "true"))
	g.Expect(hashWith).To(Equal(hashWithout))
	g.Expect(CatalogExpectedKey).NotTo(HaveSuffix(".yml"), "Tiled reads every *.yml and *.yaml of the config directory")
	g.Expect(Entrypoint()).To(ContainSubstring(`"`+CatalogExpectedKey+`"`), "entrypoint.py reads the key's file")
}
