//go:build tiledconformance

package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
)

// suiteEnv is what hack/tiled/conformance.sh prepares.
type suiteEnv struct {
	venv       string // Python virtual environment with tiled[server]
	pg         string // host:port of the PostgreSQL server
	pgPassword string // password of its superuser "postgres"
	psql       string // psql binary
	roundtrip  string // hack/tiled/roundtrip.py
}

func getEnv(t *testing.T) suiteEnv {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			// A missing prerequisite is a failure, never a skip: CI must not pass without Tiled.
			t.Fatalf("%s is not set: run hack/tiled/conformance.sh (make test-tiled), which installs Tiled and PostgreSQL", k)
		}
		return v
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return suiteEnv{
		venv:       get("TILED_CONFORMANCE_VENV"),
		pg:         get("TILED_CONFORMANCE_PG"),
		pgPassword: get("TILED_CONFORMANCE_PG_PASSWORD"),
		psql:       get("TILED_CONFORMANCE_PSQL"),
		roundtrip:  filepath.Join(root, "hack", "tiled", "roundtrip.py"),
	}
}

func (e suiteEnv) bin(name string) string { return filepath.Join(e.venv, "bin", name) }

// sql runs statements as the PostgreSQL superuser, one psql -c per statement (CREATE DATABASE cannot
// run inside the implicit transaction of a multi-statement -c).
func (e suiteEnv) sql(t *testing.T, statements ...string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(e.pg)
	for _, s := range statements {
		cmd := exec.Command(e.psql, "-h", host, "-p", port, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", s)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+e.pgPassword)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("psql %q: %v\n%s", s, err, out)
		}
	}
}

// provisionManaged does what the managed PostgreSQL does on first start: the POSTGRES_USER role with
// the Secret's password owning POSTGRES_DB (catalog), then render.PostgresInitSQL.
func (e suiteEnv) provisionManaged(t *testing.T, password string) {
	e.sql(t,
		"DROP DATABASE IF EXISTS catalog WITH (FORCE)",
		"DROP DATABASE IF EXISTS storage WITH (FORCE)",
		"DROP DATABASE IF EXISTS auth WITH (FORCE)",
		"DROP ROLE IF EXISTS "+render.DatabaseUser,
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", render.DatabaseUser, password),
		"CREATE DATABASE catalog OWNER "+render.DatabaseUser,
	)
	for _, s := range strings.Split(strings.TrimSpace(render.PostgresInitSQL()), "\n") {
		e.sql(t, s)
	}
}

// instance is a fully expanded TiledInstance as the expansion engine would produce it, with the
// default image at expansion.TiledVersion.
func instance(name string) *v1alpha1.TiledInstance {
	return &v1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name: "conformance-" + name, Namespace: "conformance",
			Labels: map[string]string{v1alpha1.LabelCluster: "conformance", v1alpha1.LabelInstance: name},
		},
		Spec: v1alpha1.TiledInstanceSpec{InstanceTemplate: v1alpha1.InstanceTemplate{
			Tiled:    &v1alpha1.TiledServerSpec{Image: expansion.TiledImage, Replicas: ptr.To[int32](1)},
			Storage:  &v1alpha1.StorageSpec{Data: &v1alpha1.DataVolume{Size: "1Gi"}, Retention: v1alpha1.RetentionRetain},
			Database: &v1alpha1.DatabaseSpec{Managed: &v1alpha1.ManagedDatabase{Image: "postgres:16", Size: "1Gi"}},
			Auth:     &v1alpha1.AuthSpec{SingleUserAPIKey: &v1alpha1.SingleUserAPIKey{}, AllowAnonymousAccess: ptr.To(false)},
			Expose:   &v1alpha1.ExposeSpec{Service: &v1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
		}},
	}
}

// deployment is one rendered instance run on this machine.
type deployment struct {
	t       *testing.T
	e       suiteEnv
	dir     string
	objs    *render.Objects
	secrets map[string]map[string][]byte // Secret name -> data, for secretKeyRef
	apiKey  string
}

