package render

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func monitored(ti *v1alpha1.TiledInstance) *v1alpha1.TiledInstance {
	ti.Spec.Monitoring = &v1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true), Interval: "20s"}
	return ti
}

// monitoringCases are instances with and without a ServiceMonitor, in single-user mode (generated and
// referenced key) and under OIDC.
var monitoringCases = []struct {
	name    string
	ti      func() *v1alpha1.TiledInstance
	in      Inputs
	monitor bool
}{
	{"single-user, off", singleUserManaged, Inputs{}, false},
	{"single-user, monitoring nil", func() *v1alpha1.TiledInstance {
		ti := singleUserManaged()
		ti.Spec.Monitoring = nil
		return ti
	}, Inputs{}, false},
	{"single-user, on", func() *v1alpha1.TiledInstance { return monitored(singleUserManaged()) }, Inputs{}, true},
	{"referenced key, on", existingClaim, Inputs{}, true},
	{"nfs, replicas, on", nfsScaled, Inputs{}, true},
	{"oidc, off", oidcExternal, Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}}, false},
	{"oidc, on", func() *v1alpha1.TiledInstance { return monitored(oidcExternal()) }, Inputs{ExternalSecretKeys: []string{ExternalKeyAuthURI}}, true},
}

// renderWithMetricsSecret renders ti with in's inputs, the instance's Secret and its metrics Secret
// present and the ServiceMonitor kind served.
func renderWithMetricsSecret(g Gomega, ti *v1alpha1.TiledInstance, in Inputs) *Objects {
	in.SecretData, in.MetricsSecretData, in.ServiceMonitorAvailable = secretData, metricsSecretData, true
	o, err := Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	return o
}

// TestMetricsSecretKeptWhenTurnedOff: monitoring turned off while the metrics Secret exists (its data
// given) renders the Secret as it is, and nothing that reads it: no sidecar, no ServiceMonitor, no
// metrics port. The Secret is kept, not pruned, on purpose (MetricsSecret; docs/observability.md says
// why); without data it is not rendered at all.
func TestMetricsSecretKeptWhenTurnedOff(t *testing.T) {
	for _, tc := range monitoringCases {
		if tc.monitor {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := renderWithMetricsSecret(g, tc.ti(), tc.in)
			g.Expect(o.MetricsSecret).NotTo(BeNil(), "kept while it exists")
			g.Expect(*o.MetricsSecret.Name).To(Equal(o.Names.MetricsSecret))
			g.Expect(o.MetricsSecret.Data).To(Equal(metricsSecretData), "the same token, for monitoring turned on again")
			g.Expect(o.ServiceMonitor).To(BeNil())
			g.Expect(podTemplates(g, o)["tiled"].Spec.Containers).To(HaveLen(1), "no sidecar reads it")
			g.Expect(o.Service.Spec.Ports).To(HaveLen(1))
		})
	}
}

