package render

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
)

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
