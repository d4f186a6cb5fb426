//go:build tiledconformance

package conformance

import (
	"bytes"
	"context"
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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// Live streaming (websocket subscriptions) through the streaming cache the operator renders
// (spec.streaming, Tiled's streaming_cache), with real Tiled and a real Redis: hack/tiled/conformance.sh
// starts redis-server with a password on loopback. hack/tiled/stream.py is the client, with Tiled's
// own tiled.client subscriptions, as a beamline scientist's script would be.

// redisEnv is the suite's Redis server, what hack/tiled/conformance.sh prepares for the streaming cache.
type redisEnv struct {
	addr     string // 127.0.0.1:port
	password string // its requirepass
}

func getRedis(t *testing.T) redisEnv {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			// As getEnv: a missing prerequisite is a failure, never a skip.
			t.Fatalf("%s is not set: run hack/tiled/conformance.sh (make test-tiled), which starts Redis for the streaming cache", k)
		}
		return v
	}
	return redisEnv{addr: get("TILED_CONFORMANCE_REDIS_ADDR"), password: get("TILED_CONFORMANCE_REDIS_PASSWORD")}
}

// ownRedis is a redis-server of the test's own, with the suite's configuration and password on another
// port (the script's redisnew.sh, run in the foreground as the test's child), stopped when the test
// ends. Tiled keys its streaming cache by node, and every case's catalog numbers its nodes from one:
// two cases on one Redis would see each other's sequences.
func ownRedis(t *testing.T) redisEnv {
	t.Helper()
	r := getRedis(t)
	launcher := os.Getenv("TILED_CONFORMANCE_REDISNEW")
	if launcher == "" {
		t.Fatal("TILED_CONFORMANCE_REDISNEW is not set: run hack/tiled/conformance.sh (make test-tiled)")
	}
	// Not t.TempDir: its parents are the test user's only, and the server may run as the redis user.
	dir, err := os.MkdirTemp("", "tiled-conformance-redis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, port, _ := net.SplitHostPort(r.addr)
	cmd := exec.Command(launcher, dir, port)
	log := &output{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	// Up once it answers AUTH and PING.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("redis-server on %s exited (%v):\n%s", r.addr, err, log)
		default:
		}
		if redisPing(r) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer in 30 s: %v\n%s", r.addr, redisPing(r), log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("Redis of its own on %s", r.addr)
	return r
}

// redisPing authenticates and pings (RESP inline commands).
func redisPing(r redisEnv) error {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "AUTH %s\r\nPING\r\n", r.password); err != nil {
		return err
	}
	var buf bytes.Buffer
	b := make([]byte, 64)
	for !strings.Contains(buf.String(), "+PONG\r\n") {
		n, err := c.Read(b)
		buf.Write(b[:n])
		if err != nil {
			return fmt.Errorf("%w (read %q)", err, buf.String())
		}
	}
	if !strings.HasPrefix(buf.String(), "+OK\r\n") {
		return fmt.Errorf("AUTH: %q", buf.String())
	}
	return nil
}

// streamingInstance is instance(name) with the managed streaming cache on.
func streamingInstance(name string) *v1alpha1.TiledInstance {
	ti := instance(name)
	ti.Spec.Streaming = &v1alpha1.StreamingSpec{Enabled: ptr.To(true), Managed: &v1alpha1.ManagedCache{Image: "redis:7"}}
	return ti
}

// deployStreaming renders an instance whose managed cache is the suite's Redis, provisions its
// database and sets the cache password of its Secret to password (the suite's own, or a wrong one),
// as the managed cache would have been started with the Secret's value.
func deployStreaming(t *testing.T, e suiteEnv, r redisEnv, ti *v1alpha1.TiledInstance, password string) *deployment {
	t.Helper()
	d := deploy(t, e, ti, render.Inputs{CacheAddress: r.addr}, nil)
	g := NewWithT(t)
	secret := d.secrets[d.objs.Names.Secret]
	g.Expect(secret).To(HaveKey(render.SecretKeyStreamingCachePassword), "GenerateSecretData makes the managed cache's password")
	secret[render.SecretKeyStreamingCachePassword] = []byte(password)
	e.provisionManaged(t, string(secret[render.SecretKeyDatabasePassword]))
	return d
}

// streamingCache is the streaming_cache section of the rendered config.yml (nil when absent).
func (d *deployment) streamingCache() map[string]any {
	d.t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(d.objs.ConfigMap.Data[render.ConfigKey]), &cfg); err != nil {
		d.t.Fatalf("config.yml: %v", err)
	}
	sc, _ := cfg["streaming_cache"].(map[string]any)
	return sc
}

