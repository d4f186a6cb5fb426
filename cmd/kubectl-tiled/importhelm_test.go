package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
)

var (
	chartDefaultsFile = filepath.Join("testdata", "helm", "chart-defaults.yaml")
	chxCustomFile     = filepath.Join("testdata", "helm", "chx-custom.yaml")
)

// importAndExpand runs the command on a values file, decodes what it prints, and expands it with
// the engine the operator runs: the TiledInstance the operator would create, and the objects it
// would render for it.
func importAndExpand(t *testing.T, file string, args ...string) (*v1alpha1.TiledInstance, *render.Objects, map[string]any, string) {
	t.Helper()
	g := NewWithT(t)
	code, out, stderr := runCmd("", append([]string{"import-helm", file}, args...)...)
	g.Expect(code).To(Equal(0), stderr)
	objs, err := expansion.DecodeAll("import-helm", strings.NewReader(out))
	g.Expect(err).NotTo(HaveOccurred())
	var cluster *v1alpha1.TiledCluster
	var profiles []v1alpha1.TiledProfile
	for _, o := range objs {
		switch o := o.(type) {
		case *v1alpha1.TiledCluster:
			o.Namespace = "default"
			cluster = o
		case *v1alpha1.TiledProfile:
			o.Namespace = "default"
			profiles = append(profiles, *o)
		}
	}
	g.Expect(cluster).NotTo(BeNil())
	g.Expect(profiles).To(HaveLen(1))
	res, err := expansion.Expand(cluster, profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	instances := res.Objects()
	g.Expect(instances).To(HaveLen(1))
	ti := instances[0]
	in := render.Inputs{ExternalSecretKeys: []string{"uri", "auth-uri"}}
	rendered, err := render.Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := render.Config(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	return ti, rendered, cfg, stderr
}

// importAndExpandValues is importAndExpand of values given inline.
func importAndExpandValues(t *testing.T, values string, args ...string) (*v1alpha1.TiledInstance, *render.Objects, map[string]any, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return importAndExpand(t, file, args...)
}

func tiledPod(t *testing.T, o *render.Objects) corev1.PodSpec {
	t.Helper()
	b, err := json.Marshal(o.StatefulSet.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// The chart's default values: one replica, no anonymous access, the API key from the tiled-secrets
// Secret, a ClusterIP Service on 8000, no Ingress, image pulled Always. Nothing is left out.
func TestImportHelmChartDefaults(t *testing.T) {
	g := NewWithT(t)
	ti, rendered, cfg, stderr := importAndExpand(t, chartDefaultsFile)
	g.Expect(stderr).To(BeEmpty(), "the chart's defaults all have an equivalent")

	s := ti.Spec
	g.Expect(*s.Tiled.Replicas).To(Equal(int32(1)))
	g.Expect(s.Tiled.ImagePullPolicy).To(Equal(corev1.PullAlways))
	g.Expect(s.Tiled.Image).To(Equal(expansion.TiledImage))
	g.Expect(*s.Auth.AllowAnonymousAccess).To(BeFalse())
	g.Expect(s.Auth.SingleUserAPIKey.SecretRef).To(Equal(&v1alpha1.SecretKeyRef{Name: "tiled-secrets", Key: "TILED_SINGLE_USER_API_KEY"}))
	g.Expect(s.Expose.Service.Type).To(Equal(corev1.ServiceTypeClusterIP))
	g.Expect(s.Expose.Ingress).To(BeNil())

	// The workload: the same settings where the chart has them.
	g.Expect(*rendered.StatefulSet.Spec.Replicas).To(Equal(int32(1)))
	g.Expect(rendered.Ingress).To(BeNil())
	g.Expect(*rendered.Service.Spec.Type).To(Equal(corev1.ServiceTypeClusterIP))
	g.Expect(*rendered.Service.Spec.Ports[0].Port).To(Equal(int32(8000)))
	pod := tiledPod(t, rendered)
	g.Expect(pod.Containers[0].ImagePullPolicy).To(Equal(corev1.PullAlways))
	// The chart's probes were /healthz; the operator's liveness is too, its readiness asks more (ready.py).
	g.Expect(pod.Containers[0].LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
	g.Expect(pod.Containers[0].ReadinessProbe.Exec.Command).To(Equal(render.ReadyCommand()))
	g.Expect(cfg["authentication"]).To(HaveKeyWithValue("allow_anonymous_access", false))
	g.Expect(cfg["catalog"]).To(HaveKey("uri")) // a catalog at /, as the chart's tree
}

// A customised release: everything with an equivalent reaches the workload; the rest is listed.
func TestImportHelmCustomised(t *testing.T) {
	g := NewWithT(t)
	ti, rendered, cfg, stderr := importAndExpand(t, chxCustomFile, "--name", "nsls2", "--instance", "chx")
	g.Expect(ti.Name).To(Equal("nsls2-chx"))

	s := ti.Spec
	g.Expect(s.Tiled.Image).To(Equal("ghcr.io/bluesky/tiled:0.2.3"))
	g.Expect(s.Tiled.ImagePullPolicy).To(Equal(corev1.PullIfNotPresent))
	// The chart's autoscaler (2 to 6 pods at 70% CPU), whose replicaCount the chart then ignores.
	g.Expect(s.Tiled.Autoscaling).To(Equal(&v1alpha1.AutoscalingSpec{Enabled: ptr.To(true), MinReplicas: ptr.To[int32](2),
		MaxReplicas: ptr.To[int32](6), TargetCPUUtilizationPercentage: ptr.To[int32](70), ScaleDownStabilizationSeconds: ptr.To[int32](300)}))
	g.Expect(s.Tiled.Resources.Requests.Cpu().Equal(resource.MustParse("2"))).To(BeTrue())
	g.Expect(s.Tiled.Resources.Limits.Memory().Equal(resource.MustParse("16Gi"))).To(BeTrue())
	g.Expect(s.Tiled.ServiceAccountName).To(Equal("tiled-chx"))
	g.Expect(s.Database.External.URISecretRef).To(Equal(&v1alpha1.SecretKeyRef{Name: "tiled-chx-postgres", Key: "uri"}))
	g.Expect(s.Database.Managed).To(BeNil())
	g.Expect(s.Storage.Data.ExistingClaimName).To(Equal("tiled-chx-storage"))
	g.Expect(s.Storage.ReadOnlyMounts).To(ConsistOf(v1alpha1.ReadOnlyMount{
		Name: "proposals", MountPath: "/nsls2/data/chx/proposals",
		NFS: &v1alpha1.NFSVolumeSource{Server: "nfs.nsls2.bnl.gov", Path: "/nsls2/data/chx/proposals"},
	}))
	g.Expect(s.Auth.SingleUserAPIKey).To(BeNil())
	g.Expect(s.Auth.OIDC.Providers).To(ConsistOf(v1alpha1.OIDCProvider{
		Name: "orcid", ClientID: "APP-CHX-TILED", WellKnownURI: "https://orcid.org/.well-known/openid-configuration",
		ClientSecretRef: &v1alpha1.SecretKeyRef{Name: "tiled-chx-orcid", Key: "client-secret"},
	}))
	g.Expect(s.Auth.OIDC.Admins).To(Equal([]string{"orcid:0000-0001-2345-6789"}))

	// The workload.
	pod := tiledPod(t, rendered)
	g.Expect(rendered.StatefulSet.Spec.Replicas).To(BeNil(), "left to the autoscaler")
	g.Expect(rendered.HPA).NotTo(BeNil())
	g.Expect(rendered.HPA.Spec.MinReplicas).To(HaveValue(Equal(int32(2))))
	g.Expect(*rendered.HPA.Spec.MaxReplicas).To(Equal(int32(6)))
	g.Expect(pod.NodeSelector).To(HaveKeyWithValue("nsls2.bnl.gov/zone", "chx"))
	g.Expect(pod.Tolerations).To(ContainElement(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tiled", Effect: corev1.TaintEffectNoSchedule}))
	g.Expect(pod.ServiceAccountName).To(Equal("tiled-chx"))
	g.Expect(pod.Containers[0].Image).To(Equal("ghcr.io/bluesky/tiled:0.2.3"))
	g.Expect(pod.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "HDF5_USE_FILE_LOCKING", Value: "FALSE"}))
	g.Expect(rendered.Ingress).NotTo(BeNil())
	g.Expect(*rendered.Ingress.Spec.Rules[0].Host).To(Equal("chx.tiled.nsls2.bnl.gov"))
	g.Expect(rendered.Ingress.Spec.TLS[0].SecretName).To(HaveValue(Equal("chx-tiled-tls")))
	g.Expect(*rendered.Ingress.Spec.IngressClassName).To(Equal("nginx"))
	g.Expect(rendered.Ingress.Annotations).To(HaveKeyWithValue("nginx.ingress.kubernetes.io/proxy-body-size", "1g"))
	g.Expect(rendered.Postgres).To(BeNil(), "the external database is used, none is created")
	g.Expect(cfg).To(HaveKeyWithValue("response_bytesize_limit", BeNumerically("==", 500000000)))
	g.Expect(cfg).NotTo(HaveKey("object_cache"), "Tiled 0.2.20 does not know it")
	auth := cfg["authentication"].(map[string]any)
	g.Expect(auth["providers"]).To(HaveLen(1))
	g.Expect(cfg["catalog"]).To(HaveKeyWithValue("readable_storage", ContainElement("/nsls2/data/chx/proposals")))

	// The pods' identity, pull secrets and affinity carry over.
	g.Expect(s.Tiled.ImagePullSecrets).To(Equal([]v1alpha1.LocalObjectReference{{Name: "ghcr-pull"}}))
	g.Expect(*s.Tiled.RunAsUser).To(Equal(int64(1000)))
	g.Expect(*s.Tiled.FSGroup).To(Equal(int64(2000)))
	g.Expect(pod.SecurityContext.RunAsUser).To(HaveValue(Equal(int64(1000))))
	g.Expect(pod.SecurityContext.FSGroup).To(HaveValue(Equal(int64(2000))))
	g.Expect(pod.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "ghcr-pull"}}))
	g.Expect(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(HaveLen(1))

	// What has no equivalent is listed, each key once, on standard error.
	for _, key := range []string{"config.uvicorn", "config.authentication.secret_keys",
		"config.object_cache", "fullnameOverride", "extraEnvVars[0]", "extraEnvVars[4]"} {
		g.Expect(stderr).To(ContainSubstring("\n  "+key+": "), key)
	}
	g.Expect(stderr).To(ContainSubstring("6 keys"))
}

// Every key of the values appears in the report with what became of it: none is dropped silently.
func TestImportHelmAccountsForEveryKey(t *testing.T) {
	for _, file := range []string{chartDefaultsFile, chxCustomFile} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(file)
			g.Expect(err).NotTo(HaveOccurred())
			var values map[string]any
			g.Expect(yaml.Unmarshal(data, &values)).To(Succeed())
			h := importHelm(values)
			var leaves []string
			leafPaths("", values, &leaves)
			g.Expect(leaves).NotTo(BeEmpty())
			for _, l := range leaves {
				d, ok := h.got[l]
				g.Expect(ok).To(BeTrue(), "no disposition for %s", l)
				g.Expect([]string{carried, handled, chartValue, notCarried}).To(ContainElement(d.kind), l)
			}
			_, out, _ := runCmd("", "import-helm", file)
			lines, _ := h.report()
			for _, l := range lines {
				g.Expect(out).To(ContainSubstring("#   " + l + "\n"))
			}
		})
	}
}