// TestMetricsObjects: with spec.monitoring.serviceMonitor the Tiled pod gets the metrics sidecar,
// the Tiled container the metrics directory and the wrapper, the Service the metrics port, the
// ConfigMap metrics.py, and the metrics Secret exists; without it none of them, in both auth modes.
func TestMetricsObjects(t *testing.T) {
	for _, tc := range monitoringCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := tc.in
			in.SecretData, in.ServiceMonitorAvailable = secretData, true
			if tc.monitor {
				in.MetricsSecretData = metricsSecretData
			}
			o, err := Render(tc.ti(), in)
			g.Expect(err).NotTo(HaveOccurred())
			p := podTemplates(g, o)["tiled"]
			server := p.Spec.Containers[0]
			g.Expect(server.Name).To(Equal("tiled"))

			var ports []string
			for _, sp := range o.Service.Spec.Ports {
				ports = append(ports, *sp.Name)
			}
			var headless []string
			for _, sp := range o.HeadlessService.Spec.Ports {
				headless = append(headless, *sp.Name)
			}
			g.Expect(headless).To(Equal([]string{PortName}))

			if !tc.monitor {
				g.Expect(p.Spec.Containers).To(HaveLen(1))
				g.Expect(server.Command).To(Equal(ServeCommand()))
				g.Expect(envNames(server.Env)).NotTo(ContainElement(EnvMetricsDir))
				g.Expect(volumeNames(p.Spec.Volumes)).NotTo(ContainElement(metricsVolume))
				g.Expect(ports).To(Equal([]string{PortName}))
				g.Expect(o.ConfigMap.Data).NotTo(HaveKey(MetricsScriptKey))
				g.Expect(o.MetricsSecret).To(BeNil())
				g.Expect(o.ServiceMonitor).To(BeNil())
				return
			}

			g.Expect(p.Spec.Containers).To(HaveLen(2))
			g.Expect(server.Command).To(Equal(append([]string{"python", "/deploy/config/metrics.py", "exec"}, ServeCommand()...)))
			g.Expect(server.Env).To(ContainElement(corev1.EnvVar{Name: EnvMetricsDir, Value: MetricsDir}))
			g.Expect(server.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: metricsVolume, MountPath: MetricsDir}))
			g.Expect(p.Spec.Volumes).To(ContainElement(corev1.Volume{Name: metricsVolume,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}))
			g.Expect(ports).To(Equal([]string{PortName, MetricsPortName}))
			sp := o.Service.Spec.Ports[1]
			g.Expect(*sp.Port).To(BeNumerically("==", MetricsPort))
			g.Expect(*sp.TargetPort).To(Equal(intstr.FromString(MetricsPortName)))
			g.Expect(o.ConfigMap.Data).To(HaveKeyWithValue(MetricsScriptKey, MetricsScript()))

			side := p.Spec.Containers[1]
			g.Expect(side.Name).To(Equal(MetricsContainerName))
			g.Expect(side.Image).To(Equal(server.Image))
			g.Expect(side.ImagePullPolicy).To(Equal(server.ImagePullPolicy))
			g.Expect(side.Command).To(Equal([]string{"python", "/deploy/config/metrics.py", "serve"}))
			g.Expect(side.Ports).To(Equal([]corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}}))
			g.Expect(side.VolumeMounts).To(ConsistOf(
				corev1.VolumeMount{Name: "config", MountPath: ConfigDir, ReadOnly: true},
				corev1.VolumeMount{Name: metricsVolume, MountPath: MetricsDir, ReadOnly: true}))
			// The token comes from the metrics Secret; the sidecar sees no Tiled key or password.
			g.Expect(side.Env).To(ContainElement(corev1.EnvVar{Name: "METRICS_TOKEN", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: o.Names.MetricsSecret}, Key: SecretKeyMetricsToken}}}))
			for _, e := range side.Env {
				if e.ValueFrom != nil {
					g.Expect(e.Name).To(Equal("METRICS_TOKEN"))
				}
			}
			g.Expect(side.Env).To(ContainElement(corev1.EnvVar{Name: "METRICS_DIR", Value: MetricsDir}))
			g.Expect(side.Env).To(ContainElement(corev1.EnvVar{Name: "METRICS_PORT", Value: "9090"}))
			g.Expect(side.ReadinessProbe).To(BeNil(), "the sidecar's readiness would be the pod's: a slow metrics endpoint must not take Tiled out of its Service")
			g.Expect(side.Resources.Requests.Cpu().String()).To(Equal("10m"))
			g.Expect(side.Resources.Requests.Memory().String()).To(Equal("32Mi"))
			sc := side.SecurityContext
			g.Expect(*sc.RunAsNonRoot).To(BeTrue())
			g.Expect(*sc.AllowPrivilegeEscalation).To(BeFalse())
			g.Expect(*sc.ReadOnlyRootFilesystem).To(BeTrue())
			g.Expect(sc.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
			g.Expect(restrictedViolations(g, &p.ObjectMeta, &p.Spec)).To(BeEmpty())

			g.Expect(o.MetricsSecret).NotTo(BeNil())
			g.Expect(*o.MetricsSecret.Name).To(Equal(o.Names.MetricsSecret))
			g.Expect(o.MetricsSecret.Data).To(Equal(metricsSecretData))
			g.Expect(o.MetricsSecret.Labels).To(Equal(Labels(tc.ti(), ComponentServer)))
			g.Expect(o.ServiceMonitor).NotTo(BeNil())
		})
	}
}

func envNames(env []corev1.EnvVar) []string {
	var out []string
	for _, e := range env {
		out = append(out, e.Name)
	}
	return out
}

