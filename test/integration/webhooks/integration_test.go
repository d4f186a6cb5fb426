package webhooks_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
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

func TestDryRunPrintsExpandedInstance(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	f := setupNamespace(t, s, "dry-run")
	ctx := context.Background()

	out, stderr, err := env.Kubectl(ctx, "apply", "--dry-run=server", "-o", "yaml", "-n", "dry-run",
		"-f", admissiontable.Testdata("terse-instance.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	got := &v1alpha1.TiledInstance{}
	g.Expect(yaml.Unmarshal([]byte(out), got)).To(Succeed())
	want, err := expansion.ExpandInstance(f.Terse, f.Profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Spec).To(Equal(want.Spec))
	g.Expect(got.Provenance).To(Equal(want.Provenance))
	g.Expect(out).To(ContainSubstring("spec.tiled.env[name=BEAMLINE].value: instance (expression)"))
	g.Expect(out).To(ContainSubstring("host: demo.tiled.nsls2.bnl.gov"))

	// Nothing stored.
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: "dry-run", Name: "demo"}, &v1alpha1.TiledInstance{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)

	// Stored for real, then updated unchanged: the webhook's patch is empty, so the API server sees
	// no change and keeps the resourceVersion.
	_, stderr, err = env.Kubectl(ctx, "apply", "--server-side", "-n", "dry-run", "-f", admissiontable.Testdata("terse-instance.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	stored := &v1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "dry-run", Name: "demo"}, stored)).To(Succeed())
	g.Expect(stored.Spec).To(Equal(want.Spec))
	rv := stored.ResourceVersion
	g.Expect(env.Client.Update(ctx, stored)).To(Succeed())
	g.Expect(stored.ResourceVersion).To(Equal(rv))
	_, stderr, err = env.Kubectl(ctx, "apply", "--server-side", "-n", "dry-run", "-f", admissiontable.Testdata("terse-instance.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "dry-run", Name: "demo"}, stored)).To(Succeed())
	g.Expect(stored.ResourceVersion).To(Equal(rv))
}

func TestBadObjectsRefusedByTheAPIServer(t *testing.T) {
	s := startWebhooks(t)
	setupNamespace(t, s, admissiontable.Namespace)
	for _, tc := range admissiontable.HandlerCases() {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			u := &unstructured.Unstructured{}
			g.Expect(yaml.Unmarshal([]byte(tc.Object), &u.Object)).To(Succeed())
			u.SetNamespace(admissiontable.Namespace)
			err := env.Client.Create(context.Background(), u, client.DryRunAll, client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred())
			want := tc.Want
			if tc.APIWant != nil {
				want = tc.APIWant
			}
			for _, w := range want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
	t.Run("valid objects pass", func(t *testing.T) {
		g := NewWithT(t)
		f := loadBase(t, admissiontable.Namespace)
		for _, obj := range []client.Object{f.Terse, f.Cluster, &f.Profiles[0]} {
			obj.SetName("valid")
			g.Expect(env.Client.Create(context.Background(), obj, client.DryRunAll)).To(Succeed())
		}
	})
}

func TestRotationKeepsTheAPIServerCalling(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	setupNamespace(t, s, "rotation")
	ctx := context.Background()
	f := loadBase(t, "rotation")
	expandedDryRun := func(g Gomega) {
		in := f.Terse.DeepCopy()
		g.Expect(env.Client.Create(ctx, in, client.DryRunAll)).To(Succeed())
		g.Expect(in.Provenance).NotTo(BeEmpty())
	}
	first := s.hooks.Certs.ServingCertificate().SerialNumber.String()
	g.Expect(s.servedSerial()).To(Equal(first))
	seen := map[string]bool{first: true}
	for i := 0; i < 3; i++ {
		g.Expect(s.hooks.Certs.Rotate(ctx)).To(Succeed())
		// Whichever certificate is served during the switch, the API server trusts it.
		expandedDryRun(g)
		next := s.hooks.Certs.ServingCertificate().SerialNumber.String()
		g.Expect(seen).NotTo(HaveKey(next))
		seen[next] = true
		g.Eventually(s.servedSerial).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(next))
		expandedDryRun(g)
		profile := f.Profiles[1].DeepCopy()
		profile.Name = fmt.Sprintf("after-rotation-%d", i)
		g.Expect(env.Client.Create(ctx, profile, client.DryRunAll)).To(Succeed())
	}
	m, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhooks.MutatingConfigurationName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Webhooks[0].ClientConfig.CABundle).To(Equal(s.hooks.Certs.CABundle()))
	g.Expect(bytes.Count(m.Webhooks[0].ClientConfig.CABundle, []byte("BEGIN CERTIFICATE"))).To(Equal(2), "the current and the previous CA")
	// The CA bundle is the operator's, applied server-side.
	owners := []string{}
	for _, mf := range m.ManagedFields {
		owners = append(owners, mf.Manager)
	}
	g.Expect(owners).To(ContainElement(v1alpha1.FieldOwner))
}

func TestFailurePolicyWithTheServerStopped(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	f := setupNamespace(t, s, "down")
	ctx := context.Background()
	s.stop()
	g.Eventually(func() error { _, err := s.servedSerial(); return err }).WithTimeout(time.Minute).Should(HaveOccurred())

	// TiledInstance webhooks fail open: the terse instance is stored as written (the instance
	// controller expands it when it reconciles).
	in := f.Terse.DeepCopy()
	g.Expect(env.Client.Create(ctx, in)).To(Succeed())
	g.Expect(in.Provenance).To(BeEmpty())
	g.Expect(in.Spec.Database).To(BeNil())

	// TiledProfile and TiledCluster create and update fail closed.
	p := f.Profiles[1].DeepCopy()
	p.Name, p.ResourceVersion = "while-down", ""
	err := env.Client.Create(ctx, p)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledprofile.tiled.blueskyproject.io"`))
	c := &v1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "down", Name: "nsls2"}, c)).To(Succeed())
	c.Spec.Paused = true
	err = env.Client.Update(ctx, c)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledcluster.tiled.blueskyproject.io"`))

	// Deleting a profile (the delete webhook only warns) and a cluster is never blocked.
	g.Expect(env.Client.Delete(ctx, &f.Profiles[4])).To(Succeed())
	g.Expect(env.Client.Delete(ctx, c)).To(Succeed())
	var status *apierrors.StatusError
	g.Expect(errors.As(err, &status)).To(BeTrue())
	g.Expect(strings.ToLower(status.ErrStatus.Message)).To(ContainSubstring("connect"))
}