// Keys the command knows nothing about are reported, never dropped; --strict fails on them.
func TestImportHelmUnknownKeys(t *testing.T) {
	g := NewWithT(t)
	values := `replicaCount: 3
extraContainers:
- name: sidecar
  image: busybox
image: {repository: ghcr.io/bluesky/tiled, tag: "0.2.20", pullPolicy: IfNotPresent}
config:
  trees:
  - {path: /, tree: catalog, args: {uri: "sqlite:////storage/catalog.db", writable_storage: /storage/data}}
  - {path: /raw, tree: "tiled.examples.generated_minimal:tree"}
`
	code, out, stderr := runCmd(values, "import-helm", "-")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stderr).To(ContainSubstring("extraContainers[0].image: no equivalent"))
	g.Expect(stderr).To(ContainSubstring("extraContainers[0].name: no equivalent"))
	g.Expect(stderr).To(ContainSubstring("config.trees[1]: the operator serves one catalog"))
	g.Expect(out).To(ContainSubstring("replicas: 3"))

	code, out, stderr = runCmd(values, "import-helm", "-", "--strict")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("not carried over (--strict)"))
	g.Expect(out).To(BeEmpty(), "--strict failed: nothing to redirect into a file and apply")

	code, _, stderr = runCmd("", "import-helm")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("accepts 1 arg"))
	code, _, stderr = runCmd("a: [", "import-helm", "-")
	g.Expect(code).To(Equal(1))
	g.Expect(bytes.Contains([]byte(stderr), []byte("error"))).To(BeTrue())
}