func volumeNames(vs []corev1.Volume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

// TestServiceMonitorPresentsTheMetricsToken: the ServiceMonitor scrapes the sidecar with the metrics
// Secret's token as a bearer token and names nothing else: not the instance's Secret, not a
// referenced API key Secret, not Tiled's Apikey scheme or path; in both auth modes.
func TestServiceMonitorPresentsTheMetricsToken(t *testing.T) {
	for _, tc := range monitoringCases {
		if !tc.monitor {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := renderWithMetricsSecret(g, tc.ti(), tc.in)
			sm := o.ServiceMonitor
			g.Expect(sm).NotTo(BeNil())
			eps := sm.Object["spec"].(map[string]any)["endpoints"].([]any)
			g.Expect(eps).To(HaveLen(1))
			ep := eps[0].(map[string]any)
			g.Expect(ep["port"]).To(Equal(MetricsPortName))
			g.Expect(ep["path"]).To(Equal(MetricsSidecarPath))
			if iv := tc.ti().Spec.Monitoring.Interval; iv != "" {
				g.Expect(ep["interval"]).To(Equal(iv))
			} else {
				g.Expect(ep).NotTo(HaveKey("interval"))
			}
			g.Expect(ep["authorization"]).To(Equal(map[string]any{
				"type":        "Bearer",
				"credentials": map[string]any{"name": o.Names.MetricsSecret, "key": SecretKeyMetricsToken},
			}))
			b, err := json.Marshal(sm.Object)
			g.Expect(err).NotTo(HaveOccurred())
			for _, s := range []string{o.Names.Secret, "iss-api-key", SecretKeyAPIKey, "Apikey", MetricsPath, "golden0"} {
				g.Expect(string(b)).NotTo(ContainSubstring(s))
			}
			// It selects the Tiled Service, which has the metrics port.
			sel := sm.Object["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
			for k, v := range sel {
				g.Expect(o.Service.Labels).To(HaveKeyWithValue(k, v))
			}
		})
	}

	// Asked for, but the CRD is absent: no ServiceMonitor; the sidecar and the Secret stay, so that
	// the CRD's arrival does not roll the pods.
	g := NewWithT(t)
	o, err := Render(existingClaim(), Inputs{SecretData: secretData, MetricsSecretData: metricsSecretData})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.ServiceMonitor).To(BeNil())
	g.Expect(o.MetricsSecret).NotTo(BeNil())
	g.Expect(podTemplates(g, o)["tiled"].Spec.Containers).To(HaveLen(2))
}