// envNames are the names of the Tiled container's environment variables.
func (d *deployment) envNames() []string {
	var out []string
	for _, ev := range d.container(false).Env {
		out = append(out, *ev.Name)
	}
	return out
}

// streamRun is one run of hack/tiled/stream.py.
type streamRun struct {
	result map[string]any // its JSON line
	out    string         // stdout and stderr
	err    error
	took   time.Duration
}

// stream runs hack/tiled/stream.py with the deployment's API key (as d.python runs roundtrip.py),
// bounded by five minutes.
func (d *deployment) stream(args ...string) streamRun {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	script := filepath.Join(filepath.Dir(d.e.roundtrip), "stream.py")
	cmd := exec.CommandContext(ctx, d.e.bin("python"), append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "TILED_API_KEY="+d.apiKey, "HOME="+filepath.Join(d.dir, "tmp"))
	// stdout alone for the JSON line; both, in the order written, for the log (output serializes the
	// two copying goroutines' writes).
	var stdout bytes.Buffer
	all := &output{}
	cmd.Stdout = io.MultiWriter(&stdout, all)
	cmd.Stderr = all
	start := time.Now()
	r := streamRun{err: cmd.Run(), took: time.Since(start)}
	r.out = all.String()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if last := lines[len(lines)-1]; strings.HasPrefix(last, "{") {
		if err := json.Unmarshal([]byte(last), &r.result); err != nil {
			d.t.Fatalf("stream.py %v printed a line that is not JSON: %v\n%s", args, err, r.out)
		}
	}
	d.t.Logf("stream.py %s (%.1fs): %s", args[0], r.took.Seconds(), strings.TrimSpace(r.out))
	return r
}

// mustStream runs stream.py and fails the test unless it succeeds; it returns its JSON.
func (d *deployment) mustStream(args ...string) map[string]any {
	d.t.Helper()
	r := d.stream(args...)
	if r.err != nil || r.result == nil {
		d.t.Fatalf("stream.py %v: %v\n%s", args, r.err, r.out)
	}
	return r.result
}

// num reads a number at a path of stream.py's JSON.
func jsonNum(g Gomega, m map[string]any, path ...string) float64 {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		g.Expect(ok).To(BeTrue(), "%v: no object at %q", m, k)
		v = mm[k]
	}
	f, ok := v.(float64)
	g.Expect(ok).To(BeTrue(), "%v: %v is not a number", path, v)
	return f
}

// expectAllArrived: every kind of update stream.py check sent arrived, counted by the subscriber
// (stream.py itself fails on a miss, a reordering, a gap in the sequence numbers or a wrong payload).
func expectAllArrived(g Gomega, res map[string]any, updates int) {
	g.Expect(res["ok"]).To(Equal(true))
	for _, kind := range []string{"array", "table"} {
		g.Expect(jsonNum(g, res, kind, "received")).To(BeEquivalentTo(updates), kind)
		g.Expect(jsonNum(g, res, kind, "expected")).To(BeEquivalentTo(updates), kind)
		g.Expect(jsonNum(g, res, kind, "last_seq")-jsonNum(g, res, kind, "first_seq")).To(BeEquivalentTo(updates-1), kind)
	}
	g.Expect(jsonNum(g, res, "container", "received")).To(BeEquivalentTo(2), "the array and the table created in the run")
}