// deploy renders the instance with the render package, as the operator does, with the database
// address and the data directory pointed at this machine, and writes config.yml.
func deploy(t *testing.T, e suiteEnv, ti *v1alpha1.TiledInstance, in render.Inputs, other map[string]map[string][]byte) *deployment {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(dir, "data"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(dir, "config"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)).To(Succeed())

	gen, err := render.GenerateSecretData(ti, nil, rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	in.SecretData = gen
	in.DataPath = filepath.Join(dir, "data")
	if in.DatabaseAddress == "" {
		in.DatabaseAddress = e.pg
	}
	objs, err := render.Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	cfg := objs.ConfigMap.Data[render.ConfigKey]
	g.Expect(os.WriteFile(filepath.Join(dir, "config", render.ConfigKey), []byte(cfg), 0o644)).To(Succeed())
	t.Logf("rendered %s:\n%s", render.ConfigKey, cfg)

	secrets := map[string]map[string][]byte{objs.Names.Secret: gen}
	for k, v := range other {
		secrets[k] = v
	}
	return &deployment{t: t, e: e, dir: dir, objs: objs, secrets: secrets, apiKey: string(gen[render.SecretKeyAPIKey])}
}

func (d *deployment) container(init bool) *corev1ac.ContainerApplyConfiguration {
	spec := d.objs.StatefulSet.Spec.Template.Spec
	if init {
		return &spec.InitContainers[0]
	}
	return &spec.Containers[0]
}

// env resolves the container's environment as the kubelet would, from literal values and Secret
// keys; the paths of the config mount and of HOME are the only substitutions.
func (d *deployment) env(c *corev1ac.ContainerApplyConfiguration) []string {
	d.t.Helper()
	out := []string{
		"PATH=" + filepath.Join(d.e.venv, "bin") + ":" + os.Getenv("PATH"),
		"LANG=C.UTF-8",
	}
	for _, ev := range c.Env {
		name := *ev.Name
		var val string
		switch {
		case ev.Value != nil:
			val = *ev.Value
		case ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil:
			ref := ev.ValueFrom.SecretKeyRef
			data, ok := d.secrets[*ref.Name][*ref.Key]
			if !ok {
				d.t.Fatalf("env %s: Secret %s has no key %s", name, *ref.Name, *ref.Key)
			}
			val = string(data)
		default:
			d.t.Fatalf("env %s: unsupported source", name)
		}
		switch name {
		case render.EnvConfig:
			g := NewWithT(d.t)
			g.Expect(val).To(Equal(render.ConfigDir))
			val = filepath.Join(d.dir, "config")
		case "HOME":
			val = filepath.Join(d.dir, "tmp")
		}
		out = append(out, name+"="+val)
	}
	return out
}

// lookPath resolves a command as the container would, with the virtual environment's bin first on
// PATH (exec.Command otherwise searches the test process's PATH, not the command's).
func (d *deployment) lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	if p := filepath.Join(d.e.venv, "bin", name); isExecutable(p) {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		d.t.Fatalf("%s: %v", name, err)
	}
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}

// runInit runs the init container's command exactly as rendered.
func (d *deployment) runInit() {
	d.t.Helper()
	c := d.container(true)
	cmd := exec.Command(d.lookPath(c.Command[0]), c.Command[1:]...)
	cmd.Env = d.env(c)
	cmd.Dir = d.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("init container command failed: %v\n%s", err, out)
	}
	d.t.Logf("init container:\n%s", out)
}

// checkConfig runs `tiled admin check-config` with the server container's environment.
func (d *deployment) checkConfig() (string, error) {
	c := d.container(false)
	cmd := exec.Command(d.e.bin("tiled"), "admin", "check-config")
	cmd.Env = d.env(c)
	cmd.Dir = d.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type server struct {
	url  string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan error
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs the server container's command as rendered (`tiled serve config --host 0.0.0.0 --port
// 8000 --scalable`) with only the port changed to a free one. It returns the server once /healthz
// answers, or the process's exit and output.
func (d *deployment) start() (*server, error) {
	d.t.Helper()
	c := d.container(false)
	args := append([]string(nil), c.Command...)
	port := freePort(d.t)
	for i := range args {
		if args[i] == "--port" {
			args[i+1] = fmt.Sprint(port)
		}
	}
	cmd := exec.Command(d.lookPath(args[0]), args[1:]...)
	cmd.Env = d.env(c)
	cmd.Dir = d.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, log: log, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	d.t.Cleanup(s.stop)
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			return nil, fmt.Errorf("tiled serve exited (%v):\n%s", err, log.String())
		default:
		}
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				d.t.Logf("%s /healthz: %s", s.url, body)
				return s, nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("tiled serve did not answer /healthz in 120s:\n%s", log.String())
}

// stop ends the server as the kubelet does: SIGTERM to its process group, then SIGKILL.
func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		err := <-s.done
		s.done <- err
	}
}

