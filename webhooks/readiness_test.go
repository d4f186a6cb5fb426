package webhooks

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// The "webhooks" readiness check with the manager's own CA: until the server has a certificate to
// present it does not dial (each handshake would be refused, and logged by the server: a dozen
// "http: TLS handshake error ... no serving certificate" lines while `make run` waited); once it
// has one, it checks that the server answers TLS.
func TestReadinessDialsOnlyWithACertificate(t *testing.T) {
	g := NewWithT(t)
	var logged syncBuffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&logged)

	var serving atomic.Pointer[tls.Certificate]
	certificate := func(*http.Request) error {
		if serving.Load() == nil {
			return errors.New("no serving certificate yet")
		}
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	g.Expect(l.Close()).To(Succeed())
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, TLSOpts: []func(*tls.Config){func(c *tls.Config) {
		c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := serving.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("no serving certificate the API server trusts yet")
		}
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Start(ctx) }()
	ready := startedWith(certificate, srv.StartedChecker())
	req, _ := http.NewRequest(http.MethodGet, "/readyz", nil)
	// The server listens once a bare TCP connection is accepted. That connection, closed at once,
	// ends the server's handshake with EOF, which it logs: wait for that line, and judge only what
	// is logged after it (left open, the connection was closed whenever the collector got to it,
	// and its line came at any time, failing the test under load).
	g.Eventually(func() error {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			_ = c.Close()
		}
		return err
	}).Should(Succeed())
	g.Eventually(logged.String).Should(ContainSubstring("TLS handshake error"))
	probed := len(logged.String())

	for range 12 {
		g.Expect(ready(req)).To(MatchError(ContainSubstring("no serving certificate yet")))
	}
	serving.Store(selfSigned(t))
	g.Expect(ready(req)).To(Succeed())
	g.Expect(logged.String()[probed:]).NotTo(ContainSubstring("TLS handshake error"))
}

// syncBuffer is a buffer the server's logger writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// selfSigned is a serving certificate for 127.0.0.1.
func selfSigned(t *testing.T) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