// The managed cache as rendered: config.yml names the cache by address with the password only as
// ${STREAMING_CACHE_PASSWORD}, the Tiled container takes it from the instance Secret, and a
// subscriber sees every update of an array patched row by row, of an appendable table appended row
// by row, and of a container gaining children, in order and numbered without a gap.
func TestStreamingSubscription(t *testing.T) {
	t.Parallel()
	e, r := ownPostgres(t), ownRedis(t)
	g := NewWithT(t)
	d := deployStreaming(t, e, r, streamingInstance("stream"), r.password)

	sc := d.streamingCache()
	g.Expect(sc).NotTo(BeNil(), "config.yml has no streaming_cache")
	g.Expect(sc["uri"]).To(Equal(fmt.Sprintf("redis://:${%s}@%s/0", render.EnvStreamingCachePassword, r.addr)))
	g.Expect(d.objs.ConfigMap.Data[render.ConfigKey]).NotTo(ContainSubstring(r.password))
	g.Expect(d.envNames()).To(ContainElement(render.EnvStreamingCachePassword))
	out, err := d.checkConfig()
	g.Expect(err).NotTo(HaveOccurred(), out)

	d.runInit()
	s := d.mustStart()
	const updates = 50
	res := d.mustStream("check", s.url, s.url, "--updates", fmt.Sprint(updates))
	expectAllArrived(g, res, updates)

	// Write-to-callback latency, one write at a time (each waited for before the next).
	lat := d.mustStream("latency", s.url, s.url, "--updates", "200")
	g.Expect(jsonNum(g, lat, "n")).To(BeEquivalentTo(200))
	t.Logf("array write-to-callback latency, one server: p50 %.1f ms, p99 %.1f ms (the write call itself: p50 %.1f ms)",
		jsonNum(g, lat, "p50_ms"), jsonNum(g, lat, "p99_ms"), jsonNum(g, lat, "write_p50_ms"))
	// Generous (two loaded cores): what it rules out is updates delivered by anything slower than
	// the cache's publish, such as a poll.
	g.Expect(jsonNum(g, lat, "p99_ms")).To(BeNumerically("<", 5000))
	s.stop()
}

// Two Tiled servers of one instance share the cache: what is written through one reaches the
// subscribers of the other, both ways.
func TestStreamingAcrossReplicas(t *testing.T) {
	t.Parallel()
	e, r := ownPostgres(t), ownRedis(t)
	g := NewWithT(t)
	ti := streamingInstance("stream-replicas")
	ti.Spec.Tiled.Replicas = ptr.To[int32](2)
	d := deployStreaming(t, e, r, ti, r.password)
	d.runInit()
	a := d.mustStart()
	b := d.mustStart()
	const updates = 30
	expectAllArrived(g, d.mustStream("check", a.url, b.url, "--updates", fmt.Sprint(updates)), updates)
	expectAllArrived(g, d.mustStream("check", b.url, a.url, "--updates", "10"), 10)
	lat := d.mustStream("latency", a.url, b.url, "--updates", "100")
	g.Expect(jsonNum(g, lat, "n")).To(BeEquivalentTo(100))
	t.Logf("array write-to-callback latency, writer and subscriber on two servers: p50 %.1f ms, p99 %.1f ms",
		jsonNum(g, lat, "p50_ms"), jsonNum(g, lat, "p99_ms"))
	a.stop()
	b.stop()
}

// A subscriber that connects late gets the updates it missed from the cache, from the sequence
// number it asks for, then the live ones after them without a gap or a repeat. The replay is
// served by a Tiled process started after the writes: the updates are in the cache, not in the
// memory of the server that published them.
func TestStreamingReplay(t *testing.T) {
	t.Parallel()
	e, r := ownPostgres(t), ownRedis(t)
	g := NewWithT(t)
	d := deployStreaming(t, e, r, streamingInstance("stream-replay"), r.password)
	d.runInit()
	a := d.mustStart()
	const updates = 12
	res := d.mustStream("check", a.url, a.url, "--updates", fmt.Sprint(updates))
	expectAllArrived(g, res, updates)
	key := res["array"].(map[string]any)["key"].(string)
	first, last := int(jsonNum(g, res, "array", "first_seq")), int(jsonNum(g, res, "array", "last_seq"))
	a.stop()

	b := d.mustStart()
	from := first + 4
	rep := d.mustStream("replay", b.url, "--key", key, "--from", fmt.Sprint(from))
	g.Expect(jsonNum(g, rep, "from")).To(BeEquivalentTo(from))
	g.Expect(jsonNum(g, rep, "replayed")).To(BeEquivalentTo(last-from+1), "every cached update from %d to %d", from, last)
	g.Expect(jsonNum(g, rep, "to")).To(BeEquivalentTo(last))
	g.Expect(jsonNum(g, rep, "live_after_replay")).To(BeEquivalentTo(last + 1))

	// stream.py's own round: it writes an array of its own (learning the sequence numbers through a
	// live subscriber), then replays all of it on a new subscription.
	own := d.mustStream("replay", b.url, "--updates", "8")
	g.Expect(jsonNum(g, own, "replayed")).To(BeEquivalentTo(8))
	b.stop()
}

