//go:build tiledconformance

package conformance

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// The Tiled container's readiness probe (render.ReadyCommand, ready.py from the ConfigMap) run as the
// kubelet runs it, in the server container's environment, against real Tiled serving the rendered
// config.yml on a real PostgreSQL and a real Redis: it passes on a healthy server with an empty
// catalog, fails naming the catalog when its tables are gone or its database is down, fails naming
// the streaming cache when the cache is down, and passes again once each is repaired.

// probeRun is one run of the readiness probe.
type probeRun struct {
	code int
	out  string
	cpu  time.Duration // user and system CPU of the probe's process
	took time.Duration
}

// probe runs the Tiled container's readiness probe command exactly as rendered (the config mount's
// paths pointed into the deployment's config directory), with the container's environment, bounded
// by the probe's timeout as the kubelet bounds it.
func (d *deployment) probe() probeRun {
	d.t.Helper()
	c := d.container(false)
	g := NewWithT(d.t)
	g.Expect(c.ReadinessProbe).NotTo(BeNil())
	g.Expect(c.ReadinessProbe.Exec).NotTo(BeNil(), "the readiness probe is an exec of ready.py")
	var args []string
	for _, a := range c.ReadinessProbe.Exec.Command {
		if strings.HasPrefix(a, render.ConfigDir+"/") {
			a = d.dir + "/config/" + strings.TrimPrefix(a, render.ConfigDir+"/")
		}
		args = append(args, a)
	}
	cmd := exec.Command(d.lookPath(args[0]), args[1:]...)
	cmd.Env = d.env(c)
	cmd.Dir = d.dir
	out := &output{}
	cmd.Stdout, cmd.Stderr = d.tee(out), d.tee(out)
	start := time.Now()
	g.Expect(cmd.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Duration(*c.ReadinessProbe.TimeoutSeconds) * time.Second):
		_ = cmd.Process.Kill()
		<-done
		d.t.Fatalf("the readiness probe ran longer than its timeout (%ds): %s", *c.ReadinessProbe.TimeoutSeconds, out)
	}
	r := probeRun{out: strings.TrimSpace(out.String()), took: time.Since(start)}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		g.Expect(ok).To(BeTrue(), "%v", err)
		r.code = ee.ExitCode()
	}
	d.t.Logf("readiness probe: exit %d in %s (%s CPU): %s", r.code, r.took.Round(time.Millisecond), r.cpu.Round(time.Millisecond), r.out)
	return r
}

// expectReady: the probe passes, silently.
func (d *deployment) expectReady(what string) probeRun {
	d.t.Helper()
	r := d.probe()
	g := NewWithT(d.t)
	g.Expect(r.code).To(BeZero(), "%s: the readiness probe failed: %s", what, r.out)
	g.Expect(r.out).To(BeEmpty(), what)
	return r
}

// expectNotReady: the probe fails with one line matching line.
func (d *deployment) expectNotReady(what, line string) probeRun {
	d.t.Helper()
	r := d.probe()
	g := NewWithT(d.t)
	g.Expect(r.code).To(Equal(1), "%s: the readiness probe passed", what)
	g.Expect(r.out).To(MatchRegexp(line), what)
	g.Expect(strings.Count(r.out, "\n")).To(BeZero(), "%s: one line, for the kubelet's Event", what)
	return r
}

// stoppableRedis is a redis-server of the test's own (the script's redisnew.sh) on a fixed port, that
// the test stops and starts again.
type stoppableRedis struct {
	t        *testing.T
	env      redisEnv
	dir      string
	launcher string
	cmd      *exec.Cmd
	done     chan error
	log      *output
}

func newStoppableRedis(t *testing.T) *stoppableRedis {
	t.Helper()
	r := &stoppableRedis{t: t, env: getRedis(t), launcher: os.Getenv("TILED_CONFORMANCE_REDISNEW")}
	if r.launcher == "" {
		t.Fatal("TILED_CONFORMANCE_REDISNEW is not set: run hack/tiled/conformance.sh (make test-tiled)")
	}
	dir, err := os.MkdirTemp("", "tiled-conformance-redis-")
	if err != nil {
		t.Fatal(err)
	}
	r.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	r.env.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	t.Cleanup(r.stop)
	r.start()
	return r
}

// start runs the server and waits until it answers AUTH and PING.
func (r *stoppableRedis) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.env.addr)
	r.cmd = exec.Command(r.launcher, r.dir, port)
	r.log = &output{}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.done = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(r.cmd, r.done)
	deadline := time.Now().Add(30 * time.Second)
	for redisPing(r.env) != nil {
		select {
		case err := <-r.done:
			r.done <- err
			r.t.Fatalf("redis-server on %s exited (%v):\n%s", r.env.addr, err, r.log)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer in 30 s: %v\n%s", r.env.addr, redisPing(r.env), r.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Logf("Redis on %s started", r.env.addr)
}

// stop ends the server (SIGTERM, as the kubelet stops a container) and waits for it.
func (r *stoppableRedis) stop() {
	if r.cmd == nil || r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		r.done <- err
	case <-time.After(20 * time.Second):
		_ = r.cmd.Process.Kill()
		err := <-r.done
		r.done <- err
	}
	r.t.Logf("Redis on %s stopped", r.env.addr)
}

