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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
)

// suiteEnv is what hack/tiled/conformance.sh prepares.
type suiteEnv struct {
	venv       string   // Python virtual environment with tiled[server]
	pg         string   // host:port of the PostgreSQL server
	pgPassword string   // password of its superuser "postgres"
	psql       string   // psql binary
	pgctl      []string // command taking stop, start, restart or ensure for that server
	pgserver   string   // script starting another server (ownPostgres)
	roundtrip  string   // hack/tiled/roundtrip.py
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
		pgctl:      []string{get("TILED_CONFORMANCE_PGCTL")},
		pgserver:   get("TILED_CONFORMANCE_PGSERVER"),
		roundtrip:  filepath.Join(root, "hack", "tiled", "roundtrip.py"),
	}
}

// ownPostgres is getEnv with a PostgreSQL server of the test's own (the script's pgserver.sh new: a
// copy of the suite's server as initdb left it, same superuser and password, on another port),
// removed when the test ends. A case needs one when it provisions the managed database's fixed names
// (catalog, storage, auth, the tiled role) or stops and restarts the server; with it, it runs
// concurrently with the others.
func ownPostgres(t *testing.T) suiteEnv {
	t.Helper()
	e := getEnv(t)
	out, err := exec.Command(e.pgserver, "new").CombinedOutput()
	if err != nil {
		t.Fatalf("a PostgreSQL server of the test's own: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("pgserver.sh new printed %q, not DIR PORT", out)
	}
	dir, port := f[0], f[1]
	e.pg = net.JoinHostPort("127.0.0.1", port)
	e.pgctl = []string{e.pgserver, dir, port}
	t.Cleanup(func() {
		if out, err := exec.Command(e.pgserver, dir, port, "remove").CombinedOutput(); err != nil {
			t.Errorf("removing the PostgreSQL server on %s: %v\n%s", e.pg, err, out)
		}
	})
	t.Logf("PostgreSQL of its own on %s", e.pg)
	return e
}

func (e suiteEnv) bin(name string) string { return filepath.Join(e.venv, "bin", name) }

// postgres stops, starts or restarts the test's PostgreSQL server (fast shutdown: connections are
// cut, as when the managed database's pod is deleted).
func (e suiteEnv) postgres(t *testing.T, action string) {
	t.Helper()
	out, err := exec.Command(e.pgctl[0], append(e.pgctl[1:], action)...).CombinedOutput()
	if err != nil {
		t.Fatalf("PostgreSQL %s: %v\n%s", action, err, out)
	}
	t.Logf("PostgreSQL %s", action)
}

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

// query runs one statement as the superuser in database db and returns its unaligned output.
func (e suiteEnv) query(t *testing.T, db, statement string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(e.pg)
	cmd := exec.Command(e.psql, "-h", host, "-p", port, "-U", "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-tAq", "-c", statement)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+e.pgPassword)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", statement, err, out)
	}
	return strings.TrimSpace(string(out))
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
	logs    *output // everything every container command printed
}

// output collects what several processes print, as a container log does.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// tee writes to a process's own buffer and to the deployment's log.
func (d *deployment) tee(own io.Writer) io.Writer { return io.MultiWriter(own, d.logs) }

