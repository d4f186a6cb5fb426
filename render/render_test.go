package render

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

type fixture struct {
	name string
	ti   func() *v1alpha1.TiledInstance
	in   Inputs
}

var secretData = map[string][]byte{
	SecretKeyAPIKey:           []byte("golden0api0key"),
	SecretKeySecretKeys:       []byte(`["golden0signing0key"]`),
	SecretKeyDatabasePassword: []byte("golden0password"),
}

func fixtures() []fixture {
	return []fixture{
		{"single-user-managed", singleUserManaged, Inputs{SecretData: secretData}},
		{"oidc-external", oidcExternal, Inputs{SecretData: secretData, ExternalSecretKeys: []string{"uri", ExternalKeyStorageURI, ExternalKeyAuthURI}}},
		{"nfs-scaled", nfsScaled, Inputs{SecretData: secretData, ServiceMonitorAvailable: true}},
		{"existing-claim", existingClaim, Inputs{SecretData: secretData}}, // ServiceMonitor CRD absent
	}
}

// objectsYAML serializes every rendered object, in a fixed order, as one multi-document YAML.
func objectsYAML(o *Objects) ([]byte, error) {
	var docs []any
	for _, v := range o.All() {
		if u, ok := v.(*unstructured.Unstructured); ok {
			v = u.Object
		}
		docs = append(docs, v)
	}
	var buf bytes.Buffer
	for _, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

func TestGolden(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := objectsYAML(o)
			g.Expect(err).NotTo(HaveOccurred())
			path := filepath.Join("testdata", f.name+".yaml")
			if *update {
				g.Expect(os.WriteFile(path, got, 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(path)
			g.Expect(err).NotTo(HaveOccurred(), "run go test ./render -update to create it")
			g.Expect(string(got)).To(Equal(string(want)))
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			first, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			a, _ := objectsYAML(first)
			for range 20 {
				o, err := Render(f.ti(), f.in)
				g.Expect(err).NotTo(HaveOccurred())
				b, _ := objectsYAML(o)
				g.Expect(b).To(Equal(a))
			}
		})
	}
}

// podTemplates converts every pod template rendered for the fixture into core types.
func podTemplates(g Gomega, o *Objects) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	conv := func(name string, tpl *corev1ac.PodTemplateSpecApplyConfiguration) {
		b, err := json.Marshal(tpl)
		g.Expect(err).NotTo(HaveOccurred())
		var p corev1.PodTemplateSpec
		g.Expect(json.Unmarshal(b, &p)).To(Succeed())
		out[name] = p
	}
	conv("tiled", o.StatefulSet.Spec.Template)
	if o.Postgres != nil {
		conv("postgres", o.Postgres.Spec.Template)
	}
	return out
}

func restrictedViolations(g Gomega, meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	lv := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	var out []string
	for _, r := range ev.EvaluatePod(lv, meta, spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

func TestRestrictedPodSecurityStandard(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			for name, p := range podTemplates(g, o) {
				g.Expect(restrictedViolations(g, &p.ObjectMeta, &p.Spec)).To(BeEmpty(), name)
			}
		})
	}
}

// The check must be able to fail: break the rendered template in ways the standard forbids.
func TestRestrictedPodSecurityStandardCatchesViolations(t *testing.T) {
	g := NewWithT(t)
	o, err := Render(nfsScaled(), Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	breakers := map[string]func(*corev1.PodSpec){
		"inline nfs volume": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}})
		},
		"privilege escalation": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
		"root user":            func(s *corev1.PodSpec) { s.InitContainers[0].SecurityContext.RunAsUser = ptr.To[int64](0) },
		"capabilities kept": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		},
		"no seccomp": func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = nil
			s.Containers[0].SecurityContext.SeccompProfile = nil
		},
	}
	for name, brk := range breakers {
		p := podTemplates(g, o)["tiled"]
		brk(&p.Spec)
		g.Expect(restrictedViolations(g, &p.ObjectMeta, &p.Spec)).NotTo(BeEmpty(), name)
	}
}

func TestSecretGenerationNeverOverwrites(t *testing.T) {
	g := NewWithT(t)
	rng := rand.New(rand.NewSource(1))
	ti := singleUserManaged()
	existing := map[string][]byte{}
	gen, err := GenerateSecretData(ti, existing, rng)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gen).To(HaveLen(3))
	g.Expect(string(gen[SecretKeyAPIKey])).To(MatchRegexp(`^[A-Za-z0-9]{48}$`))
	g.Expect(string(gen[SecretKeyDatabasePassword])).To(MatchRegexp(`^[A-Za-z0-9]{32}$`))
	var keys []string
	g.Expect(json.Unmarshal(gen[SecretKeySecretKeys], &keys)).To(Succeed())
	g.Expect(keys).To(HaveLen(1))
	g.Expect(keys[0]).To(MatchRegexp(`^[A-Za-z0-9]{64}$`))
	for k, v := range gen {
		existing[k] = v
	}
	snapshot := map[string]string{}
	for k, v := range existing {
		snapshot[k] = string(v)
	}
	for i := range 100 {
		more, err := GenerateSecretData(ti, existing, rng)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(more).To(BeEmpty(), "call %d", i)
		for k, v := range more {
			existing[k] = v
		}
	}
	for k, v := range existing {
		g.Expect(string(v)).To(Equal(snapshot[k]))
	}

	// A missing key is filled in; the others are left alone.
	delete(existing, SecretKeyDatabasePassword)
	more, err := GenerateSecretData(ti, existing, rng)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(more).To(HaveLen(1))
	g.Expect(more).To(HaveKey(SecretKeyDatabasePassword))
}

