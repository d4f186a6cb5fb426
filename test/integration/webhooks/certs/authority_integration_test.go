package certs_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks/certs"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{SkipCRDs: true}, &env))
}

// install creates a namespace and two webhook configurations calling a Service in it, which the API
// server never calls (their rules match a resource that does not exist), and returns the options
// of an certs.Authority for them.
func install(t *testing.T, name string) certs.Options {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	_, err := env.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: name, Name: "webhook-service", Path: ptr.To("/x")}}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.org"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}}
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	_, err = env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-mutating"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "m.example.org", ClientConfig: cc, Rules: rules, SideEffects: &none,
			FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-validating"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "v1.example.org", ClientConfig: cc, Rules: rules, SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}},
			{Name: "v2.example.org", ClientConfig: cc, Rules: rules, SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return certs.Options{Namespace: name, MutatingName: name + "-mutating", ValidatingName: name + "-validating", TrustDelay: 500 * time.Millisecond}
}

// run starts an certs.Authority until the test ends.
func run(t *testing.T, o certs.Options) *certs.Authority {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	a := certs.New(cs, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// bundles returns the caBundle of every webhook of both configurations.
func bundles(g Gomega, o certs.Options) [][]byte {
	ctx := context.Background()
	m, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, o.MutatingName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	v, err := env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, o.ValidatingName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	out := [][]byte{m.Webhooks[0].ClientConfig.CABundle}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

func secretCA(g Gomega, o certs.Options) *x509.Certificate {
	sec, err := env.Clientset.CoreV1().Secrets(o.Namespace).Get(context.Background(), certs.DefaultSecretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cas := certsIn(g, sec.Data[certs.KeyCACert])
	g.Expect(cas).To(HaveLen(1))
	return cas[0]
}

// certsIn parses every PEM block of bundle as a certificate: none may be anything else.
func certsIn(g Gomega, bundle []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		g.Expect(block.Type).To(Equal("CERTIFICATE"))
		c, err := x509.ParseCertificate(block.Bytes)
		g.Expect(err).NotTo(HaveOccurred())
		out = append(out, c)
	}
}

// verifies checks that a's serving certificate verifies against every bundle for the Service's name.
func verifies(g Gomega, a *certs.Authority, o certs.Options) {
	g.Expect(verifyErr(a, o)).To(Succeed())
}

func verifyErr(a *certs.Authority, o certs.Options) error {
	leaf := a.ServingCertificate()
	if leaf == nil {
		return fmt.Errorf("no serving certificate")
	}
	ctx := context.Background()
	m, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, o.MutatingName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	v, err := env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, o.ValidatingName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	all := [][]byte{m.Webhooks[0].ClientConfig.CABundle}
	for _, w := range v.Webhooks {
		all = append(all, w.ClientConfig.CABundle)
	}
	for _, b := range all {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(b)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "webhook-service." + o.Namespace + ".svc"}); err != nil {
			return fmt.Errorf("serial %s: %w", leaf.SerialNumber, err)
		}
	}
	return nil
}

// Five replicas starting at once race to create the Secret: one wins, and all of them sign with
// its CA, which every caBundle holds.
func TestReplicasStartingTogetherAgreeOnOneCA(t *testing.T) {
	g := NewWithT(t)
	o := install(t, "together")
	var as []*certs.Authority
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := run(t, o)
			mu.Lock()
			as = append(as, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i, a := range as {
		g.Eventually(func() error { return a.Ready(nil) }).WithTimeout(time.Minute).Should(Succeed(), "replica %d", i)
	}
	ca := secretCA(g, o)
	for i, a := range as {
		g.Expect(a.CA().Equal(ca)).To(BeTrue(), "replica %d signs with the Secret's CA", i)
		g.Expect(a.ServingCertificate().CheckSignatureFrom(ca)).To(Succeed())
		verifies(g, a, o)
	}
	for _, b := range bundles(g, o) {
		g.Expect(certsIn(g, b)).To(HaveLen(1))
		g.Expect(certsIn(g, b)[0].Equal(ca)).To(BeTrue())
	}
}

// A deleted Secret is created again with a new CA; the CA the replicas were using stays trusted as
// the previous one, and at no moment does a replica serve a certificate the bundles do not trust.
func TestDeletedSecretKeepsTheOldCATrusted(t *testing.T) {
	g := NewWithT(t)
	o := install(t, "deleted")
	a, b := run(t, o), run(t, o)
	for _, r := range []*certs.Authority{a, b} {
		g.Eventually(func() error { return r.Ready(nil) }).WithTimeout(time.Minute).Should(Succeed())
	}
	old := secretCA(g, o)
	stop := make(chan struct{})
	failures := make(chan string, 100)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, r := range []*certs.Authority{a, b} {
				if r.Ready(nil) != nil {
					continue // not serving: no certificate to check
				}
				if err := verifyErr(r, o); err != nil {
					select {
					case failures <- err.Error():
					default:
					}
				}
			}
		}
	}()
	g.Expect(env.Clientset.CoreV1().Secrets(o.Namespace).Delete(context.Background(), certs.DefaultSecretName, metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func(g Gomega) {
		ca := secretCA(g, o)
		g.Expect(ca.Equal(old)).To(BeFalse())
		for _, r := range []*certs.Authority{a, b} {
			g.Expect(r.ServingCertificate().CheckSignatureFrom(ca)).To(Succeed())
		}
		for _, bundle := range bundles(g, o) {
			g.Expect(certsIn(g, bundle)).To(HaveLen(2), "the new CA and the one used until now")
		}
	}).WithTimeout(time.Minute).Should(Succeed())
	close(stop)
	wg.Wait()
	close(failures)
	var all []string
	for f := range failures {
		all = append(all, f)
	}
	g.Expect(all).To(BeEmpty())
}

// A Secret whose CA cannot be read (edited by hand) is replaced, and the replicas recover.
func TestBrokenSecretIsReplaced(t *testing.T) {
	g := NewWithT(t)
	o := install(t, "broken")
	a := run(t, o)
	g.Eventually(func() error { return a.Ready(nil) }).WithTimeout(time.Minute).Should(Succeed())
	old := secretCA(g, o)
	ctx := context.Background()
	sec, err := env.Clientset.CoreV1().Secrets(o.Namespace).Get(ctx, certs.DefaultSecretName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	sec.Data[certs.KeyCAKey] = []byte("not a key")
	_, err = env.Clientset.CoreV1().Secrets(o.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		ca := secretCA(g, o)
		g.Expect(ca.Equal(old)).To(BeFalse())
		g.Expect(a.ServingCertificate().CheckSignatureFrom(ca)).To(Succeed())
		g.Expect(a.Ready(nil)).To(Succeed())
		verifies(g, a, o)
	}).WithTimeout(time.Minute).Should(Succeed())
}

// Rotate goes through both steps with two replicas: the next CA is published and trusted before
// anyone signs with it, then promoted; the other replica follows; the bundle ends with the new and
// the previous CA; each step is a write conditioned on what was read.
func TestRotateWithTwoReplicas(t *testing.T) {
	g := NewWithT(t)
	o := install(t, "rotate")
	a, b := run(t, o), run(t, o)
	for _, r := range []*certs.Authority{a, b} {
		g.Eventually(func() error { return r.Ready(nil) }).WithTimeout(time.Minute).Should(Succeed())
	}
	old := secretCA(g, o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g.Expect(a.Rotate(ctx)).To(Succeed())
	ca := secretCA(g, o)
	g.Expect(ca.Equal(old)).To(BeFalse())
	g.Eventually(func(g Gomega) {
		g.Expect(b.ServingCertificate().CheckSignatureFrom(ca)).To(Succeed())
		verifies(g, b, o)
	}).WithTimeout(time.Minute).Should(Succeed())
	for _, bundle := range bundles(g, o) {
		got := certsIn(g, bundle)
		g.Expect(got).To(HaveLen(2))
		g.Expect(got[0].Equal(ca) && got[1].Equal(old)).To(BeTrue(), "active, then previous")
	}
	g.Expect(string(a.CABundle())).To(Equal(string(bundles(g, o)[0])))
}
