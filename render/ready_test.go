package render

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The Tiled container's readiness probe as rendered: ready.py from the ConfigMap, by the image's
// Python, with no secret on its command line; the startup and liveness probes stay on /healthz.
func TestTiledReadinessProbe(t *testing.T) {
	g := NewWithT(t)
	for _, f := range fixtures() {
		o, err := Render(f.ti(), f.in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(o.ConfigMap.Data).To(HaveKeyWithValue(ReadyScriptKey, ReadyScript()), f.name)
		c := o.StatefulSet.Spec.Template.Spec.Containers[0]
		g.Expect(*c.Name).To(Equal("tiled"))
		r := c.ReadinessProbe
		g.Expect(r.HTTPGet).To(BeNil(), f.name)
		g.Expect(r.Exec.Command).To(Equal([]string{"python", "-S", ConfigDir + "/" + ReadyScriptKey}), f.name)
		g.Expect(*r.PeriodSeconds).To(BeEquivalentTo(ReadyPeriodSeconds))
		g.Expect(*r.TimeoutSeconds).To(BeEquivalentTo(ReadyTimeoutSeconds))
		g.Expect(*r.FailureThreshold).To(BeEquivalentTo(ReadyFailureThreshold))
		for _, p := range []string{"startup", "liveness"} {
			probe := c.StartupProbe
			if p == "liveness" {
				probe = c.LivenessProbe
			}
			g.Expect(probe.Exec).To(BeNil(), "%s %s", f.name, p)
			g.Expect(*probe.HTTPGet.Path).To(Equal("/healthz"), "%s %s: a lost database or cache must not restart Tiled", f.name, p)
		}
	}
}

// ready.py outside the config hash: a new version of the check is read by the running pods at their
// next probe and replaces none of them.
func TestReadyScriptOutsideTheHash(t *testing.T) {
	g := NewWithT(t)
	ti := baseInstance("ready")
	cm, hash, err := ConfigMap(ti, Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Data).To(HaveKey(ReadyScriptKey))
	g.Expect(hash).To(Equal(Hash([]byte(cm.Data[ConfigKey]), []byte(cm.Data[EntrypointKey]))))
}

// fakeRedis is a Redis-protocol server for ready.py's cache check: it answers AUTH against its
// password, SELECT, PING and SENTINEL get-master-addr-by-name (primary, when set), or nothing at all
// (hang).
type fakeRedis struct {
	ln       net.Listener
	password string
	primary  string // host:port this server names as the primary of service "tiled", as a Sentinel
	hang     bool
	mu       sync.Mutex
	seen     []string // the commands received, AUTH's arguments left out
}

func newFakeRedis(t *testing.T, password string) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRedis{ln: ln, password: password}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()
	return r
}

func (r *fakeRedis) addr() string { return r.ln.Addr().String() }