// TestMetricsSecretKeptWhenMonitoringStops: an instance that no longer asks for a ServiceMonitor keeps
// its metrics Secret as it is (the operator may not delete Secrets, so it must not stop rendering it:
// that would prune it), and nothing else of the sidecar.
func TestMetricsSecretKeptWhenMonitoringStops(t *testing.T) {
	g := NewWithT(t)
	o, err := Render(singleUserManaged(), Inputs{SecretData: secretData, MetricsSecretData: metricsSecretData, ServiceMonitorAvailable: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.MetricsSecret).NotTo(BeNil())
	g.Expect(o.MetricsSecret.Data).To(Equal(metricsSecretData))
	g.Expect(o.ServiceMonitor).To(BeNil())
	g.Expect(podTemplates(g, o)["tiled"].Spec.Containers).To(HaveLen(1))
	g.Expect(o.Service.Spec.Ports).To(HaveLen(1))
	g.Expect(o.ConfigMap.Data).NotTo(HaveKey(MetricsScriptKey))
	gen, err := GenerateMetricsSecretData(singleUserManaged(), nil, rand.New(rand.NewSource(1)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gen).To(BeEmpty(), "nothing is generated without a ServiceMonitor")
}

// TestMetricsTokenGeneratedOnce: the token is generated when monitoring is asked for and none exists,
// then kept: existing data is never regenerated; nothing is generated without monitoring.
func TestMetricsTokenGeneratedOnce(t *testing.T) {
	cases := []struct {
		name     string
		ti       *v1alpha1.TiledInstance
		existing map[string][]byte
		want     int // generated keys
	}{
		{"off: nothing", singleUserManaged(), nil, 0},
		{"oidc off: nothing", oidcExternal(), nil, 0},
		{"on, none yet: a token", existingClaim(), nil, 1},
		{"oidc on, none yet: a token", monitored(oidcExternal()), map[string][]byte{}, 1},
		{"on, empty token: a token", nfsScaled(), map[string][]byte{SecretKeyMetricsToken: {}}, 1},
		{"on, token exists: kept", nfsScaled(), map[string][]byte{SecretKeyMetricsToken: []byte("kept")}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			gen, err := GenerateMetricsSecretData(tc.ti, tc.existing, rand.New(rand.NewSource(1)))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(gen).To(HaveLen(tc.want))
			if tc.want == 1 {
				g.Expect(string(gen[SecretKeyMetricsToken])).To(MatchRegexp(`^[A-Za-z0-9]{48}$`))
			}
		})
	}

	g := NewWithT(t)
	rng := rand.New(rand.NewSource(3))
	existing := map[string][]byte{}
	gen, err := GenerateMetricsSecretData(nfsScaled(), existing, rng)
	g.Expect(err).NotTo(HaveOccurred())
	for k, v := range gen {
		existing[k] = v
	}
	token := string(existing[SecretKeyMetricsToken])
	for range 50 {
		more, err := GenerateMetricsSecretData(nfsScaled(), existing, rng)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(more).To(BeEmpty())
	}
	g.Expect(string(existing[SecretKeyMetricsToken])).To(Equal(token))
	// The rendered Secret holds the data as given: the kept token.
	o, err := Render(nfsScaled(), Inputs{SecretData: secretData, MetricsSecretData: existing})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(o.MetricsSecret.Data[SecretKeyMetricsToken])).To(Equal(token))
	// The token is distinct from the instance's generated API key even from the same seed.
	apiGen, _ := GenerateSecretData(nfsScaled(), nil, rand.New(rand.NewSource(3)))
	g.Expect(apiGen[SecretKeyAPIKey]).NotTo(BeNil())
	g.Expect(o.Secret.Data).NotTo(HaveKey(SecretKeyMetricsToken), "the token is not in the instance's Secret")

	_, err = GenerateMetricsSecretData(nfsScaled(), nil, strings.NewReader("short"))
	g.Expect(err).To(HaveOccurred())
}

// TestMetricsDirCannotBeOverridden: spec.tiled.env cannot point Tiled's metrics elsewhere (the sidecar
// would read an empty directory); without monitoring the variable passes as any other.
func TestMetricsDirCannotBeOverridden(t *testing.T) {
	g := NewWithT(t)
	for _, on := range []bool{false, true} {
		ti := singleUserManaged()
		if on {
			monitored(ti)
		}
		ti.Spec.Tiled.Env = []v1alpha1.EnvVar{{Name: EnvMetricsDir, Value: ptr.To("/elsewhere")}}
		o, err := Render(ti, Inputs{SecretData: secretData})
		g.Expect(err).NotTo(HaveOccurred())
		server, migrate := tiledContainers(g, o)
		var values []string
		for _, e := range server.Env {
			if e.Name == EnvMetricsDir {
				values = append(values, e.Value)
			}
		}
		if on {
			g.Expect(values).To(Equal([]string{MetricsDir}))
		} else {
			g.Expect(values).To(Equal([]string{"/elsewhere"}))
		}
		g.Expect(envNames(migrate.Env)).To(ContainElement(EnvMetricsDir), "the init container keeps spec.tiled.env as it is")
	}
}

// TestMetricsConfigHash: the config hash of an instance without monitoring is the hash of config.yml
// and entrypoint.py alone, as before the sidecar existed; turning monitoring on changes it (metrics.py
// joins the ConfigMap), so the pods roll with the new containers anyway.
func TestMetricsConfigHash(t *testing.T) {
	g := NewWithT(t)
	off := singleUserManaged()
	_, hashOff, err := ConfigMap(off, Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	b, err := ConfigYAML(off, Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hashOff).To(Equal(Hash(b, []byte(Entrypoint()))))
	_, hashOn, err := ConfigMap(monitored(singleUserManaged()), Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hashOn).NotTo(Equal(hashOff))
	g.Expect(MetricsScript()).To(ContainSubstring("def serve("))
}
