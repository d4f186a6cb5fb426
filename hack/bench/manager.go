package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// The manager is measured as users deploy it: the binary of cmd/manager, in a process of its own,
// with the flags and environment of the shipped Deployment (config/manager/manager.yaml) where they
// apply outside a pod. managerFlags lists them; Setup.Manager records them with the figures.
func managerFlags(systemNS string, ports managerPorts) []string {
	return []string{
		"--leader-elect",
		"--leader-election-namespace=" + systemNS,
		"--webhooks",
		"--cert-management=self",
		fmt.Sprintf("--webhook-port=%d", ports.webhook),
		// Outside a pod there is no Service: the webhook configurations call a replica on loopback
		// (every replica publishes the same URL, as they would the same Service).
		fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", ports.webhookURL),
		// Metrics on, over plain HTTP on loopback for the harness to scrape (the Deployment serves
		// them over HTTPS behind TokenReview; the counters are the same).
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports.metrics),
		"--metrics-secure=false",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports.probe),
		fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports.pprof),
	}
}

type managerPorts struct{ webhook, webhookURL, metrics, probe, pprof int }

// containerMemory is the manager container's memory limit and request, in bytes.
type containerMemory struct{ limit, request int64 }

// shippedMemory reads the manager container's memory limit and request from
// config/manager/manager.yaml: the Deployment passes them to the manager as $MEMORY_LIMIT and
// $MEMORY_REQUEST, and so does the harness.
func shippedMemory() (containerMemory, error) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "manager", "manager.yaml"))
	if err != nil {
		return containerMemory{}, err
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "manager" {
				continue
			}
			limit, ok := c.Resources.Limits["memory"]
			request, ok2 := c.Resources.Requests["memory"]
			if !ok || !ok2 {
				return containerMemory{}, fmt.Errorf("config/manager/manager.yaml: the manager container has no memory limit or request")
			}
			return containerMemory{limit: limit.Value(), request: request.Value()}, nil
		}
	}
	return containerMemory{}, fmt.Errorf("config/manager/manager.yaml: no Deployment with a container named manager")
}

// buildManager builds cmd/manager into dir as the Dockerfile does (CGO off, -trimpath, no symbol table).
func buildManager(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/manager")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/manager: %w\n%s", err, out)
	}
	return bin, nil
}

// managerProc is one running manager replica.
type managerProc struct {
	name  string
	cmd   *exec.Cmd
	ports managerPorts
	done  chan struct{}
	log   *lockedBuffer
	http  *http.Client
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startManager starts a replica with the shipped flags against env's control plane. It serves the
// webhooks on webhookPort; the webhook configurations call urlPort (the first replica's).
func startManager(bin, name string, env *testenv.Env, systemNS string, mem containerMemory, webhookPort, urlPort int) (*managerProc, error) {
	ports := managerPorts{webhook: webhookPort, webhookURL: urlPort}
	for _, p := range []*int{&ports.metrics, &ports.probe, &ports.pprof} {
		var err error
		if *p, err = testenv.FreePort(); err != nil {
			return nil, err
		}
	}
	// The harness scrapes the manager's metrics several times a second to see it quiet: plain text,
	// not gzip (which Go's client asks for by default), or the manager's CPU would pay for the
	// scrapes of the measurement (a Prometheus scrapes every 15-30 s).
	scraper := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	m := &managerProc{name: name, ports: ports, done: make(chan struct{}), log: &lockedBuffer{}, http: scraper}
	m.cmd = exec.Command(bin, managerFlags(systemNS, ports)...)
	m.cmd.Env = append(os.Environ(),
		"KUBECONFIG="+env.Kubeconfig,
		"POD_NAMESPACE="+systemNS,
		"SERVICE_ACCOUNT_NAME=tiled-operator-controller-manager",
		"MEMORY_LIMIT="+strconv.FormatInt(mem.limit, 10),
		"MEMORY_REQUEST="+strconv.FormatInt(mem.request, 10),
		"GOMEMLIMIT=", // unset: the manager derives it from MEMORY_LIMIT, as in the Deployment
	)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting manager %s: %w", name, err)
	}
	go func() {
		_ = m.cmd.Wait()
		// BENCH_MANAGER_LOGS keeps what each replica printed, for debugging a run.
		if dir := os.Getenv("BENCH_MANAGER_LOGS"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, "manager-"+name+".log"), []byte(m.log.String()), 0o644)
		}
		close(m.done)
	}()
	return m, nil
}