// commands are the commands received so far.
func (r *fakeRedis) commands() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// readCommand reads one RESP array of bulk strings.
func readCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = br.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, fmt.Errorf("not a bulk string: %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// set changes the server's behaviour (under its lock: its connections read it).
func (r *fakeRedis) set(edit func(r *fakeRedis)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	edit(r)
}

func (r *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r.mu.Lock()
	hang, password, primary := r.hang, r.password, r.primary
	r.mu.Unlock()
	if hang {
		_, _ = io.Copy(io.Discard, c)
		return
	}
	br := bufio.NewReader(c)
	authed := password == ""
	for {
		args, err := readCommand(br)
		if err != nil {
			return
		}
		cmd := strings.ToUpper(args[0])
		r.mu.Lock()
		r.seen = append(r.seen, cmd)
		r.mu.Unlock()
		var reply string
		switch {
		case cmd == "AUTH":
			if args[len(args)-1] == password {
				authed, reply = true, "+OK\r\n"
			} else {
				reply = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
			}
		case cmd == "SENTINEL" && primary != "":
			if args[2] != "tiled" {
				reply = "*-1\r\n"
				break
			}
			host, port, _ := net.SplitHostPort(primary)
			reply = fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
		case !authed:
			reply = "-NOAUTH Authentication required.\r\n"
		case cmd == "SELECT":
			reply = "+OK\r\n"
		case cmd == "PING":
			reply = "+PONG\r\n"
		default:
			reply = "-ERR unknown command\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// fakeTiled answers ready.py's catalog search with status, recording the Authorization header.
type fakeTiled struct {
	srv    *httptest.Server
	status int
	mu     sync.Mutex
	auth   []string
	query  []string
}

func newFakeTiled(t *testing.T, status int) *fakeTiled {
	f := &fakeTiled{status: status}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.query = append(f.query, r.URL.RequestURI())
		f.mu.Unlock()
		w.Header().Set("X-Tiled-Request-ID", "abc123")
		w.WriteHeader(f.status)
		switch {
		case f.status == http.StatusOK:
			_, _ = io.WriteString(w, `{"data": [], "links": {}, "meta": {"count": 0}}`)
		case f.status >= 500:
			_, _ = io.WriteString(w, `{"detail": "Internal server error"}`)
		default:
			_, _ = io.WriteString(w, `{"detail": "Not authenticated"}`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeTiled) port() int { return f.srv.Listener.Addr().(*net.TCPAddr).Port }

// closedPort is a port on 127.0.0.1 nothing listens on.
func closedPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// runReady runs ready.py as the kubelet does (python3 here: the test machine's, with the standard
// library only), HOME holding the serving file entrypoint.py would have written, and env the
// container's environment; it returns the exit code, the output and how long it took.
func runReady(t *testing.T, serving map[string]any, env ...string) (int, string, time.Duration) {
	t.Helper()
	g := NewWithT(t)
	python, err := exec.LookPath("python3")
	g.Expect(err).NotTo(HaveOccurred(), "ready.py's tests need python3")
	dir := t.TempDir()
	script := filepath.Join(dir, ReadyScriptKey)
	g.Expect(os.WriteFile(script, []byte(ReadyScript()), 0o644)).To(Succeed())
	if serving != nil {
		b, err := json.Marshal(serving)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(dir, ".tiled-operator-serving.json"), b, 0o600)).To(Succeed())
	}
	cmd := exec.Command(python, "-S", script)
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		g.Expect(err).NotTo(HaveOccurred())
	}
	return code, string(out), took
}

func TestReadyScript(t *testing.T) {
	const key, password = "the-single-user-key-0123", "the-cache-password-4567"
	type setup struct {
		tiled   *fakeTiled
		cache   *fakeRedis
		serving map[string]any
		env     []string
	}
	managed := func(s *setup) {
		s.serving["streaming_cache"] = map[string]any{"uri": "redis://:${" + EnvStreamingCachePassword + "}@" + s.cache.addr() + "/0", "data_ttl": 3600}
	}
	cases := []struct {
		name   string
		status int // what Tiled answers; 0: nothing listens; -1: it accepts and never answers
		edit   func(t *testing.T, s *setup)
		code   int
		// out matches the one line printed (empty: nothing printed).
		out string
		// after checks what the fakes saw.
		after func(g Gomega, s *setup)
	}{
		{name: "healthy, with streaming", status: 200, edit: func(_ *testing.T, s *setup) { managed(s) }},
		{name: "healthy, without streaming", status: 200},
		{name: "the catalog fails (its tables gone: HTTP 500)", status: 500, edit: func(_ *testing.T, s *setup) { managed(s) }, code: 1,
			out: `^catalog: HTTP 500: Internal server error \(request abc123 in Tiled's log\)$`},
		{name: "Tiled does not answer", status: 0, code: 1,
			out: `^catalog: Tiled on 127\.0\.0\.1:\d+: connection refused$`},
		{name: "the cache is down", status: 200, code: 1, edit: func(t *testing.T, s *setup) {
			s.serving["streaming_cache"] = map[string]any{"uri": fmt.Sprintf("redis://:${%s}@127.0.0.1:%d/0", EnvStreamingCachePassword, closedPort(t))}
		}, out: `^streaming cache 127\.0\.0\.1:\d+: connection refused$`},
		{name: "the cache does not answer (paused)", status: 200, code: 1, edit: func(_ *testing.T, s *setup) {
			s.cache.set(func(r *fakeRedis) { r.hang = true })
			managed(s)
		}, out: `^streaming cache 127\.0\.0\.1:\d+: no answer in time$`},
		{name: "the cache refuses the password", status: 200, code: 1, edit: func(_ *testing.T, s *setup) {
			s.cache.set(func(r *fakeRedis) { r.password = "another" })
			managed(s)
		}, out: `^streaming cache 127\.0\.0\.1:\d+: AUTH refused: WRONGPASS invalid username-password pair or user is disabled\.$`},
		{name: "both fail: both named", status: 500, code: 1, edit: func(t *testing.T, s *setup) {
			s.serving["streaming_cache"] = map[string]any{"uri": fmt.Sprintf("redis://127.0.0.1:%d", closedPort(t))}
		}, out: `^catalog: HTTP 500: .*; streaming cache 127\.0\.0\.1:\d+: connection refused$`},
		{name: "Tiled and the cache both hang: both named, within the budget", status: -1, code: 1, edit: func(_ *testing.T, s *setup) {
			s.cache.set(func(r *fakeRedis) { r.hang = true })
			managed(s)
		}, out: `^catalog: Tiled on 127\.0\.0\.1:\d+: no answer in time; streaming cache 127\.0\.0\.1:\d+: no answer in time$`},
		{name: "an external cache by URI, database 3", status: 200, edit: func(_ *testing.T, s *setup) {
			s.env = append(s.env, EnvStreamingCacheURI+"=redis://:"+password+"@"+s.cache.addr()+"/3")
			s.serving["streaming_cache"] = map[string]any{"uri": "${" + EnvStreamingCacheURI + "}"}
		}, after: func(g Gomega, s *setup) {
			g.Expect(s.cache.commands()).To(Equal([]string{"AUTH", "SELECT", "PING"}))
		}},
		{name: "Sentinel names the primary, which answers", status: 200, edit: func(t *testing.T, s *setup) {
			sentinel := newFakeRedis(t, "")
			sentinel.set(func(r *fakeRedis) { r.primary = s.cache.addr() })
			s.serving["streaming_cache"] = map[string]any{
				"sentinels":    []string{fmt.Sprintf("127.0.0.1:%d", closedPort(t)), sentinel.addr()},
				"service_name": "tiled", "password": "${" + EnvStreamingCachePassword + "}",
			}
		}},
		{name: "Sentinel knows no such service", status: 200, code: 1, edit: func(t *testing.T, s *setup) {
			sentinel := newFakeRedis(t, "")
			sentinel.set(func(r *fakeRedis) { r.primary = s.cache.addr() })
			s.serving["streaming_cache"] = map[string]any{"sentinels": []string{sentinel.addr()}, "service_name": "other"}
		}, out: `^streaming cache: Sentinel 127\.0\.0\.1:\d+ knows no service 'other'$`},
		{name: "no Sentinel answers", status: 200, code: 1, edit: func(t *testing.T, s *setup) {
			s.serving["streaming_cache"] = map[string]any{"sentinels": []string{fmt.Sprintf("127.0.0.1:%d", closedPort(t))}, "service_name": "tiled"}
		}, out: `^streaming cache: no Sentinel answers \(127\.0\.0\.1:\d+: connection refused\)$`},
		{name: "Tiled refuses the key", status: 401, code: 1, out: `^catalog: HTTP 401: Not authenticated$`},
		{name: "no serving file (Tiled not started by entrypoint.py serve)", status: 200, code: 1, edit: func(_ *testing.T, s *setup) {
			s.serving = nil
		}, out: `^ready: .*\.tiled-operator-serving\.json: No such file or directory \(entrypoint\.py serve writes it before Tiled starts\)$`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &setup{cache: newFakeRedis(t, password), serving: map[string]any{},
				env: []string{EnvAPIKey + "=" + key, EnvStreamingCachePassword + "=" + password}}
			port := closedPort(t)
			switch c.status {
			case 0:
			case -1:
				hung := newFakeRedis(t, "") // any listener that never answers
				hung.set(func(r *fakeRedis) { r.hang = true })
				port = hung.ln.Addr().(*net.TCPAddr).Port
			default:
				s.tiled = newFakeTiled(t, c.status)
				port = s.tiled.port()
			}
			s.serving["port"] = port
			if c.edit != nil {
				c.edit(t, s)
			}
			code, out, took := runReady(t, s.serving, s.env...)
			t.Logf("ready.py: exit %d in %s: %s", code, took.Round(time.Millisecond), out)
			g.Expect(code).To(Equal(c.code), out)
			if c.out == "" {
				g.Expect(out).To(BeEmpty())
			} else {
				g.Expect(strings.TrimSuffix(out, "\n")).To(MatchRegexp(c.out))
				g.Expect(strings.Count(out, "\n")).To(Equal(1), "one line, for the kubelet's Event")
			}
			g.Expect(out).NotTo(ContainSubstring(password))
			g.Expect(out).NotTo(ContainSubstring(key))
			g.Expect(took).To(BeNumerically("<", time.Duration(ReadyTimeoutSeconds)*time.Second), "ready.py must end before the kubelet's timeout")
			if c.after != nil {
				c.after(g, s)
			}
			if s.tiled != nil && s.serving != nil {
				s.tiled.mu.Lock()
				defer s.tiled.mu.Unlock()
				g.Expect(s.tiled.auth).To(ConsistOf("Apikey "+key), "one request, with the key from the environment")
				g.Expect(s.tiled.query).To(ConsistOf("/api/v1/search/?page%5Blimit%5D=0&fields=&omit_links=true"))
			}
		})
	}
}

// Without a single-user key (OIDC), the catalog search is sent without credentials: Tiled answers it
// under anonymous access.
func TestReadyScriptAnonymous(t *testing.T) {
	g := NewWithT(t)
	tiled := newFakeTiled(t, http.StatusOK)
	code, out, _ := runReady(t, map[string]any{"port": tiled.port()})
	g.Expect(code).To(BeZero(), out)
	tiled.mu.Lock()
	defer tiled.mu.Unlock()
	g.Expect(tiled.auth).To(ConsistOf(""))
}

// The serving file entrypoint.py's serve leaves is the shape ready.py reads: render's config.yml
// keys, the secrets as ${VAR}.
func TestReadyServingFileOfTheRender(t *testing.T) {
	g := NewWithT(t)
	ti := baseInstance("ready")
	cfg, err := Config(ti, Inputs{})
	g.Expect(err).NotTo(HaveOccurred())
	sc, ok := cfg["streaming_cache"].(map[string]any)
	g.Expect(ok).To(BeTrue(), "the base instance streams")
	g.Expect(sc["uri"]).To(HavePrefix("redis://:${" + EnvStreamingCachePassword + "}@"))
	g.Expect(Entrypoint()).To(ContainSubstring(`SERVING_FILE = ".tiled-operator-serving.json"`))
	g.Expect(ReadyScript()).To(ContainSubstring(`SERVING_FILE = ".tiled-operator-serving.json"`))
}