var update = flag.Bool("update", false, "rewrite the golden files of testdata/helm (*.fates)")

// helmFiles are the values files of the tests: the upstream chart's defaults, a customised release,
// and two facility-style files written for the tests (one an umbrella chart's).
var helmFiles = []struct {
	file string
	args []string
}{
	{file: chartDefaultsFile},
	{file: chxCustomFile, args: []string{"--name", "nsls2", "--instance", "chx"}},
	{file: filepath.Join("testdata", "helm", "facility-umbrella.yaml")},
	{file: filepath.Join("testdata", "helm", "facility-oidc.yaml")},
}

// TestImportHelmFates asserts the fate of every key of every values file exactly: the golden file
// beside it (<name>.fates, "fate<TAB>key" per leaf, reviewed by hand; -update rewrites it) lists
// each leaf with carried, handled, default, not carried or not Tiled's. The report says the same,
// every carried key's target is in the output, and --strict fails exactly when a key is not carried.
func TestImportHelmFates(t *testing.T) {
	for _, tc := range helmFiles {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(tc.file)
			g.Expect(err).NotTo(HaveOccurred())
			var values map[string]any
			g.Expect(yaml.Unmarshal(data, &values)).To(Succeed())
			h, err := importValues(values, "")
			g.Expect(err).NotTo(HaveOccurred())
			profile, _ := h.objects("tiled", "tiled", "")
			wrong, err := h.verify(profile)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(wrong).To(BeEmpty(), "keys reported carried that the output does not hold")

			fates := h.fates()
			var leaves []string
			leafPaths("", values, &leaves)
			g.Expect(fates).To(HaveLen(len(leaves)), "every leaf has a fate")
			var golden strings.Builder
			notCarriedKeys := 0
			for _, l := range leaves {
				fmt.Fprintf(&golden, "%s\t%s\n", fates[l], l)
				if fates[l] == notCarried {
					notCarriedKeys++
				}
			}
			goldenFile := strings.TrimSuffix(tc.file, ".yaml") + ".fates"
			if *update {
				g.Expect(os.WriteFile(goldenFile, []byte(golden.String()), 0o600)).To(Succeed())
			}
			want, err := os.ReadFile(goldenFile)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(golden.String()).To(Equal(string(want)))

			// The command: the report at the top of its output, and --strict.
			code, out, stderr := runCmd("", append([]string{"import-helm", tc.file}, tc.args...)...)
			g.Expect(code).To(Equal(0), stderr)
			lines, missing := h.report()
			for _, l := range lines {
				g.Expect(out).To(ContainSubstring("#   " + l + "\n"))
			}
			code, strictOut, stderr := runCmd("", append([]string{"import-helm", tc.file, "--strict"}, tc.args...)...)
			if notCarriedKeys == 0 {
				g.Expect(code).To(Equal(0), stderr)
				g.Expect(missing).To(BeEmpty())
				g.Expect(strictOut).To(Equal(out))
			} else {
				g.Expect(code).To(Equal(1))
				g.Expect(stderr).To(ContainSubstring(fmt.Sprintf("error: %d keys not carried over (--strict)", len(missing))))
				g.Expect(strictOut).To(BeEmpty())
			}
			// The count of every fate heads the report.
			counts := map[string]int{}
			for _, f := range fates {
				counts[f]++
			}
			summary := fmt.Sprintf("# %d leaf keys: %d carried, %d handled, %d default, %d not carried", len(leaves), counts[carried], counts[handled], counts[chartValue], counts[notCarried])
			if counts[otherChart] > 0 {
				summary += fmt.Sprintf(", %d not Tiled's", counts[otherChart])
			}
			g.Expect(out).To(ContainSubstring(summary + ".\n"))
		})
	}
}