func TestSecretGenerationIsSeededAndKeyed(t *testing.T) {
	g := NewWithT(t)
	a, _ := GenerateSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(7)))
	b, _ := GenerateSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(7)))
	g.Expect(a).To(Equal(b))
	c, _ := GenerateSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(8)))
	g.Expect(c[SecretKeyAPIKey]).NotTo(Equal(a[SecretKeyAPIKey]))

	g.Expect(SecretKeys(oidcExternal())).To(Equal([]string{SecretKeySecretKeys}))
	g.Expect(SecretKeys(existingClaim())).To(Equal([]string{SecretKeyDatabasePassword, SecretKeySecretKeys}))

	_, err := GenerateSecretData(singleUserManaged(), nil, strings.NewReader("short"))
	g.Expect(err).To(HaveOccurred())
}

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

// Every container keeps its log's tail as its termination message, so that a crash loop's last log
// line reaches the instance's conditions; no container's command holds a secret.
func TestContainersReportTheirLastLogLine(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			for name, p := range podTemplates(g, o) {
				for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
					g.Expect(c.TerminationMessagePolicy).To(Equal(corev1.TerminationMessageFallbackToLogsOnError), "%s/%s", name, c.Name)
					g.Expect(strings.Join(append(c.Command, c.Args...), " ")).NotTo(ContainSubstring("golden0"), "%s/%s", name, c.Name)
				}
			}
		})
	}
}

func TestPostgresProbes(t *testing.T) {
	g := NewWithT(t)
	o, err := Render(singleUserManaged(), Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	c := podTemplates(g, o)["postgres"].Spec.Containers[0]
	g.Expect(c.StartupProbe).NotTo(BeNil())
	g.Expect(c.StartupProbe.PeriodSeconds).To(BeNumerically("==", 1))
	g.Expect(c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold).To(BeNumerically(">=", 300))
	g.Expect(c.ReadinessProbe.InitialDelaySeconds).To(BeZero())
	g.Expect(c.LivenessProbe.InitialDelaySeconds).To(BeZero(), "the startup probe holds liveness back")
	g.Expect(c.ReadinessProbe.Exec.Command).To(Equal([]string{"pg_isready", "-h", "127.0.0.1", "-U", DatabaseUser, "-d", CatalogDatabase}))
}

func TestRenderErrors(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	ti.Spec.Database = nil
	_, err := Render(ti, Inputs{})
	g.Expect(err).To(MatchError(ContainSubstring("spec.database")))

	_, err = Render(oidcExternal(), Inputs{ExternalSecretKeys: []string{"uri"}})
	g.Expect(err).To(MatchError(ContainSubstring(ExternalKeyAuthURI)))

	ti = oidcExternal()
	ti.Spec.Auth.OIDC.Admins = []string{"nobody"}
	_, err = Render(ti, Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}})
	g.Expect(err).To(MatchError(ContainSubstring("provider:id")))

	ti = singleUserManaged()
	ti.Spec.Tiled.Image = ""
	_, err = Render(ti, Inputs{})
	g.Expect(err).To(MatchError(ContainSubstring("spec.tiled.image")))

	ti = singleUserManaged()
	ti.Spec.Database.Managed.Image = ""
	_, err = Render(ti, Inputs{})
	g.Expect(err).To(MatchError(ContainSubstring("spec.database.managed.image")))
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

func TestLabelsOnEveryObject(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			y, _ := objectsYAML(o)
			for _, doc := range strings.Split(string(y), "---\n")[1:] {
				var obj struct {
					Kind     string            `json:"kind"`
					Metadata metav1.ObjectMeta `json:"metadata"`
				}
				g.Expect(yaml.Unmarshal([]byte(doc), &obj)).To(Succeed())
				for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
					v1alpha1.LabelManagedBy, v1alpha1.LabelCluster, v1alpha1.LabelInstance} {
					g.Expect(obj.Metadata.Labels).To(HaveKey(l), "%s %s", obj.Kind, obj.Metadata.Name)
				}
				g.Expect(obj.Metadata.Labels[v1alpha1.LabelManagedBy]).To(Equal(v1alpha1.ManagedByValue))
			}
		})
	}
}

