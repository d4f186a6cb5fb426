package packaging

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// A plain cluster (no cert-manager, no prometheus-operator): `kubectl apply --server-side -k
// config/default` installs everything, for real. The webhook configurations' caBundle stays empty
// until a manager runs. Two managers, running as the ServiceAccount with the RBAC config/default
// installed, share one CA through one Secret; each serves a certificate for the webhook Service's
// name, signed by that CA, which both configurations trust; the API server calls each of them (a
// bad TiledProfile is refused by the validating webhook). A restarted manager keeps the CA, a
// second apply keeps the caBundle, and a CA rotation with both managers running never leaves one
// serving a certificate the configurations do not trust.
func TestDefaultInstallServesWebhooks(t *testing.T) {
	g := NewWithT(t)
	e := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	out, stderr, err := e.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(HaveOccurred(), "kubectl apply --server-side -k config/default:\n%s%s", out, stderr)
	t.Logf("kubectl apply --server-side -k config/default:\n%s", out)
	g.Expect(stderr).NotTo(ContainSubstring("Warning"))
	t.Cleanup(func() {
		// Later tests of the package must not wait on webhooks nobody serves any more.
		_, _, _ = e.Kubectl(context.Background(), "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
			mutatingConfig, validatingConfig, "--ignore-not-found")
	})
	for _, kind := range []string{"deployment", "service", "poddisruptionbudget", "serviceaccount", "role", "rolebinding"} {
		out, _, err := e.Kubectl(ctx, "get", kind, "-n", namespace, "-o", "name")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).NotTo(BeEmpty(), "config/default installed no %s", kind)
	}
	g.Expect(e.WaitForResource(ctx, schema.GroupVersionResource{Group: "tiled.blueskyproject.io", Version: "v1alpha1", Resource: "tiledprofiles"})).To(Succeed())

	bundles := func(g Gomega) [][]byte {
		out, err := caBundles(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(HaveLen(6), "2 mutating (the instance defaulter, the approval stamper) and 4 validating webhooks")
		return out
	}
	for _, b := range bundles(g) {
		g.Expect(b).To(BeEmpty(), "caBundle before any manager runs")
	}
	_, err = e.Clientset.CoreV1().Secrets(namespace).Get(ctx, caSecret, metav1.GetOptions{})
	g.Expect(err).To(HaveOccurred(), "the CA Secret before any manager runs")

	// The API server calls the webhook Service at its ClusterIP; we listen there in place of
	// kube-proxy.
	svc, err := e.Clientset.CoreV1().Services(namespace).Get(ctx, webhookService, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	fwd := newForwarder(t, net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port)))
	serviceName := webhookService + "." + namespace + ".svc"

	cfg := serviceAccountConfig(ctx, t, e, namespace, managerSA)
	a := startManager(t, "a", cfg, namespace, 2*time.Second, false)
	b := startManager(t, "b", cfg, namespace, 2*time.Second, false)
	for _, m := range []*running{a, b} {
		g.Eventually(m.ready).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(Succeed(), "manager %s", m.name)
	}

	// One Secret, one CA, in every caBundle; both managers sign with it.
	ca := secretCA(ctx, g)
	for _, bundle := range bundles(g) {
		g.Expect(raw(certsOf(bundle))).To(ContainElement(ca.Raw), "the Secret's CA is in every caBundle")
	}
	for _, m := range []*running{a, b} {
		g.Expect(m.op.Webhooks.Certs.CA().Equal(ca)).To(BeTrue(), "manager %s signs with the Secret's CA", m.name)
		served := servedBy(g, m, bundles(g)[0], serviceName)
		g.Expect(served.CheckSignatureFrom(ca)).To(Succeed(), "manager %s's certificate is signed by the Secret's CA", m.name)
		g.Expect(served.DNSNames).To(ContainElement(serviceName))
	}
	g.Expect(a.op.Webhooks.Certs.ServingCertificate().SerialNumber).NotTo(Equal(b.op.Webhooks.Certs.ServingCertificate().SerialNumber),
		"each replica has its own serving certificate")

	// The API server calls each manager's webhooks through the Service.
	for _, m := range []*running{a, b} {
		apiServerCalls(ctx, t, g, fwd, m)
	}

	// The samples apply with kubectl apply -k, profiles first: the standalone instance comes back
	// expanded by the mutating webhook, with its provenance.
	_, stderr, err = e.Kubectl(ctx, "create", "namespace", "samples")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	out, stderr, err = e.Kubectl(ctx, "apply", "-n", "samples", "-k", filepath.Join(root, "config", "samples"))
	g.Expect(err).NotTo(HaveOccurred(), "kubectl apply -k config/samples:\n%s%s", out, stderr)
	out, stderr, err = e.Kubectl(ctx, "get", "tiledinstance", "tst-standalone", "-n", "samples", "-o", "jsonpath={.provenance}")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("spec.tiled.image"), "the standalone sample expanded at admission")

	// A restarted manager finds the CA in the Secret and keeps it.
	before, err := e.Clientset.CoreV1().Secrets(namespace).Get(ctx, caSecret, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	a.stop()
	g.Expect(a.err).NotTo(HaveOccurred(), "manager a stopped cleanly")
	a = startManager(t, "a (restarted)", cfg, namespace, 2*time.Second, false)
	g.Eventually(a.ready).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	after, err := e.Clientset.CoreV1().Secrets(namespace).Get(ctx, caSecret, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the Secret was not written again")
	g.Expect(after.Data).To(Equal(before.Data))
	g.Expect(a.op.Webhooks.Certs.CA().Equal(ca)).To(BeTrue())
	apiServerCalls(ctx, t, g, fwd, a)

	// Applying config/default again (an upgrade) keeps the caBundle the managers applied.
	kept := bundles(g)
	out, stderr, err = e.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(HaveOccurred(), "%s%s", out, stderr)
	g.Expect(bundles(g)).To(Equal(kept))

	// A CA rotation with both managers running: at every moment, each one serves a certificate
	// both configurations trust.
	var checks, violations atomic.Int64
	var firstViolation atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, m := range []*running{a, b} {
				leaf, err := servedCert(m)
				if err != nil {
					continue // between two certificates, or shutting down
				}
				// Read after the handshake: a CA leaves the bundle only when it expires.
				all, err := caBundles(ctx)
				if err != nil {
					continue
				}
				for _, bundle := range all {
					checks.Add(1)
					if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(bundle), DNSName: serviceName}); err != nil {
						violations.Add(1)
						firstViolation.CompareAndSwap(nil, fmt.Sprintf("manager %s: %v", m.name, err))
					}
				}
			}
		}
	}()
	g.Expect(a.op.Webhooks.Certs.Rotate(ctx)).To(Succeed())
	newCA := secretCA(ctx, g)
	g.Expect(newCA.Equal(ca)).To(BeFalse(), "the rotation made a new CA")
	for _, m := range []*running{a, b} {
		g.Eventually(func(g Gomega) {
			served := servedBy(g, m, bundles(g)[0], serviceName)
			g.Expect(served.CheckSignatureFrom(newCA)).To(Succeed())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "manager %s moves to the new CA", m.name)
	}
	close(stop)
	wg.Wait()
	t.Logf("rotation: %d checks of a served certificate against a caBundle, %d failed", checks.Load(), violations.Load())
	g.Expect(violations.Load()).To(BeZero(), "%v", firstViolation.Load())
	g.Expect(checks.Load()).To(BeNumerically(">", 10))
	for _, bundle := range bundles(g) {
		g.Expect(raw(certsOf(bundle))).To(Equal([][]byte{newCA.Raw, ca.Raw}), "the new CA, and the previous one until it expires")
	}
	for _, m := range []*running{a, b} {
		apiServerCalls(ctx, t, g, fwd, m)
	}
}

