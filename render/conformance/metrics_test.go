//go:build tiledconformance

package conformance

import (
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

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// sidecar runs the metrics sidecar's command as rendered (the StatefulSet's second container) with
// only METRICS_PORT changed to a free one, and returns its base URL once the port accepts connections
// (the container's readiness probe).
func (d *deployment) sidecar() string {
	d.t.Helper()
	c := &d.objs.StatefulSet.Spec.Template.Spec.Containers[1]
	if *c.Name != render.MetricsContainerName {
		d.t.Fatalf("second container is %q, want %q", *c.Name, render.MetricsContainerName)
	}
	args := d.command(c)
	port := freePort(d.t)
	env := d.env(c)
	for i, e := range env {
		if strings.HasPrefix(e, "METRICS_PORT=") {
			env[i] = fmt.Sprintf("METRICS_PORT=%d", port)
		}
	}
	cmd := exec.Command(d.lookPath(args[0]), args[1:]...)
	cmd.Env = env
	cmd.Dir = d.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log := &output{}
	cmd.Stdout, cmd.Stderr = d.tee(log), d.tee(log)
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	s := &server{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, log: log, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	d.t.Cleanup(s.stop)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			d.t.Fatalf("metrics sidecar exited (%v):\n%s", err, log.String())
		default:
		}
		if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			conn.Close()
			d.t.Logf("metrics sidecar: %s", strings.TrimSpace(log.String()))
			return s.url
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.t.Fatalf("metrics sidecar did not listen in 30s:\n%s", log.String())
	return ""
}

func scrape(t *testing.T, url, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestMetricsSidecar: with spec.monitoring.serviceMonitor, Tiled (started through metrics.py exec,
// as rendered) keeps its metrics in the shared directory, emptied at each start; the sidecar, as
// rendered, serves them at /metrics to the metrics Secret's bearer token only (401 without it, with a
// wrong one, or with the API key; 404 elsewhere), with Tiled's request histogram and its labels; and
// Tiled's own /api/v1/metrics still answers the API key. No log shows the token (checkNoSecretsInLogs).
// The catalog is SQLite: this case needs no PostgreSQL.
func TestMetricsSidecar(t *testing.T) {
	t.Parallel()
	e := getEnv(t)
	g := NewWithT(t)
	db := t.TempDir()
	ti := instance("metrics")
	ti.Spec.Monitoring = &v1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true)}
	ti.Spec.Database = &v1alpha1.DatabaseSpec{External: &v1alpha1.ExternalDatabase{
		URISecretRef: &v1alpha1.SecretKeyRef{Name: "beamline-db", Key: "uri"},
	}}
	d := deploy(t, e, ti, render.Inputs{ExternalSecretKeys: []string{"uri"}},
		map[string]map[string][]byte{"beamline-db": {"uri": []byte("sqlite+aiosqlite:///" + filepath.Join(db, "catalog.db"))}})
	// The SQLite URI holds no credential, and Tiled logs its catalog URI: leave it out of the check of
	// the logs for secrets (a deferred call runs before the check, a cleanup).
	defer delete(d.secrets, "beamline-db")
	g.Expect(d.objs.MetricsSecret).NotTo(BeNil())
	token := string(d.secrets[d.objs.Names.MetricsSecret][render.SecretKeyMetricsToken])
	g.Expect(token).NotTo(BeEmpty())

	// What a previous run of the container left in the emptyDir.
	dir := filepath.Join(d.dir, "metrics")
	g.Expect(os.WriteFile(filepath.Join(dir, "histogram_1.db"), []byte("stale"), 0o644)).To(Succeed())

	d.runInit()
	s := d.mustStart()
	files := func() []string {
		entries, err := os.ReadDir(dir)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, en := range entries {
			out = append(out, en.Name())
		}
		return out
	}
	pid := s.cmd.Process.Pid
	g.Expect(files()).To(ConsistOf(
		fmt.Sprintf("counter_%d.db", pid), fmt.Sprintf("gauge_all_%d.db", pid), fmt.Sprintf("histogram_%d.db", pid)),
		"emptied at start, then written by Tiled (the same process: metrics.py execs the entrypoint)")

	for _, path := range []string{"/api/v1/", "/api/v1/metadata/", "/api/v1/search/", "/api/v1/metadata/missing"} {
		d.get(s, path)
	}
	side := d.sidecar()
	url := side + render.MetricsSidecarPath
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Apikey " + d.apiKey, "Bearer " + d.apiKey, token} {
		code, _ := scrape(t, url, auth)
		g.Expect(code).To(Equal(http.StatusUnauthorized), "Authorization %q", strings.ReplaceAll(auth, token, "<token>"))
	}
	code, _ := scrape(t, side+"/", "Bearer "+token)
	g.Expect(code).To(Equal(http.StatusNotFound))
	code, body := scrape(t, url, "Bearer "+token)
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring(`tiled_request_duration_seconds_count{code="200",endpoint="metadata",method="GET"} 1.0`))
	g.Expect(body).To(ContainSubstring(`tiled_request_duration_seconds_count{code="200",endpoint="search",method="GET"} 1.0`))
	g.Expect(body).To(MatchRegexp(`tiled_request_duration_seconds_bucket\{code="404",endpoint="[a-z]+",le="\+Inf",method="GET"\} 1\.0`))
	// Tiled's own endpoint still answers the API key.
	d.checkMetrics(s)

	// A restart of the Tiled container: the directory is emptied, the counts start again.
	s.stop()
	s = d.mustStart()
	g.Expect(files()).To(HaveLen(3))
	g.Expect(files()).To(ContainElement(fmt.Sprintf("histogram_%d.db", s.cmd.Process.Pid)))
	d.get(s, "/api/v1/search/")
	code, body = scrape(t, url, "Bearer "+token)
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring(`tiled_request_duration_seconds_count{code="200",endpoint="search",method="GET"} 1.0`))
	g.Expect(body).To(ContainSubstring(`tiled_request_duration_seconds_count{code="200",endpoint="metadata",method="GET"} 0.0`))
	s.stop()
}