// deploy renders the instance with the render package, as the operator does, with the database
// address and the data directory pointed at this machine, and writes config.yml.
func deploy(t *testing.T, e suiteEnv, ti *v1alpha1.TiledInstance, in render.Inputs, other map[string]map[string][]byte) *deployment {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(dir, "data"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(dir, "config"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(dir, "metrics"), 0o755)).To(Succeed()) // the metrics emptyDir

	gen, err := render.GenerateSecretData(ti, nil, rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	in.SecretData = gen
	metrics, err := render.GenerateMetricsSecretData(ti, nil, rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	in.MetricsSecretData = metrics
	in.DataPath = filepath.Join(dir, "data")
	if in.DatabaseAddress == "" {
		in.DatabaseAddress = e.pg
	}
	objs, err := render.Render(ti, in)
	g.Expect(err).NotTo(HaveOccurred())
	for k, v := range objs.ConfigMap.Data { // config.yml, entrypoint.py (metrics.py), as the ConfigMap mount holds them
		g.Expect(os.WriteFile(filepath.Join(dir, "config", k), []byte(v), 0o644)).To(Succeed())
	}
	t.Logf("rendered %s:\n%s", render.ConfigKey, objs.ConfigMap.Data[render.ConfigKey])

	secrets := map[string]map[string][]byte{objs.Names.Secret: gen}
	if objs.MetricsSecret != nil {
		secrets[objs.Names.MetricsSecret] = metrics
	}
	for k, v := range other {
		secrets[k] = v
	}
	d := &deployment{t: t, e: e, dir: dir, objs: objs, secrets: secrets, apiKey: string(gen[render.SecretKeyAPIKey]), logs: &output{}}
	// Whatever the case did, no secret may appear in what the containers printed (anyone allowed to
	// read pods/log would read it).
	t.Cleanup(d.checkNoSecretsInLogs)
	return d
}

// secretValues are the values of every Secret the containers read, with the parts a log could show
// on their own: each signing key of the JSON list, the password inside a URI; and the PostgreSQL
// superuser's password.
func (d *deployment) secretValues() []string {
	out := []string{d.e.pgPassword}
	for _, data := range d.secrets {
		for _, v := range data {
			s := string(v)
			out = append(out, s)
			var list []string
			if json.Unmarshal(v, &list) == nil {
				out = append(out, list...)
			}
			if u, err := url.Parse(s); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok {
					out = append(out, pw)
				}
			}
		}
	}
	return out
}

func (d *deployment) checkNoSecretsInLogs() {
	logs := d.logs.String()
	for _, v := range d.secretValues() {
		if len(v) >= 6 && strings.Contains(logs, v) {
			d.t.Errorf("a secret value (%d characters, starting %q) appears in the containers' output:\n%s", len(v), v[:3], redact(logs, v))
		}
	}
}

// redact shows where a secret appeared without printing it.
func redact(logs, v string) string {
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, v) {
			lines = append(lines, strings.ReplaceAll(l, v, "<SECRET>"))
		}
	}
	return strings.Join(lines, "\n")
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
		case render.EnvMetricsDir, "METRICS_DIR": // the Tiled container's and the metrics sidecar's
			g := NewWithT(d.t)
			g.Expect(val).To(Equal(render.MetricsDir))
			val = filepath.Join(d.dir, "metrics")
		}
		out = append(out, name+"="+val)
	}
	return out
}

