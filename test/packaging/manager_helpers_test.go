package packaging

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The names config/default gives what the tests below look at.
const (
	managerSA        = "tiled-operator-controller-manager"
	webhookService   = "tiled-operator-webhook-service"
	caSecret         = "tiled-operator-webhook-ca"
	mutatingConfig   = "tiled-operator-mutating-webhook-configuration"
	validatingConfig = "tiled-operator-validating-webhook-configuration"
)

// serviceCIDR is the control plane's Service range: loopback, so that the API server reaches a
// webhook Service's ClusterIP (which it dials, as without --enable-aggregator-routing) on this
// machine, where the tests listen in place of kube-proxy. EndpointSlices cannot carry loopback
// addresses, so routing to endpoints is not an option without a network namespace.
const serviceCIDR = "127.77.0.0/24"

// serviceAccountConfig returns a client configuration that authenticates as the manager's
// ServiceAccount with a token from the TokenRequest API: the API server then authorizes its requests
// with the RBAC config/default installed, as in a cluster.
func serviceAccountConfig(ctx context.Context, t *testing.T, e *testenv.Env, namespace, name string) *rest.Config {
	t.Helper()
	tr, err := e.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return &rest.Config{
		Host: e.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.Config.CAData},
		QPS:             -1,
	}
}

// running is a manager started by startManager: the shared fixture's in-process operator
// (test/support/fixture) and the addresses it listens on.
type running struct {
	name        string
	op          *fixture.Operator
	webhookPort int
	probe       string
	metrics     string
	err         error // what Start returned, once stopped
	opts        *webhooks.Options
}

// startManager runs the operator's manager in this process as config/default runs it: leader
// election in the namespace, the webhooks with the manager's own CA (--cert-management=self) whose
// Secret lives in the namespace, probes on loopback, and with secureMetrics the metrics endpoint
// behind authentication and authorization. Only the addresses differ.
func startManager(t *testing.T, name string, cfg *rest.Config, namespace string, trustDelay time.Duration, secureMetrics bool) *running {
	t.Helper()
	r := &running{name: name, webhookPort: freePort(t), probe: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	r.opts = &webhooks.Options{
		Host: "127.0.0.1", Port: r.webhookPort, CertMode: webhooks.CertSelf,
		Certs:             webhooks.CertOptions{Namespace: namespace, TrustDelay: trustDelay},
		OperatorUsernames: []string{"system:serviceaccount:" + namespace + ":" + managerSA},
	}
	metrics := "0"
	if secureMetrics {
		r.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		metrics = r.metrics
	}
	// Tolerant: a test that cares reads the error stop records.
	r.op = fixture.StartOperator(t, cfg, fixture.OperatorOptions{Tolerant: true, Manager: operator.ManagerOptions{
		MetricsBindAddress: metrics, SecureMetrics: secureMetrics, HealthProbeBindAddress: r.probe,
		LeaderElection: true, LeaderElectionNamespace: namespace,
		Webhooks: r.opts, Restartable: true,
	}})
	return r
}

// stop stops the manager and waits for it (idempotent).
func (r *running) stop() { r.err = r.op.Stop() }

// ready returns nil when the manager's /readyz answers 200, as the kubelet's readiness probe asks.
func (r *running) ready() error {
	resp, err := http.Get("http://" + r.probe + "/readyz?verbose") //nolint:noctx // a probe, short-lived
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("manager %s not ready: %d %s", r.name, resp.StatusCode, body)
	}
	return nil
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// forwarder stands in for kube-proxy: it listens on a Service's ClusterIP and port and forwards
// each TCP connection to the backend chosen by use. TLS goes end to end, so the API server checks
// the backend's own certificate.
type forwarder struct {
	ln      net.Listener
	mu      sync.Mutex
	backend string
	conns   map[net.Conn]bool
	hits    map[string]int
}

func newForwarder(t *testing.T, addr string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on the webhook Service's address %s in place of kube-proxy (the port is privileged: run as root): %v", addr, err)
	}
	f := &forwarder{ln: ln, conns: map[net.Conn]bool{}, hits: map[string]int{}}
	go f.serve()
	t.Cleanup(func() { _ = ln.Close(); f.use("") })
	return f
}

// use sends new connections to backend and closes those open to the previous one.
func (f *forwarder) use(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend = backend
	for c := range f.conns {
		_ = c.Close()
		delete(f.conns, c)
	}
}

// connections returns how many connections went to backend.
func (f *forwarder) connections(backend string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[backend]
}

func (f *forwarder) serve() {
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		backend := f.backend
		f.mu.Unlock()
		if backend == "" {
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", backend, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		f.mu.Lock()
		f.conns[in], f.conns[out] = true, true
		f.hits[backend]++
		f.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src) // ends when either side closes
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}