// The readiness probe with the managed cache and the managed database, single-user key.
func TestReadinessProbeNamesWhatFails(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	r := newStoppableRedis(t)
	g := NewWithT(t)
	d := deployStreaming(t, e, r.env, streamingInstance("ready"), r.env.password)
	probe := strings.Join(d.container(false).ReadinessProbe.Exec.Command, " ")
	g.Expect(probe).To(Equal(strings.Join(render.ReadyCommand(), " ")))
	for _, secret := range d.secretValues() {
		if len(secret) >= 6 {
			g.Expect(probe).NotTo(ContainSubstring(secret), "a secret on the probe's command line")
		}
	}
	d.runInit()
	s := d.mustStart()

	// A healthy server on an empty catalog.
	code, body := d.get(s, "/api/v1/search/")
	g.Expect(code).To(Equal(200), body)
	g.Expect(strings.ReplaceAll(body, " ", "")).To(ContainSubstring(`"data":[]`), "an empty catalog")
	healthy := d.expectReady("a healthy server, an empty catalog")
	t.Logf("the probe's cost on this machine: %s CPU, %s wall", healthy.cpu.Round(time.Millisecond), healthy.took.Round(time.Millisecond))

	// The catalog's tables gone underneath Tiled (renamed away, so that they can come back):
	// /healthz still answers, every request fails, and the probe says why.
	code, _ = d.get(s, "/healthz")
	g.Expect(code).To(Equal(200))
	d.e.query(t, "catalog", "ALTER TABLE nodes RENAME TO nodes_away")
	code, _ = d.get(s, "/healthz")
	g.Expect(code).To(Equal(200), "/healthz does not look at the catalog: it cannot be the readiness probe")
	d.expectNotReady("the catalog's nodes table gone",
		`^catalog: HTTP 500; database 127\.0\.0\.1:\d+/catalog: relation "nodes" does not exist$`)
	d.e.query(t, "catalog", "ALTER TABLE nodes_away RENAME TO nodes")
	d.expectReady("the catalog's table back")

	// The database down, then back (Tiled's pooled connections are checked before use).
	t.Cleanup(func() { e.postgres(t, "ensure") })
	e.postgres(t, "stop")
	d.expectNotReady("the database stopped", `^catalog: HTTP 500; database 127\.0\.0\.1:\d+/catalog: .*(refused|Connect|connect)`)
	e.postgres(t, "start")
	d.expectReady("the database started again")

	// The streaming cache down, then back.
	r.stop()
	d.expectNotReady("the streaming cache stopped", `^streaming cache 127\.0\.0\.1:\d+: connection refused$`)
	r.start()
	d.expectReady("the streaming cache started again")

	// Both at once: both named, in one line.
	d.e.query(t, "catalog", "ALTER TABLE nodes RENAME TO nodes_away")
	r.stop()
	d.expectNotReady("the catalog and the cache both failing",
		`^catalog: HTTP 500; database .*relation "nodes" does not exist; streaming cache 127\.0\.0\.1:\d+: connection refused$`)
	d.e.query(t, "catalog", "ALTER TABLE nodes_away RENAME TO nodes")
	r.start()
	d.expectReady("both repaired")

	// Data written and read back through the server the probe judged: it serves.
	d.python("write", s.url)
	d.expectReady("a catalog with data")
	s.stop()
	// Tiled stopped: the probe names Tiled.
	d.expectNotReady("Tiled stopped", `^catalog: Tiled on 127\.0\.0\.1:\d+: connection refused$`)
}

// Without a single-user key (OIDC) and without anonymous access, Tiled cannot be asked without a
// person's credentials: the probe asks the catalog database what Tiled would, with the credentials
// of the container's environment.
func TestReadinessProbeWithoutAKey(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	ti := instance("ready-oidc")
	ti.Spec.Auth = &v1alpha1.AuthSpec{
		AllowAnonymousAccess: ptr.To(false),
		OIDC: &v1alpha1.OIDCAuth{Providers: []v1alpha1.OIDCProvider{{
			Name: "facility-sso", ClientID: "tiled", ClientSecretRef: &v1alpha1.SecretKeyRef{Name: "sso"},
			WellKnownURI: "https://sso.example.org/.well-known/openid-configuration",
		}}},
	}
	d := deploy(t, e, ti, render.Inputs{}, map[string]map[string][]byte{"sso": {"client-secret": []byte("sso-secret")}})
	g.Expect(d.apiKey).To(BeEmpty())
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.runInit()
	s := d.mustStart()
	code, _ := d.get(s, "/api/v1/search/")
	g.Expect(code).To(Equal(401), "no anonymous access")
	d.expectReady("a healthy server without a key")
	d.e.query(t, "catalog", "ALTER TABLE nodes RENAME TO nodes_away")
	d.expectNotReady("the catalog's nodes table gone", `^catalog: database 127\.0\.0\.1:\d+/catalog: relation "nodes" does not exist$`)
	d.e.query(t, "catalog", "ALTER TABLE nodes_away RENAME TO nodes")
	d.expectReady("the catalog's table back")
	s.stop()
}
