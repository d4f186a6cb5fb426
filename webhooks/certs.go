package webhooks

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	arv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/log"

	webhookconfig "github.com/bluesky/tiled-operator/config/webhook"
)

// Certs is the self-signed certificate authority and serving certificate of the webhook server,
// for local runs and tests (real clusters use cert-manager, config/certmanager). It writes the
// serving certificate and key where controller-runtime's webhook server reads them (its
// certwatcher reloads them when they change), and applies the CA bundle to the webhook
// configurations with server-side apply under the operator's field manager.
//
// Rotation creates a new CA and a new serving certificate before the current one expires (or when
// Rotate is called). The CA bundle first gains the new CA, keeping the previous one, and only then
// are the new files written: whichever certificate the server presents during the switch, the API
// server trusts it. The previous CA leaves the bundle at the next rotation.
type Certs struct {
	o         CertOptions
	clientset kubernetes.Interface

	mu      sync.Mutex
	ca      *keyPair
	prevCA  *keyPair
	serving *x509.Certificate
	force   chan struct{}
}

// CertOptions configure the self-signed certificates.
type CertOptions struct {
	// Dir is where tls.crt and tls.key are written: the webhook server's CertDir.
	Dir string
	// Validity of the CA and of the serving certificate; default 90 days.
	Validity time.Duration
	// RotateBefore is how long before expiry they are replaced; default a third of Validity.
	RotateBefore time.Duration
	// DNSNames and IPs are the serving certificate's subject alternative names; default the
	// webhook Service's names (when ServiceName is set), localhost, 127.0.0.1 and ::1.
	DNSNames []string
	IPs      []net.IP
	// FieldManager applies the CA bundle.
	FieldManager string
	// MutatingName and ValidatingName are the webhook configurations to keep up to date.
	MutatingName, ValidatingName string
	// URL, when set (e.g. https://127.0.0.1:9443), makes the manager install the whole webhook
	// configurations itself from config/webhook, calling URL+path instead of the Service: for
	// `make run` and tests. Otherwise only the CA bundle of the configurations installed by the
	// manifests is applied.
	URL string
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func (o *CertOptions) setDefaults() {
	if o.Validity <= 0 {
		o.Validity = 90 * 24 * time.Hour
	}
	if o.RotateBefore <= 0 || o.RotateBefore >= o.Validity {
		o.RotateBefore = o.Validity / 3
	}
	if len(o.DNSNames) == 0 {
		o.DNSNames = []string{"localhost"}
	}
	if len(o.IPs) == 0 {
		o.IPs = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	}
	if o.MutatingName == "" {
		o.MutatingName = MutatingConfigurationName
	}
	if o.ValidatingName == "" {
		o.ValidatingName = ValidatingConfigurationName
	}
}

// NewCerts creates the first CA and serving certificate and writes them into o.Dir, so that the
// webhook server finds them when it starts. clientset applies the CA bundle when Start runs.
func NewCerts(clientset kubernetes.Interface, o CertOptions) (*Certs, error) {
	o.setDefaults()
	if o.Dir == "" {
		return nil, errors.New("webhook certificates: no directory")
	}
	c := &Certs{o: o, clientset: clientset, force: make(chan struct{}, 1)}
	if err := c.renew(); err != nil {
		return nil, err
	}
	return c, nil
}

// renew makes a new CA and serving certificate and writes the serving pair. The caller applies the
// bundle (when running) before calling it, or holds the lock.
func (c *Certs) renew() error {
	now := time.Now()
	ca, err := newCA(now, c.o.Validity)
	if err != nil {
		return err
	}
	serving, key, err := ca.issue(now, c.o.Validity, c.o.DNSNames, c.o.IPs)
	if err != nil {
		return err
	}
	c.prevCA, c.ca = c.ca, ca
	return c.write(serving, key)
}

func (c *Certs) write(cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	if err := os.MkdirAll(c.o.Dir, 0o700); err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	// Written in place (the certwatcher watches these paths); the key first. A reload that meets a
	// key and certificate that do not match keeps the old pair, and the next event loads the new.
	if err := os.WriteFile(filepath.Join(c.o.Dir, "tls.key"), keyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.o.Dir, "tls.crt"), certPEM, 0o600); err != nil {
		return err
	}
	c.serving = cert
	return nil
}

// CABundle returns the PEM CA bundle the API server must trust: the current CA and, after a
// rotation, the previous one.
func (c *Certs) CABundle() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bundle()
}