func (d *deployment) mustStart() *server {
	d.t.Helper()
	s, err := d.start()
	if err != nil {
		d.t.Fatal(err)
	}
	return s
}

// python runs hack/tiled/roundtrip.py against a server with the generated API key.
func (d *deployment) python(args ...string) string {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.e.bin("python"), append([]string{d.e.roundtrip}, args...)...)
	cmd.Env = append(os.Environ(), "TILED_API_KEY="+d.apiKey, "HOME="+filepath.Join(d.dir, "tmp"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("roundtrip.py %v: %v\n%s", args, err, out)
	}
	d.t.Logf("roundtrip.py %s: %s", args[0], strings.TrimSpace(string(out)))
	return string(out)
}

// checkMetrics: /api/v1/metrics answers with the key in Tiled's `Authorization: Apikey` scheme (as the
// rendered ServiceMonitor sends it) and refuses without it.
func (d *deployment) checkMetrics(s *server) {
	d.t.Helper()
	g := NewWithT(d.t)
	resp, err := http.Get(s.url + render.MetricsPath)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))

	req, _ := http.NewRequest(http.MethodGet, s.url+render.MetricsPath, nil)
	req.Header.Set("Authorization", "Apikey "+d.apiKey)
	resp, err = http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
	g.Expect(string(body)).To(ContainSubstring("# TYPE"))
}

// lifecycle: init, serve, write, read, metrics; stop, init again (the upgrade path), serve: data kept.
func (d *deployment) lifecycle() {
	d.t.Helper()
	d.runInit()
	s := d.mustStart()
	d.checkMetrics(s)
	d.python("write", s.url)
	s.stop()
	d.runInit()
	s = d.mustStart()
	d.python("read", s.url)
	s.stop()
}

func TestTiledVersion(t *testing.T) {
	g := NewWithT(t)
	e := getEnv(t)
	out, err := exec.Command(e.bin("tiled"), "--version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	g.Expect(lines[len(lines)-1]).To(Equal(expansion.TiledVersion), "installed Tiled must be the version the operator deploys")
}

func TestSingleUserManagedDatabase(t *testing.T) {
	e := getEnv(t)
	ti := instance("managed")
	d := deploy(t, e, ti, render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.lifecycle()
}

func TestExternalDatabaseSecret(t *testing.T) {
	e := getEnv(t)
	const user, pw = "beamline_ext", "Ext3rnalPassw0rd"
	e.sql(t,
		"DROP DATABASE IF EXISTS ext_catalog WITH (FORCE)",
		"DROP DATABASE IF EXISTS ext_storage WITH (FORCE)",
		"DROP ROLE IF EXISTS "+user,
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", user, pw),
		"CREATE DATABASE ext_catalog OWNER "+user,
		"CREATE DATABASE ext_storage OWNER "+user,
	)
	ti := instance("external")
	ti.Spec.Database = &v1alpha1.DatabaseSpec{External: &v1alpha1.ExternalDatabase{
		URISecretRef: &v1alpha1.SecretKeyRef{Name: "beamline-db", Key: "uri"},
	}}
	ext := map[string][]byte{
		"uri":                        []byte(fmt.Sprintf("postgresql://%s:%s@%s/ext_catalog", user, pw, e.pg)),
		render.ExternalKeyStorageURI: []byte(fmt.Sprintf("postgresql://%s:%s@%s/ext_storage", user, pw, e.pg)),
	}
	d := deploy(t, e, ti, render.Inputs{ExternalSecretKeys: []string{"uri", render.ExternalKeyStorageURI}},
		map[string]map[string][]byte{"beamline-db": ext})
	g := NewWithT(t)
	g.Expect(d.objs.Postgres).To(BeNil())
	g.Expect(d.objs.ConfigMap.Data[render.ConfigKey]).NotTo(ContainSubstring(pw))
	d.lifecycle()
}

func TestReadOnlyDetectorMount(t *testing.T) {
	e := getEnv(t)
	g := NewWithT(t)
	root := t.TempDir()
	detector := filepath.Join(root, "detector")
	outside := filepath.Join(root, "outside")
	for _, dir := range []string{detector, outside} {
		g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, "scan1.csv"), []byte("counts\n3\n1\n4\n"), 0o444)).To(Succeed())
	}
	g.Expect(os.Chmod(detector, 0o555)).To(Succeed())

	ti := instance("detector")
	ti.Spec.Storage.ReadOnlyMounts = []v1alpha1.ReadOnlyMount{{Name: "detector", MountPath: detector, ExistingClaimName: "detector-data"}}
	d := deploy(t, e, ti, render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.runInit()
	s := d.mustStart()
	d.python("register", s.url, detector)
	d.python("register-refused", s.url, outside)
	g.Expect(s.log.String()).To(ContainSubstring("outside the readable storage area"))
	s.stop()
}

