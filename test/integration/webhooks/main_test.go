package webhooks_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

// env is the real kube-apiserver and etcd; the apiserver calls the webhooks over TLS.
// kube-controller-manager aggregates the operator's editor role into "edit" for the RBAC test.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{ControllerManager: true}, &env))
}

// server is a manager serving the webhooks with self-signed certificates, the webhook
// configurations pointing at it.
type server struct {
	mgr    ctrl.Manager
	hooks  *webhooks.Webhooks
	port   int
	cancel context.CancelFunc
	done   chan struct{}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startWebhooks runs the webhooks until the test ends (or stop is called).
func startWebhooks(t testing.TB) *server {
	t.Helper()
	port := freePort(t)
	o := &webhooks.Options{
		Host: "127.0.0.1", Port: port, CertDir: filepath.Join(t.TempDir(), "certs"), SelfSigned: true,
		Certs: webhooks.CertOptions{URL: fmt.Sprintf("https://127.0.0.1:%d", port), Validity: time.Hour},
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhooks.NewServer(o),
	})
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := webhooks.Setup(mgr, *o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{mgr: mgr, hooks: hooks, port: port, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(s.stop)
	// Ready when the API server calls the mutating webhook: a dry-run instance comes back expanded.
	deadline := time.Now().Add(time.Minute)
	for {
		probe := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}}
		err := env.Client.Create(context.Background(), probe, client.DryRunAll)
		if err == nil && len(probe.Provenance) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not call the webhooks: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

func (s *server) stop() {
	s.cancel()
	<-s.done
}

// servedSerial is the serial number of the certificate the webhook server presents.
func (s *server) servedSerial() (string, error) {
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the certificate only
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// setupNamespace creates a namespace with the fixtures and waits until the webhooks' cache holds
// them.
func setupNamespace(t testing.TB, s *server, name string) *admissiontable.Base {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
	f := loadBase(t, name)
	for i := range f.Profiles {
		p := f.Profiles[i].DeepCopy()
		p.ResourceVersion, p.Generation = "", 0
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		f.Profiles[i] = *p
	}
	c := f.Cluster.DeepCopy()
	g.Expect(env.Client.Create(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var ps v1alpha1.TiledProfileList
		g.Expect(s.mgr.GetClient().List(ctx, &ps, client.InNamespace(name))).To(Succeed())
		g.Expect(ps.Items).To(HaveLen(len(f.Profiles)))
		var cs v1alpha1.TiledClusterList
		g.Expect(s.mgr.GetClient().List(ctx, &cs, client.InNamespace(name))).To(Succeed())
		g.Expect(cs.Items).To(HaveLen(1))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return f
}

// loadBase reads the objects of webhooks/testdata into namespace.
func loadBase(t testing.TB, namespace string) *admissiontable.Base {
	t.Helper()
	f, err := admissiontable.LoadBase(namespace)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