func (c *Certs) bundle() []byte {
	var b bytes.Buffer
	b.Write(c.ca.pem)
	if c.prevCA != nil && time.Now().Before(c.prevCA.cert.NotAfter) {
		b.Write(c.prevCA.pem)
	}
	return b.Bytes()
}

// ServingCertificate returns the serving certificate last written.
func (c *Certs) ServingCertificate() *x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.serving
}

// Rotate replaces the CA and the serving certificate now: the new CA is added to the webhook
// configurations' bundle before the new certificate is written.
func (c *Certs) Rotate(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rotate(ctx)
}

func (c *Certs) rotate(ctx context.Context) error {
	now := time.Now()
	ca, err := newCA(now, c.o.Validity)
	if err != nil {
		return err
	}
	serving, key, err := ca.issue(now, c.o.Validity, c.o.DNSNames, c.o.IPs)
	if err != nil {
		return err
	}
	prev := c.ca
	c.prevCA, c.ca = prev, ca
	if err := c.apply(ctx); err != nil {
		return fmt.Errorf("applying the new CA bundle: %w", err)
	}
	return c.write(serving, key)
}

// Start applies the CA bundle (retrying until it succeeds) and rotates the certificates before they
// expire, until ctx ends. It implements manager.Runnable; every replica runs it.
func (c *Certs) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-certs")
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
		c.mu.Lock()
		err := c.apply(ctx)
		c.mu.Unlock()
		if err == nil {
			break
		}
		logger.Error(err, "applying the webhook configurations' CA bundle; retrying", "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	for {
		c.mu.Lock()
		next := time.Until(c.serving.NotAfter.Add(-c.o.RotateBefore))
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(next, time.Second)):
		}
		if err := c.Rotate(ctx); err != nil {
			logger.Error(err, "rotating the webhook certificates")
		} else {
			logger.Info("rotated the webhook certificates")
		}
	}
}

// NeedLeaderElection is false: every replica serves webhooks with its own certificate.
func (c *Certs) NeedLeaderElection() bool { return false }

// apply applies the CA bundle, or the whole configurations when o.URL is set, with server-side
// apply. The caller holds the lock.
func (c *Certs) apply(ctx context.Context) error {
	bundle := c.bundle()
	opts := metav1.ApplyOptions{FieldManager: c.o.FieldManager, Force: true}
	mutating, validating, err := webhookconfig.Configurations()
	if err != nil {
		return err
	}
	mac := arv1ac.MutatingWebhookConfiguration(c.o.MutatingName)
	vac := arv1ac.ValidatingWebhookConfiguration(c.o.ValidatingName)
	if c.o.URL != "" {
		for _, w := range mutating.Webhooks {
			w.ClientConfig = c.urlConfig(w.ClientConfig, bundle)
			var ac arv1ac.MutatingWebhookApplyConfiguration
			if err := convert(&w, &ac); err != nil {
				return err
			}
			mac.WithWebhooks(&ac)
		}
		for _, w := range validating.Webhooks {
			w.ClientConfig = c.urlConfig(w.ClientConfig, bundle)
			var ac arv1ac.ValidatingWebhookApplyConfiguration
			if err := convert(&w, &ac); err != nil {
				return err
			}
			vac.WithWebhooks(&ac)
		}
	} else {
		for _, w := range mutating.Webhooks {
			mac.WithWebhooks(arv1ac.MutatingWebhook().WithName(w.Name).
				WithClientConfig(arv1ac.WebhookClientConfig().WithCABundle(bundle...)))
		}
		for _, w := range validating.Webhooks {
			vac.WithWebhooks(arv1ac.ValidatingWebhook().WithName(w.Name).
				WithClientConfig(arv1ac.WebhookClientConfig().WithCABundle(bundle...)))
		}
	}
	ar := c.clientset.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Apply(ctx, mac, opts); err != nil {
		return fmt.Errorf("MutatingWebhookConfiguration %s: %w", c.o.MutatingName, err)
	}
	if _, err := ar.ValidatingWebhookConfigurations().Apply(ctx, vac, opts); err != nil {
		return fmt.Errorf("ValidatingWebhookConfiguration %s: %w", c.o.ValidatingName, err)
	}
	return nil
}

func (c *Certs) urlConfig(cc admissionregistrationv1.WebhookClientConfig, bundle []byte) admissionregistrationv1.WebhookClientConfig {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := c.o.URL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: bundle}
}

// convert turns a typed object into its apply configuration (they share the JSON form).
func convert(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time, validity time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("tiled-operator webhook CA %d", now.Unix())},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func (ca *keyPair) issue(now time.Time, validity time.Duration, dnsNames []string, ips []net.IP) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	cn := "tiled-operator-webhook"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}