// command returns the container's command as this machine runs it: the paths under the config mount
// point into the deployment's config directory; nothing else changes.
func (d *deployment) command(c *corev1ac.ContainerApplyConfiguration) []string {
	out := make([]string, 0, len(c.Command)+len(c.Args))
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		if strings.HasPrefix(a, render.ConfigDir+"/") {
			a = filepath.Join(d.dir, "config", strings.TrimPrefix(a, render.ConfigDir+"/"))
		}
		out = append(out, a)
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

// initCmd is the init container's command exactly as rendered; edit changes its arguments first.
func (d *deployment) initCmd(edit func([]string) []string) (*exec.Cmd, *output) {
	c := d.container(true)
	args := d.command(c)
	if edit != nil {
		args = edit(args)
	}
	cmd := exec.Command(d.lookPath(args[0]), args[1:]...)
	cmd.Env = d.env(c)
	cmd.Dir = d.dir
	out := &output{}
	cmd.Stdout, cmd.Stderr = d.tee(out), d.tee(out)
	return cmd, out
}

// runInit runs the init container's command exactly as rendered.
func (d *deployment) runInit() string {
	d.t.Helper()
	cmd, out := d.initCmd(nil)
	if err := cmd.Run(); err != nil {
		d.t.Fatalf("init container command failed: %v\n%s", err, out)
	}
	d.t.Logf("init container:\n%s", out)
	return out.String()
}

// checkConfig runs `tiled admin check-config` with the server container's environment.
func (d *deployment) checkConfig() (string, error) {
	c := d.container(false)
	cmd := exec.Command(d.e.bin("tiled"), "admin", "check-config")
	cmd.Env = d.env(c)
	cmd.Dir = d.dir
	out := &output{}
	cmd.Stdout, cmd.Stderr = d.tee(out), d.tee(out)
	err := cmd.Run()
	return out.String(), err
}

type server struct {
	url  string
	cmd  *exec.Cmd
	log  *output
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
	args := d.command(c)
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
	log := &output{}
	cmd.Stdout, cmd.Stderr = d.tee(log), d.tee(log)
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
	t.Parallel()
	g := NewWithT(t)
	e := getEnv(t)
	out, err := exec.Command(e.bin("tiled"), "--version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	g.Expect(lines[len(lines)-1]).To(Equal(expansion.TiledVersion), "installed Tiled must be the version the operator deploys")
}

func TestSingleUserManagedDatabase(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	ti := instance("managed")
	d := deploy(t, e, ti, render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.lifecycle()
}

func TestExternalDatabaseSecret(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	e := ownPostgres(t)
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
	t.Parallel()
	e := ownPostgres(t)
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
	g.Expect(d.container(true).Command).To(ContainElement("--auth"))
	g.Expect(d.runInit()).To(ContainSubstring("running tiled admin initialize-database"))
	// The second run finds both databases at this Tiled's revisions: it runs no Tiled command.
	again := d.runInit()
	g.Expect(again).NotTo(ContainSubstring("running tiled"))
	g.Expect(again).To(ContainSubstring("the auth database"))
	g.Expect(again).To(ContainSubstring("nothing to migrate"))
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
	t.Parallel()
	e := ownPostgres(t)
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
	t.Parallel()
	e := ownPostgres(t)
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
	// What the instance's CrashLoopBackOff condition quotes: the last line of the log's tail that the
	// kubelet keeps as the termination message.
	last := podstatus.LastLine(kubeletTail(s0log(err)))
	t.Logf("last log line: %s", last)
	g.Expect(last).To(ContainSubstring("bogus_key: Extra inputs are not permitted"))
}

// s0log is the output of a server that failed to start (start puts it after the first line).
func s0log(err error) string {
	_, log, _ := strings.Cut(err.Error(), "\n")
	return log
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// withArg returns args with the value after flag replaced.
func withArg(flag, value string) func([]string) []string {
	return func(args []string) []string {
		out := append([]string(nil), args...)
		for i := range out[:len(out)-1] {
			if out[i] == flag {
				out[i+1] = value
			}
		}
		return out
	}
}

// kubeletTail is what the kubelet keeps of a failed container's log as its termination message
// under FallbackToLogsOnError: the last 80 lines, at most 2048 bytes.
func kubeletTail(log string) string {
	lines := strings.Split(log, "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	s := strings.Join(lines, "\n")
	if len(s) > 2048 {
		s = s[len(s)-2048:]
	}
	return s
}

// The init container started before its database waits for it, saying so every ten seconds, and
// migrates once it accepts connections, instead of failing into a restart back-off; the wait is
// bounded and ends with a line saying why.
func TestMigrateWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	d := deploy(t, e, instance("wait"), render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	t.Cleanup(func() { e.postgres(t, "ensure") })
	e.postgres(t, "stop")

	// Bounded: with the wait cut to 3 s, it gives up, and its last line (what the instance's condition
	// quotes from the termination message) says why.
	cmd, out := d.initCmd(withArg("--wait", "3"))
	start := time.Now()
	err := cmd.Run()
	g.Expect(err).To(HaveOccurred(), "migrate succeeded without a database:\n%s", out)
	g.Expect(time.Since(start)).To(BeNumerically("<", 60*time.Second))
	last := podstatus.LastLine(kubeletTail(out.String()))
	t.Logf("gave up: %s", last)
	g.Expect(last).To(MatchRegexp(`database 127\.0\.0\.1:\d+/catalog did not accept connections within 3s: .*(Connect|refused)`))

	// As rendered: it waits and migrates once the database is up.
	cmd, out = d.initCmd(nil)
	g.Expect(cmd.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	g.Eventually(out.String, time.Minute).Should(ContainSubstring("waiting for database 127.0.0.1"))
	g.Consistently(done, 12*time.Second).ShouldNot(Receive(), "migrate stopped waiting:\n%s", out)
	e.postgres(t, "start")
	var result error
	g.Eventually(done, 3*time.Minute).Should(Receive(&result))
	g.Expect(result).NotTo(HaveOccurred(), "%s", out)
	t.Logf("migrate:\n%s", out)
	g.Expect(strings.Count(out.String(), "waiting for database")).To(BeNumerically(">=", 2), "one line per ten seconds")
	g.Expect(out.String()).To(MatchRegexp(`accepts connections after \d+s`))
	g.Expect(out.String()).To(ContainSubstring("is new. Creating tables"))
	g.Expect(d.container(true).Command).To(ContainElements("--wait", fmt.Sprint(render.DatabaseWaitSeconds)))
	s := d.mustStart()
	d.python("write", s.url)
	s.stop()
}

// Two replicas starting at once on a new database: both init containers succeed, and exactly one
// creates the tables (the other waits for its advisory lock, then finds the catalog at the latest
// revision).
func TestOneReplicaMigratesANewDatabase(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	ti := instance("pair")
	ti.Spec.Tiled.Replicas = ptr.To[int32](2)
	d := deploy(t, e, ti, render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	a, outA := d.initCmd(nil)
	b, outB := d.initCmd(nil)
	g.Expect(a.Start()).To(Succeed())
	g.Expect(b.Start()).To(Succeed())
	errA, errB := a.Wait(), b.Wait()
	t.Logf("replica a:\n%s\nreplica b:\n%s", outA, outB)
	g.Expect(errA).NotTo(HaveOccurred())
	g.Expect(errB).NotTo(HaveOccurred())
	created := 0
	for _, o := range []string{outA.String(), outB.String()} {
		created += strings.Count(o, "is new. Creating tables")
	}
	g.Expect(created).To(Equal(1), "the catalog's tables were created %d times", created)
	g.Expect(e.query(t, "catalog", "SELECT count(*) FROM alembic_version")).To(Equal("1"))
	s := d.mustStart()
	d.python("write", s.url)
	s.stop()
}

// PostgreSQL restarts under a running Tiled (every pooled connection is cut): the requests after it
// succeed, on the catalog and on the SQL storage database alike.
func TestDatabaseRestartUnderTiled(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	d := deploy(t, e, instance("restart"), render.Inputs{}, nil)
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.runInit()
	s := d.mustStart()
	d.python("write", s.url)
	t.Cleanup(func() { e.postgres(t, "ensure") })
	e.postgres(t, "restart")
	// The very first requests after the restart, sent once (Tiled's Python client would retry a 500
	// and hide it): the catalog's metadata, then the appendable table's rows from SQL storage.
	g := NewWithT(t)
	for _, path := range []string{"/api/v1/metadata/conformance_rows", "/api/v1/table/full/conformance_rows?format=text/csv"} {
		code, body := d.get(s, path)
		g.Expect(code).To(Equal(http.StatusOK), "first GET %s after the restart: %s", path, body)
	}
	g.Expect(d.python("read", s.url)).NotTo(ContainSubstring("Retrying"))
	s.stop()
}

// get sends one request with the API key and returns the status code and the body.
func (d *deployment) get(s *server, path string) (int, string) {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Apikey "+d.apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// An instance that had a catalog (its ConfigMap holds catalog-expected) whose catalog database is
// found empty — a database claim deleted and made again, a database dropped — is never given a new,
// empty catalog: the migrate step refuses, exits non-zero, names the loss in its last line and
// reports {"catalogLost": true} (what the operator reads, tiledinstance_lostcatalog.go), and creates
// nothing. Without the key (a new instance, or a loss a person accepted) it initialises the catalog
// as it always did; with the key again, the catalog it finds is kept.
func TestMigrateRefusesALostCatalog(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	d := deploy(t, e, instance("lost"), render.Inputs{CatalogExpected: true}, nil)
	marker := filepath.Join(d.dir, "config", render.CatalogExpectedKey)
	g.Expect(os.ReadFile(marker)).To(BeEquivalentTo("true"), "the ConfigMap's key, as the mount holds it")
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))

	cmd, out := d.initCmd(nil)
	err := cmd.Run()
	t.Logf("migrate on an empty database, a catalog expected:\n%s", out)
	g.Expect(err).To(HaveOccurred(), "migrate initialised a catalog where one was lost")
	last := podstatus.LastLine(kubeletTail(out.String()))
	g.Expect(last).To(MatchRegexp(`the catalog database 127\.0\.0\.1:\d+/catalog holds no catalog, but this instance had one`))
	g.Expect(last).To(ContainSubstring("refusing to initialise an empty catalog"))
	g.Expect(out.String()).NotTo(ContainSubstring("running tiled catalog init"))
	g.Expect(out.String()).To(ContainSubstring(`"catalogLost":true`), "the report the operator reads")
	g.Expect(e.query(t, "catalog", "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")).To(Equal("0"), "nothing created")

	// The loss accepted (the operator drops the key): a new catalog, as for a new instance.
	g.Expect(os.Remove(marker)).To(Succeed())
	g.Expect(d.runInit()).To(ContainSubstring("running tiled catalog init"))
	// The key back: the catalog there is kept, nothing initialised.
	g.Expect(os.WriteFile(marker, []byte("true"), 0o644)).To(Succeed())
	log := d.runInit()
	g.Expect(log).NotTo(ContainSubstring("running tiled"))
	g.Expect(log).To(ContainSubstring("nothing to migrate"))
	s := d.mustStart()
	d.python("write", s.url)
	s.stop()
}

// tiled0214CatalogHead is Tiled 0.2.14's catalog revision (tiled.catalog.core.REQUIRED_REVISION in
// 0.2.14): a beamline that ran 0.2.14 has its catalog there.
const tiled0214CatalogHead = "b93c79d197f4"

// A catalog at an older revision — 0.2.14's, reached with Tiled's own downgrade-database — is
// upgraded by the migrate step, where a newer `catalog init --if-not-exists` refuses it
// (DatabaseUpgradeNeeded) before any upgrade could run. The revisions step reports the database's
// revision and the one this Tiled requires, before and after, and changes nothing.
func TestMigrateUpgradesAnOlderCatalog(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	d := deploy(t, e, instance("older"), render.Inputs{}, nil)
	password := string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword])
	e.provisionManaged(t, password)
	d.runInit()
	required := e.query(t, "catalog", "SELECT version_num FROM alembic_version")
	g.Expect(required).NotTo(Equal(tiled0214CatalogHead))

	uri := fmt.Sprintf("postgresql+asyncpg://%s:%s@%s/%s", render.DatabaseUser, password, e.pg, render.CatalogDatabase)
	out, err := exec.Command(e.bin("tiled"), "catalog", "downgrade-database", uri, tiled0214CatalogHead).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(e.query(t, "catalog", "SELECT version_num FROM alembic_version")).To(Equal(tiled0214CatalogHead))

	report := func() map[string]any {
		t.Helper()
		cmd, out := d.initCmd(func(args []string) []string { args[2] = "revisions"; return args })
		g.Expect(cmd.Run()).To(Succeed(), "%s", out)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var r map[string]any
		g.Expect(json.Unmarshal([]byte(lines[len(lines)-1]), &r)).To(Succeed(), "%s", out)
		return r
	}
	before := report()
	g.Expect(before["catalog"]).To(Equal(map[string]any{"current": tiled0214CatalogHead, "required": required, "known": true}))
	g.Expect(e.query(t, "catalog", "SELECT version_num FROM alembic_version")).To(Equal(tiled0214CatalogHead), "revisions changed nothing")

	log := d.runInit()
	g.Expect(log).To(ContainSubstring("running tiled catalog upgrade-database"))
	g.Expect(log).NotTo(ContainSubstring("running tiled catalog init"))
	g.Expect(e.query(t, "catalog", "SELECT version_num FROM alembic_version")).To(Equal(required))
	g.Expect(report()["catalog"]).To(Equal(map[string]any{"current": required, "required": required, "known": true}))
	// Started again (a restarted or rolled pod): at the required revision, nothing runs.
	log = d.runInit()
	g.Expect(log).NotTo(ContainSubstring("running tiled"))
	g.Expect(log).To(ContainSubstring("the catalog database"))
	g.Expect(log).To(ContainSubstring("is at revision " + required + ", the one Tiled"))
	g.Expect(e.query(t, "catalog", "SELECT version_num FROM alembic_version")).To(Equal(required))
	s := d.mustStart()
	d.python("write", s.url)
	s.stop()
}