// The umbrella chart's values: the tiled: key is found without --subchart; the pod identity is
// carried into the profile; the PAM provider, the admins and the access policy naming it are not;
// the other subcharts are listed, not read.
func TestImportHelmUmbrella(t *testing.T) {
	g := NewWithT(t)
	file := filepath.Join("testdata", "helm", "facility-umbrella.yaml")
	ti, rendered, cfg, stderr := importAndExpand(t, file)
	s := ti.Spec
	g.Expect(s.Tiled.Image).To(Equal("registry.facility.example.org/bluesky/tiled:0.2.20"))
	g.Expect(s.Tiled.RunAsUser).To(HaveValue(Equal(int64(52001))))
	g.Expect(s.Tiled.RunAsGroup).To(HaveValue(Equal(int64(52000))))
	g.Expect(s.Tiled.FSGroup).To(HaveValue(Equal(int64(52000))))
	g.Expect(s.Tiled.SupplementalGroups).To(Equal([]int64{52100, 52101}))
	g.Expect(s.Tiled.ImagePullSecrets).To(Equal([]v1alpha1.LocalObjectReference{{Name: "facility-registry"}}))
	g.Expect(s.Database.External.URISecretRef).To(Equal(&v1alpha1.SecretKeyRef{Name: "tiled-postgres", Key: "uri"}))
	pod := tiledPod(t, rendered)
	g.Expect(pod.SecurityContext.RunAsUser).To(HaveValue(Equal(int64(52001))))
	g.Expect(pod.SecurityContext.SupplementalGroups).To(Equal([]int64{52100, 52101}))
	g.Expect(s.Auth.OIDC).To(BeNil())
	g.Expect(cfg).NotTo(HaveKey("access_control"))

	for _, key := range []string{"tiled.config.access_control: its policy names provider \"pam\"",
		"tiled.config.authentication.tiled_admins[0]: names provider \"pam\"",
		"tiled.config.authentication.providers[0]: only OIDC providers",
		"tiled.podSecurityContext.fsGroupChangePolicy: no equivalent",
		"tiled.securityContext.readOnlyRootFilesystem: the operator sets readOnlyRootFilesystem to true",
		"tiled.ingress.hosts[1]: the operator serves one host per instance"} {
		g.Expect(stderr).To(ContainSubstring("\n  "+key), key)
	}
	g.Expect(stderr).To(ContainSubstring("warning: 6 keys"))
	g.Expect(stderr).NotTo(ContainSubstring("\n  postgresql."), "another chart's values are not Tiled's to carry")
	g.Expect(stderr).To(ContainSubstring("note: 5 leaf keys of other charts (global, postgresql) were not read: they are listed as not Tiled's\n"))

	// The other charts' keys are listed one by one, as Tiled's, and counted.
	code, out, _ := runCmd("", "import-helm", file)
	g.Expect(code).To(Equal(0))
	for _, key := range []string{"postgresql.auth.database", "postgresql.auth.existingSecret", "postgresql.auth.username", "postgresql.primary.persistence.size"} {
		g.Expect(out).To(ContainSubstring("#   not Tiled's:   " + key + " -> the values of subchart postgresql, not read\n"))
	}
	g.Expect(out).To(ContainSubstring("#   not Tiled's:   global.imageRegistry -> global values: the Tiled chart reads none\n"))
	g.Expect(out).NotTo(ContainSubstring("#   not Tiled's:   postgresql ->"))
	g.Expect(out).To(ContainSubstring(", 5 not Tiled's.\n"))

	// --subchart names it explicitly; a wrong name, or values from which nothing is carried, fail.
	code, out2, _ := runCmd("", "import-helm", file, "--subchart", "tiled")
	g.Expect(code).To(Equal(0))
	g.Expect(out2).To(Equal(out))
	code, _, stderr = runCmd("", "import-helm", file, "--subchart", "data-service")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring(`no values for subchart "data-service": the top-level keys are global, postgresql, tiled`))
	code, _, stderr = runCmd("postgresql: {auth: {database: tiled}}\n", "import-helm", "-")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("nothing was carried over"))
}