func TestOIDCProviders(t *testing.T) {
	e := getEnv(t)
	g := NewWithT(t)
	ti := instance("oidc")
	ti.Spec.Auth = &v1alpha1.AuthSpec{
		AllowAnonymousAccess: ptr.To(false),
		OIDC: &v1alpha1.OIDCAuth{
			Providers: []v1alpha1.OIDCProvider{
				{Name: "orcid", ClientID: "APP-0000", ClientSecretRef: &v1alpha1.SecretKeyRef{Name: "orcid", Key: "client-secret"}, WellKnownURI: "https://orcid.org/.well-known/openid-configuration"},
				{Name: "facility-sso", ClientID: "tiled", ClientSecretRef: &v1alpha1.SecretKeyRef{Name: "sso"}, WellKnownURI: "https://sso.example.org/.well-known/openid-configuration"},
			},
			Admins: []string{"orcid:0000-0001-2345-6789"},
		},
	}
	d := deploy(t, e, ti, render.Inputs{}, map[string]map[string][]byte{
		"orcid": {"client-secret": []byte("orcid-secret")},
		"sso":   {"client-secret": []byte("sso-secret")},
	})
	g.Expect(d.apiKey).To(BeEmpty(), "no single-user key under OIDC")
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))

	out, err := d.checkConfig()
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("No errors found"))
	// The init commands migrate the auth database too; the second run is the upgrade path.
	g.Expect(d.container(true).Command[2]).To(ContainSubstring("tiled admin upgrade-database"))
	d.runInit()
	d.runInit()
	s := d.mustStart()
	resp, err := http.Get(s.url + "/api/v1/")
	g.Expect(err).NotTo(HaveOccurred())
	var about struct {
		Authentication struct {
			Providers []struct {
				Provider string `json:"provider"`
			} `json:"providers"`
		} `json:"authentication"`
	}
	g.Expect(json.NewDecoder(resp.Body).Decode(&about)).To(Succeed())
	resp.Body.Close()
	var names []string
	for _, p := range about.Authentication.Providers {
		names = append(names, p.Provider)
	}
	g.Expect(names).To(ConsistOf("orcid", "facility-sso"))
	s.stop()
}

func TestReplicas(t *testing.T) {
	e := getEnv(t)
	g := NewWithT(t)
	ti := instance("replicas")
	ti.Spec.Tiled.Replicas = ptr.To[int32](3)
	d := deploy(t, e, ti, render.Inputs{}, nil)
	g.Expect(d.objs.PDB).NotTo(BeNil())
	g.Expect(d.container(false).Command).To(ContainElement("--scalable"))
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.runInit()
	// Two replicas at once on the shared database and data directory.
	a := d.mustStart()
	b := d.mustStart()
	d.python("write", a.url)
	d.python("read", b.url)
	d.checkMetrics(b)
	a.stop()
	b.stop()
}

func TestBrokenRenderIsCaught(t *testing.T) {
	e := getEnv(t)
	g := NewWithT(t)
	ti := instance("broken")
	ti.Spec.Config = &apiextensionsv1.JSON{Raw: []byte(`{"bogus_key": true}`)}
	d := deploy(t, e, ti, render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))

	out, err := d.checkConfig()
	g.Expect(err).To(HaveOccurred(), "tiled admin check-config accepted an unknown key:\n%s", out)
	t.Logf("tiled admin check-config refused the broken config, as it must:\n%s", out)
	g.Expect(out).To(ContainSubstring("bogus_key"))

	d.runInit()
	s, err := d.start()
	if s != nil {
		s.stop()
	}
	g.Expect(err).To(HaveOccurred(), "tiled serve started with an unknown config key")
	t.Logf("tiled serve refused the broken config, as it must:\n%s", tail(err.Error(), 12))
	g.Expect(err.Error()).To(ContainSubstring("bogus_key"))
	g.Expect(err.Error()).To(ContainSubstring("Extra inputs are not permitted"))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