func TestPodLabelsCannotReplaceOperatorLabels(t *testing.T) {
	g := NewWithT(t)
	o, _ := Render(nfsScaled(), Inputs{})
	g.Expect(o.StatefulSet.Spec.Template.Labels).To(HaveKeyWithValue("app.kubernetes.io/name", AppName))
	g.Expect(o.StatefulSet.Spec.Template.Labels).To(HaveKeyWithValue("team", "data"))
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestNames(t *testing.T) {
	g := NewWithT(t)
	long := baseInstance(strings.Repeat("x", 70))
	for _, ti := range []*v1alpha1.TiledInstance{singleUserManaged(), long} {
		n := NamesFor(ti)
		for _, s := range []string{n.Tiled, n.HeadlessService, n.ConfigMap, n.Secret, n.DataClaim, n.DataVolume, n.Postgres, n.PostgresInit, n.ReadOnlyClaimName("proposals"), n.ReadOnlyVolumeName("ns", "proposals")} {
			g.Expect(len(s)).To(BeNumerically("<=", 63), s)
			g.Expect(s).To(MatchRegexp(dnsLabel.String()), s)
		}
		g.Expect(len(n.Tiled)).To(BeNumerically("<=", 52))
		g.Expect(len(n.Postgres)).To(BeNumerically("<=", 52))
	}
	x, y := NamesFor(baseInstance(strings.Repeat("a", 60)+"1")).ConfigMap, NamesFor(baseInstance(strings.Repeat("a", 60)+"2")).ConfigMap
	g.Expect(x).NotTo(Equal(y))
	g.Expect(x).To(MatchRegexp(`-config-[0-9a-f]{8}$`))
}

func TestOptionalObjects(t *testing.T) {
	g := NewWithT(t)
	o, _ := Render(singleUserManaged(), Inputs{ServiceMonitorAvailable: true})
	g.Expect(o.Ingress).To(BeNil())
	g.Expect(o.PDB).To(BeNil())
	g.Expect(o.ServiceMonitor).To(BeNil()) // not asked for
	g.Expect(o.Volumes).To(BeEmpty())
	g.Expect(o.Postgres).NotTo(BeNil())
	g.Expect(o.StatefulSet.Spec.VolumeClaimTemplates).To(BeEmpty())
	g.Expect(o.Claims).To(HaveLen(2)) // data and database, the operator's own claims
	g.Expect(*o.Claims[0].Name).To(Equal(o.Names.DataClaim))
	g.Expect(*o.Claims[1].Name).To(Equal(o.Names.DatabaseClaim))
	g.Expect(o.Claims[0].Annotations).To(HaveKeyWithValue(AnnotationRetention, "Retain"))
	g.Expect(Retained(singleUserManaged())).To(BeTrue())

	o, _ = Render(nfsScaled(), Inputs{ServiceMonitorAvailable: true})
	g.Expect(o.PDB).NotTo(BeNil())
	g.Expect(o.ServiceMonitor).NotTo(BeNil())
	g.Expect(o.Volumes).To(HaveLen(2)) // NFS data + the NFS detector mount, not the existing claim
	g.Expect(o.StatefulSet.Spec.VolumeClaimTemplates).To(BeEmpty())
	for _, c := range o.Claims {
		g.Expect(*c.Name).NotTo(Equal(o.Names.DataClaim), "NFS data has no storage-class claim")
	}

	o, _ = Render(nfsScaled(), Inputs{ServiceMonitorAvailable: false})
	g.Expect(o.ServiceMonitor).To(BeNil())

	o, _ = Render(oidcExternal(), Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}, ServiceMonitorAvailable: true})
	g.Expect(o.Postgres).To(BeNil())
	g.Expect(o.Ingress).NotTo(BeNil())
}

func TestServiceMonitorUsesTiledAPIKeyScheme(t *testing.T) {
	g := NewWithT(t)
	o, _ := Render(existingClaim(), Inputs{ServiceMonitorAvailable: true})
	g.Expect(o.ServiceMonitor).NotTo(BeNil())
	eps := o.ServiceMonitor.Object["spec"].(map[string]any)["endpoints"].([]any)
	ep := eps[0].(map[string]any)
	g.Expect(ep["path"]).To(Equal(MetricsPath))
	g.Expect(ep["authorization"]).To(Equal(map[string]any{
		"type":        "Apikey", // Tiled reads `Authorization: Apikey <key>`
		"credentials": map[string]any{"name": "iss-api-key", "key": "key"},
	}))
	o, _ = Render(oidcExternal(), Inputs{ServiceMonitorAvailable: true, ExternalSecretKeys: []string{ExternalKeyAuthURI}})
	g.Expect(o.ServiceMonitor).To(BeNil())
}