// A facility's own release: the OIDC provider, its admin and its access policy carry over; the
// toy provider and its admin do not; the container's uid wins over the pod's root uid.
func TestImportHelmFacilityOIDC(t *testing.T) {
	g := NewWithT(t)
	ti, rendered, cfg, stderr := importAndExpand(t, filepath.Join("testdata", "helm", "facility-oidc.yaml"))
	s := ti.Spec
	g.Expect(s.Auth.OIDC.Providers).To(HaveLen(1))
	g.Expect(s.Auth.OIDC.Providers[0].Name).To(Equal("keycloak"))
	g.Expect(s.Auth.OIDC.Admins).To(Equal([]string{"keycloak:alice@facility.example.org"}))
	g.Expect(cfg["access_control"]).To(HaveKeyWithValue("args", HaveKeyWithValue("provider", "keycloak")))
	g.Expect(s.Tiled.RunAsUser).To(HaveValue(Equal(int64(41000))))
	g.Expect(s.Tiled.RunAsGroup).To(HaveValue(Equal(int64(41000))))
	g.Expect(ti.Provenance).To(HaveKeyWithValue("spec.tiled.fsGroup", "default"), "the values set no fsGroup")
	g.Expect(s.Storage.Data.NFS).To(Equal(&v1alpha1.NFSVolumeSource{Server: "nfs.facility.example.org", Path: "/exports/tiled"}))
	pod := tiledPod(t, rendered)
	g.Expect(pod.SecurityContext.RunAsUser).To(HaveValue(Equal(int64(41000))))
	g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	for _, key := range []string{"command: ", "config.authentication.providers[1]: ",
		"config.authentication.tiled_admins[1]: names provider \"toy\"",
		"podSecurityContext.runAsNonRoot: ", "podSecurityContext.runAsUser: securityContext.runAsUser sets 41000",
		"securityContext.capabilities.add[0]: "} {
		g.Expect(stderr).To(ContainSubstring("\n  "+key), key)
	}
	g.Expect(stderr).To(ContainSubstring("warning: 6 keys"))
}