// Streaming off (spec.streaming.enabled false): no streaming_cache in config.yml, no cache password
// anywhere; reads and writes work, and Tiled refuses every subscription with an HTTP 500 at the
// websocket handshake (its handler has no cache to subscribe through). Tiled's own
// Subscription.start_in_thread() then never returns; stream.py reports the refusal. This is what an
// instance without the cache gives a beamline's live viewers.
func TestStreamingOffRefusesSubscriptions(t *testing.T) {
	t.Parallel()
	e := ownPostgres(t)
	g := NewWithT(t)
	ti := instance("stream-off")
	ti.Spec.Streaming = &v1alpha1.StreamingSpec{Enabled: ptr.To(false), Managed: &v1alpha1.ManagedCache{Image: "redis:7"}}
	d := deploy(t, e, ti, render.Inputs{}, nil)
	g.Expect(d.streamingCache()).To(BeNil())
	g.Expect(d.objs.ConfigMap.Data[render.ConfigKey]).NotTo(ContainSubstring("streaming_cache"))
	g.Expect(d.envNames()).NotTo(ContainElement(render.EnvStreamingCachePassword))
	g.Expect(d.secrets[d.objs.Names.Secret]).NotTo(HaveKey(render.SecretKeyStreamingCachePassword))
	e.provisionManaged(t, string(d.secrets[d.objs.Names.Secret][render.SecretKeyDatabasePassword]))
	d.runInit()
	s := d.mustStart()

	p := d.mustStream("probe", s.url, "--timeout", "15")
	g.Expect(p["write"]).To(Equal("ok"), "writes work without the cache")
	g.Expect(p["subscribe"]).To(Equal("refused"))
	g.Expect(p["subscribe_error"]).To(ContainSubstring("HTTP 500"))
	g.Expect(s.log.String()).To(ContainSubstring("'NoneType' object has no attribute 'make_ws_handler'"))

	// The check itself fails, naming the refusal: it cannot pass on an instance without the cache.
	r := d.stream("check", s.url, s.url, "--updates", "3", "--timeout", "15")
	g.Expect(r.err).To(HaveOccurred(), "stream.py check passed without a streaming cache:\n%s", r.out)
	g.Expect(r.out).To(MatchRegexp(`stream.py check: FAIL: subscription to \S+ refused: InvalidStatus: .*HTTP 500`))
	s.stop()
}

// A cache password that is not the cache's (the Secret changed but not the cache, or the reverse):
// Tiled starts and answers /healthz, reads work, and every write fails with a 500, because Tiled
// publishes each write to the cache before it stores it. The client's error gives a correlation ID;
// the server's log, on that request, names Redis' refusal (AuthenticationError). Neither password
// appears in any log or output (checkNoSecretsInLogs covers the Secret's values on cleanup).
func TestStreamingWrongPasswordIsNamed(t *testing.T) {
	t.Parallel()
	e, r := ownPostgres(t), ownRedis(t)
	g := NewWithT(t)
	const wrong = "NotTheCachePassword0123456789"
	d := deployStreaming(t, e, r, streamingInstance("stream-wrongpw"), wrong)
	d.runInit()
	s := d.mustStart()
	code, _ := d.get(s, "/healthz")
	g.Expect(code).To(Equal(http.StatusOK), "Tiled's /healthz does not look at the cache")

	p := d.stream("probe", s.url, "--timeout", "10")
	g.Expect(p.err).NotTo(HaveOccurred(), p.out)
	t.Logf("a write with the wrong cache password failed after %.1fs (the client retries 5xx)", p.took.Seconds())
	g.Expect(p.result["write"]).To(Equal("failed"))
	g.Expect(p.result["write_error"]).To(ContainSubstring("500 Internal Server Error"))
	g.Expect(p.result["received"]).To(Equal(false))
	id, _ := p.result["correlation_id"].(string)
	g.Expect(id).NotTo(BeEmpty(), "the client's error names no correlation ID: %v", p.result)

	g.Expect(s.log.String()).To(ContainSubstring("["+id+"]"), "the server log has the request the client's error names")
	g.Expect(s.log.String()).To(ContainSubstring("redis.exceptions.AuthenticationError: invalid username-password pair"))
	log := d.logs.String() // every container command's output
	// The error names the cause, not the credentials: neither the wrong password nor the right one.
	for _, pw := range []string{wrong, r.password} {
		g.Expect(log).NotTo(ContainSubstring(pw))
		g.Expect(p.out).NotTo(ContainSubstring(pw))
	}
	// Reads still work.
	code, body := d.get(s, "/api/v1/search/")
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring("stream-probe-"),
		"the node was created (the catalog commits before the publish fails) though its data write failed")
	s.stop()
}