// exited reports whether the process has ended.
func (m *managerProc) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// stop sends sig (SIGTERM: a graceful stop, the Lease released; SIGKILL: a crash) and waits.
func (m *managerProc) stop(sig syscall.Signal) error {
	if m.exited() {
		return nil
	}
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.done:
		return nil
	case <-time.After(60 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
		return fmt.Errorf("manager %s did not stop within 60 s of %s", m.name, sig)
	}
}

func (m *managerProc) get(ctx context.Context, port int, path string) ([]byte, error) {
	return httpGet(ctx, m.http, fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
}

// metrics scrapes the replica's Prometheus metrics.
func (m *managerProc) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	body, err := m.get(ctx, m.ports.metrics, "/metrics")
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

// traffic is the operator's own count of its requests (tiled_operator_api_requests_total).
func (m *managerProc) traffic(ctx context.Context) (traffic.Snapshot, error) {
	fams, err := m.metrics(ctx)
	if err != nil {
		return nil, err
	}
	s := traffic.Snapshot{}
	if f := fams["tiled_operator_api_requests_total"]; f != nil {
		for _, mt := range f.GetMetric() {
			var k traffic.Key
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "verb":
					k.Verb = l.GetValue()
				case "resource":
					k.Resource = l.GetValue()
				}
			}
			s[k] = int64(mt.GetCounter().GetValue())
		}
	}
	return s, nil
}

// leading reports whether the replica holds the leader-election Lease.
func (m *managerProc) leading(ctx context.Context) (bool, error) {
	fams, err := m.metrics(ctx)
	if err != nil {
		return false, err
	}
	if f := fams["leader_election_master_status"]; f != nil {
		for _, mt := range f.GetMetric() {
			if mt.GetGauge().GetValue() == 1 {
				return true, nil
			}
		}
	}
	return false, nil
}

// ready reports whether /readyz answers 200.
func (m *managerProc) ready(ctx context.Context) bool {
	_, err := m.get(ctx, m.ports.probe, "/readyz")
	return err == nil
}

// heapProfile fetches a heap profile after a collection (gc=1).
func (m *managerProc) heapProfile(ctx context.Context) ([]byte, error) {
	return m.get(ctx, m.ports.pprof, "/debug/pprof/heap?gc=1")
}

// heapProfileAsIs fetches a heap profile without forcing a collection: the heap in use as of the
// last one the manager ran by itself. The sampler takes these while a phase runs, so that measuring
// the peak adds no collections to the phase it measures.
func (m *managerProc) heapProfileAsIs(ctx context.Context) ([]byte, error) {
	return m.get(ctx, m.ports.pprof, "/debug/pprof/heap")
}

// statusKiB reads a "Name:  123 kB" field of the process's /proc status, in KiB.
func (m *managerProc) statusKiB(field string) int64 {
	return procStatusKiBOf(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid), field)
}

func procStatusKiBOf(path, field string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, field+":") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, field+":"))
		if len(fields) == 0 {
			return 0
		}
		v, _ := strconv.ParseInt(fields[0], 10, 64)
		return v
	}
	return 0
}

// rssSampler follows a replica's resident set every 200 ms and fetches a heap profile whenever it
// passed its previous peak by 10 % (the kernel keeps the peak, VmHWM, but not what made it).
type rssSampler struct {
	m           *managerProc
	mu          sync.Mutex
	profiledAt  int64
	peakProfile []byte
	peakAnon    int64
	stopc, done chan struct{}
}

func startRSSSampler(ctx context.Context, m *managerProc, profile bool) *rssSampler {
	s := &rssSampler{m: m, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			rss := m.statusKiB("VmRSS")
			anon := m.statusKiB("RssAnon")
			s.mu.Lock()
			s.peakAnon = max(s.peakAnon, anon)
			s.mu.Unlock()
			if profile && rss > s.profiledAt+s.profiledAt/10 {
				if p, err := m.heapProfileAsIs(ctx); err == nil {
					s.mu.Lock()
					s.profiledAt, s.peakProfile = rss, p
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// peakAnonKiB is the highest anonymous resident memory sampled (the heap, stacks and the runtime's
// own; VmHWM adds the pages of the binary that were read).
func (s *rssSampler) peakAnonKiB() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakAnon
}

func (s *rssSampler) stop() []byte {
	close(s.stopc)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakProfile
}

// memMiB converts a quantity of bytes to MiB.
func memMiB(q int64) float64 { return float64(q) / (1 << 20) }