// The chart's HorizontalPodAutoscaler becomes spec.tiled.autoscaling, from which the operator renders
// its own; what it cannot do (scale on memory, bounds the API refuses) is reported not carried, and
// the chart's replicaCount, which its Deployment ignores while autoscaling, is not carried to
// spec.tiled.replicas.
func TestImportHelmAutoscaling(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		want   *v1alpha1.AutoscalingSpec // nil: no autoscaler
		fates  map[string]string         // key: disposition kind
	}{{
		name:   "disabled: the chart's defaults",
		values: "replicaCount: 2\nautoscaling: {enabled: false, minReplicas: 1, maxReplicas: 100, targetCPUUtilizationPercentage: 80}\n",
		fates: map[string]string{"replicaCount": carried, "autoscaling.enabled": chartValue, "autoscaling.minReplicas": chartValue,
			"autoscaling.maxReplicas": chartValue, "autoscaling.targetCPUUtilizationPercentage": chartValue},
	}, {
		name:   "enabled: carried, replicaCount left to the autoscaler",
		values: "replicaCount: 2\nautoscaling: {enabled: true, minReplicas: 2, maxReplicas: 100, targetCPUUtilizationPercentage: 80}\n",
		want: &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true), MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](100),
			TargetCPUUtilizationPercentage: ptr.To[int32](80)},
		fates: map[string]string{"replicaCount": handled, "autoscaling.enabled": carried, "autoscaling.minReplicas": carried,
			"autoscaling.maxReplicas": carried, "autoscaling.targetCPUUtilizationPercentage": carried},
	}, {
		name:   "enabled with no target: Kubernetes' 80% CPU, as the chart's autoscaler without metrics",
		values: "autoscaling: {enabled: true, maxReplicas: 4}\n",
		want:   &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true), MaxReplicas: ptr.To[int32](4), TargetCPUUtilizationPercentage: ptr.To[int32](80)},
		fates:  map[string]string{"autoscaling.enabled": carried, "autoscaling.maxReplicas": carried},
	}, {
		name:   "a memory target: not carried, the operator scales on CPU",
		values: "autoscaling: {enabled: true, maxReplicas: 4, targetMemoryUtilizationPercentage: 80}\n",
		want:   &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true), MaxReplicas: ptr.To[int32](4)},
		fates:  map[string]string{"autoscaling.enabled": carried, "autoscaling.maxReplicas": carried, "autoscaling.targetMemoryUtilizationPercentage": notCarried},
	}, {
		name:   "bounds the API refuses: not carried",
		values: "autoscaling: {enabled: true, minReplicas: 0, maxReplicas: 500, targetCPUUtilizationPercentage: 75.5}\n",
		want:   &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true)},
		fates: map[string]string{"autoscaling.enabled": carried, "autoscaling.minReplicas": notCarried,
			"autoscaling.maxReplicas": notCarried, "autoscaling.targetCPUUtilizationPercentage": notCarried},
	}, {
		name:   "minReplicas above maxReplicas: neither carried",
		values: "autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 3, targetCPUUtilizationPercentage: 60}\n",
		want:   &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true), TargetCPUUtilizationPercentage: ptr.To[int32](60)},
		fates: map[string]string{"autoscaling.enabled": carried, "autoscaling.minReplicas": notCarried,
			"autoscaling.maxReplicas": notCarried, "autoscaling.targetCPUUtilizationPercentage": carried},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var values map[string]any
			g.Expect(yaml.Unmarshal([]byte(tc.values), &values)).To(Succeed())
			h := importHelm(values)
			if tc.want == nil {
				g.Expect(h.tpl.Tiled.Autoscaling).To(BeNil())
			} else {
				g.Expect(h.tpl.Tiled.Autoscaling).To(Equal(tc.want))
				g.Expect(h.tpl.Tiled.Replicas).To(BeNil(), "replicaCount is the autoscaler's to set")
			}
			for key, kind := range tc.fates {
				g.Expect(h.got[key].kind).To(Equal(kind), key+": "+h.got[key].note)
			}
			profile, _ := h.objects("tiled", "tiled", "")
			wrong, err := h.verify(profile)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(wrong).To(BeEmpty(), "the profile holds what is reported carried")

			// The command accepts what it prints, and no longer claims the operator has no autoscaler.
			code, _, stderr := runCmd(tc.values, "import-helm", "-")
			g.Expect(code).To(Equal(0), stderr)
			g.Expect(stderr).NotTo(ContainSubstring("no HorizontalPodAutoscaler"))
		})
	}
}