// apiServerCalls sends the API server's webhook calls to m only, and checks that the validating
// webhook refuses a bad TiledProfile (dry run) and admits a good one.
func apiServerCalls(ctx context.Context, t *testing.T, g Gomega, fwd *forwarder, m *running) {
	t.Helper()
	e := controlPlane(t)
	backend := fmt.Sprintf("127.0.0.1:%d", m.webhookPort)
	fwd.use(backend)
	calls := fwd.connections(backend)
	bad := profile("bad-expression", `expose: {ingress: {hostExpression: "1 + 2"}}`)
	g.Eventually(func(g Gomega) {
		err := e.Client.Create(ctx, bad.DeepCopy(), client.DryRunAll)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring(`admission webhook "vtiledprofile.tiled.blueskyproject.io" denied the request`))
		g.Expect(err.Error()).To(ContainSubstring("hostExpression"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "manager %s refuses a bad profile through the API server", m.name)
	good := profile("good", `expose: {ingress: {hostExpression: "instance.name + '.example.org'"}}`)
	g.Expect(e.Client.Create(ctx, good, client.DryRunAll)).To(Succeed())
	g.Expect(fwd.connections(backend)).To(BeNumerically(">", calls), "the API server called manager %s", m.name)
}

func profile(name, spec string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledProfile\nmetadata: {name: "+name+", namespace: default}\nspec: {"+spec+"}\n"), &u.Object); err != nil {
		panic(err)
	}
	return u
}

// secretCA is the active CA of the CA Secret.
func secretCA(ctx context.Context, g Gomega) *x509.Certificate {
	sec, err := env.Clientset.CoreV1().Secrets(namespace).Get(ctx, caSecret, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cas := certsOf(sec.Data["ca.crt"])
	g.Expect(cas).To(HaveLen(1))
	return cas[0]
}

// servedCert is the certificate m's webhook server presents.
func servedCert(m *running) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", m.webhookPort),
		&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the certificate is verified by the caller
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// servedBy connects to m as the API server does, verifying its certificate against bundle for the
// Service's name, and returns it.
func servedBy(g Gomega, m *running, bundle []byte, serverName string) *x509.Certificate {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", m.webhookPort),
		&tls.Config{RootCAs: pool(bundle), ServerName: serverName, MinVersion: tls.VersionTLS12})
	g.Expect(err).NotTo(HaveOccurred(), "manager %s's certificate, verified against the caBundle for %s", m.name, serverName)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func pool(bundle []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(bundle)
	return p
}

// certsOf parses the certificates of a PEM bundle.
func certsOf(bundle []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, bundle = pem.Decode(bundle); block == nil {
			return out
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, cert)
		}
	}
}

func raw(certs []*x509.Certificate) [][]byte {
	out := make([][]byte, len(certs))
	for i, c := range certs {
		out[i] = c.Raw
	}
	return out
}

// caBundles returns the caBundle of every webhook of both configurations.
func caBundles(ctx context.Context) ([][]byte, error) {
	var out [][]byte
	m, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutatingConfig, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	v, err := env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validatingConfig, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out, nil
}