// verify turns a carried claim whose target the output lacks into "not carried".
func TestImportHelmVerify(t *testing.T) {
	g := NewWithT(t)
	h := importHelm(map[string]any{"replicaCount": float64(2), "podLabels": map[string]any{"a": "b"}})
	profile, _ := h.objects("tiled", "tiled", "")
	profile.Spec.Tiled.PodLabels = nil // as if the mapping had lost it
	wrong, err := h.verify(profile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wrong).To(Equal([]string{"podLabels.a"}))
	g.Expect(h.got["podLabels.a"].kind).To(Equal(notCarried))
	g.Expect(h.got["replicaCount"].kind).To(Equal(carried))
}

// What a new user met: a release that mounts an emptyDir at /tmp (for a read-only root filesystem)
// sees it handled, since the operator mounts one there itself; a beamline whose name starts with a
// digit is refused before anything is written, with a name the API accepts.
func TestImportHelmNewUser(t *testing.T) {
	g := NewWithT(t)
	values := `image: {repository: ghcr.io/bluesky/tiled, tag: "0.2.20"}
securityContext: {readOnlyRootFilesystem: true}
volumes:
- name: tmp
  emptyDir: {}
volumeMounts:
- name: tmp
  mountPath: /tmp
`
	var v map[string]any
	g.Expect(yaml.Unmarshal([]byte(values), &v)).To(Succeed())
	h := importHelm(v)
	for _, key := range []string{"volumes[0].name", "volumes[0].emptyDir", "volumeMounts[0].name", "volumeMounts[0].mountPath"} {
		g.Expect(h.got[key].kind).To(Equal(handled), key)
		g.Expect(h.got[key].note).To(ContainSubstring("the operator mounts an emptyDir at /tmp"), key)
	}
	code, out, stderr := runCmd(values, "import-helm", "-", "--strict")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stderr).To(BeEmpty())
	g.Expect(out).To(ContainSubstring("#   handled:       volumes[0] -> the operator mounts an emptyDir at /tmp"))
	ti, rendered, _, _ := importAndExpandValues(t, values)
	g.Expect(ti.Spec.Storage.ReadOnlyMounts).To(BeEmpty(), "nothing of the emptyDir in the profile")
	g.Expect(ti.Provenance).To(HaveKeyWithValue("spec.storage.data.size", "default"))
	pod := tiledPod(t, rendered)
	g.Expect(pod.Containers[0].VolumeMounts).To(ContainElement(HaveField("MountPath", "/tmp")))

	// A size limit or a memory medium is the user's decision: not carried.
	code, _, stderr = runCmd("replicaCount: 1\nvolumes:\n- name: tmp\n  emptyDir: {medium: Memory, sizeLimit: 1Gi}\nvolumeMounts:\n- {name: tmp, mountPath: /tmp}\n", "import-helm", "-")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stderr).To(ContainSubstring("\n  volumes[0].emptyDir.medium: "))
	g.Expect(stderr).To(ContainSubstring("\n  volumes[0].emptyDir.sizeLimit: "))

	// APS beamline 8-ID-I: 8idi is no instance name (a DNS label starting with a letter).
	for _, tc := range []struct {
		args    []string
		flag    string
		suggest string
	}{
		{args: []string{"--name", "aps", "--instance", "8idi"}, flag: "--instance", suggest: "bl-8idi"},
		{args: []string{"--name", "8idi"}, flag: "--name", suggest: "bl-8idi"},
		{args: []string{"--name", "APS", "--instance", "8-ID-I"}, flag: "--name", suggest: "aps"},
	} {
		code, out, stderr := runCmd("", append([]string{"import-helm", chartDefaultsFile}, tc.args...)...)
		g.Expect(code).To(Equal(1), "%v", tc.args)
		g.Expect(out).To(BeEmpty())
		g.Expect(stderr).To(ContainSubstring("error: " + tc.flag + " "))
		g.Expect(stderr).To(ContainSubstring("try " + tc.flag + " " + tc.suggest + "\n"))
	}
	// The suggestions pass the API's rules: the import succeeds with them.
	code, out, stderr = runCmd("", "import-helm", chartDefaultsFile, "--name", "aps", "--instance", "bl-8idi")
	g.Expect(code).To(Equal(0), stderr)
	code, _, stderr = runCmd("", "import-helm", chartDefaultsFile, "--name", "aps", "--instance", "8-ID-I")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("try --instance bl-8-id-i\n"))
	code, _, stderr = runCmd("", "import-helm", chartDefaultsFile, "--name", "aps", "--instance", "bl-8-id-i")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(ContainSubstring("name: bl-8idi"))
}
