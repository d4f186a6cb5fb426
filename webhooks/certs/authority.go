package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	arv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	arinformers "k8s.io/client-go/informers/admissionregistration/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	webhookconfig "github.com/bluesky/tiled-operator/config/webhook"
)

// Defaults of Options.
const (
	DefaultSecretName      = "tiled-operator-webhook-ca"
	DefaultValidity        = 365 * 24 * time.Hour
	DefaultServingValidity = 30 * 24 * time.Hour
	DefaultTrustDelay      = time.Minute
	// DefaultLocalTrustDelay is the trust delay with Options.URL: one local API server, which loads
	// a changed webhook configuration within milliseconds.
	DefaultLocalTrustDelay = time.Second
	// DefaultFieldManager is the operator's field manager (v1alpha1.FieldOwner).
	DefaultFieldManager = v1alpha1.FieldOwner
	// DefaultMutatingName and DefaultValidatingName are the webhook configurations config/default
	// installs (config/webhook's names with the tiled-operator- prefix).
	DefaultMutatingName   = "tiled-operator-mutating-webhook-configuration"
	DefaultValidatingName = "tiled-operator-validating-webhook-configuration"
)

// Options configure the Authority. The zero value works in a cluster (with POD_NAMESPACE set).
type Options struct {
	// Namespace and SecretName locate the CA Secret. Namespace defaults to $POD_NAMESPACE (the
	// manager's own, through the downward API), or "default" outside a cluster.
	Namespace, SecretName string
	// Validity of a CA (default 365 days) and of a serving certificate (default 30 days, never
	// past its CA's expiry). Each is replaced when a third of it is left.
	Validity, ServingValidity time.Duration
	// TrustDelay is how long a new CA must have been in both webhook configurations before it signs
	// serving certificates: time for every API server to load them. Default one minute, or one
	// second with URL.
	TrustDelay time.Duration
	// DNSNames and IPs are added to the serving certificate's names, beside those of the Services
	// the webhook configurations call (or the host of URL).
	DNSNames []string
	IPs      []net.IP
	// FieldManager applies the caBundle (and, with URL, the configurations). Default tiled-operator.
	FieldManager string
	// MutatingName and ValidatingName are the webhook configurations to keep trusting the CA.
	MutatingName, ValidatingName string
	// URL, when set (e.g. https://127.0.0.1:9443), makes the Authority install the whole webhook
	// configurations itself from config/webhook, calling URL+path instead of the Service: for
	// `make run` and tests. Otherwise it patches only the caBundle of the configurations the
	// manifests installed, and waits for them when they are missing.
	URL string
}

func (o *Options) setDefaults() {
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.SecretName == "" {
		o.SecretName = DefaultSecretName
	}
	if o.Validity <= 0 {
		o.Validity = DefaultValidity
	}
	if o.ServingValidity <= 0 {
		o.ServingValidity = DefaultServingValidity
	}
	if o.TrustDelay <= 0 {
		o.TrustDelay = DefaultTrustDelay
		if o.URL != "" {
			o.TrustDelay = DefaultLocalTrustDelay
		}
	}
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.MutatingName == "" {
		o.MutatingName = DefaultMutatingName
	}
	if o.ValidatingName == "" {
		o.ValidatingName = DefaultValidatingName
	}
	o.URL = strings.TrimSuffix(o.URL, "/")
}

// Authority keeps the CA Secret, the webhook configurations' caBundle and this replica's serving
// certificate (see the package comment). It is a controller-runtime Runnable that every replica
// runs (no leader election); GetCertificate goes into the webhook server's TLS configuration and
// Ready into the manager's readiness checks.
type Authority struct {
	o  Options
	cs kubernetes.Interface

	mu sync.Mutex
	// st is the Secret's state as last read.
	st *state
	// trusted are the CAs in the caBundle of every webhook of both configurations as last read,
	// with the time this replica first saw each there (by the certificate's SHA-256).
	trusted map[[32]byte]time.Time
	// serving is the certificate this replica serves, servingTrusted whether its CA is trusted.
	serving        *tls.Certificate
	servingTrusted bool
	// rotateFrom, set by Rotate, asks for a next CA as long as it is the active one.
	rotateFrom *x509.Certificate
	// changed is closed and replaced whenever st or serving change.
	changed chan struct{}
	poke    chan struct{}
}

// New returns an Authority for the API server cs reaches.
func New(cs kubernetes.Interface, o Options) *Authority {
	o.setDefaults()
	return &Authority{o: o, cs: cs, trusted: map[[32]byte]time.Time{}, changed: make(chan struct{}), poke: make(chan struct{}, 1)}
}

// Options returns the options in effect (defaults filled in).
func (a *Authority) Options() Options { return a.o }

// NeedLeaderElection is false: every replica serves the webhooks with its own certificate.
func (a *Authority) NeedLeaderElection() bool { return false }

// GetCertificate is the webhook server's tls.Config.GetCertificate: this replica's serving
// certificate once the API server trusts its CA, an error before.
func (a *Authority) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.serving == nil || !a.servingTrusted {
		return nil, errors.New("no serving certificate the API server trusts yet")
	}
	return a.serving, nil
}

// Ready is a healthz checker: it passes once this replica serves a certificate whose CA is in the
// caBundle of both webhook configurations.
func (a *Authority) Ready(*http.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.serving == nil:
		return errors.New("no serving certificate yet")
	case !a.servingTrusted:
		return fmt.Errorf("the CA of the serving certificate is not in the caBundle of %s and %s yet", a.o.MutatingName, a.o.ValidatingName)
	}
	return nil
}

// ServingCertificate returns the certificate this replica serves (nil before the first).
func (a *Authority) ServingCertificate() *x509.Certificate {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.serving == nil {
		return nil
	}
	return a.serving.Leaf
}

// CABundle returns the caBundle the Secret calls for, as last read: the active CA, the next one
// during a rotation, and the previous one until it expires.
func (a *Authority) CABundle() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st == nil {
		return nil
	}
	return a.st.bundle(time.Now())
}

// CA returns the active CA, as last read from the Secret.
func (a *Authority) CA() *x509.Certificate {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st == nil {
		return nil
	}
	return a.st.active.cert
}

// Rotate rotates the CA now, through the same two steps as a scheduled rotation (a next CA is
// published, trusted for TrustDelay, then promoted), and returns once this replica serves a
// certificate signed by a CA newer than the one active when it was called. The Authority must be
// running.
func (a *Authority) Rotate(ctx context.Context) error {
	a.mu.Lock()
	if a.st == nil {
		a.mu.Unlock()
		return errors.New("rotate: the CA has not been loaded yet")
	}
	old := a.st.active.cert
	a.rotateFrom = old
	a.mu.Unlock()
	a.trigger()
	for {
		a.mu.Lock()
		done := !a.st.active.cert.Equal(old) && a.serving != nil && a.servingTrusted && signedBy(a.serving.Leaf, a.st.active.cert)
		changed := a.changed
		a.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rotate: %w", ctx.Err())
		case <-changed:
		}
	}
}

func (a *Authority) trigger() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// notify wakes Rotate's waiters; the caller holds the lock.
func (a *Authority) notify() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// Start watches the Secret and both webhook configurations (by name: a WATCH each, no request
// while nothing changes) and syncs on every change and deadline, until ctx ends.
func (a *Authority) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-certs").WithValues("secret", a.o.Namespace+"/"+a.o.SecretName)
	ctx = log.IntoContext(ctx, logger)
	if err := a.watch(ctx); err != nil {
		return err
	}
	backoff := 200 * time.Millisecond
	for {
		wait, err := a.sync(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(err, "webhook certificates; retrying", "in", backoff)
			wait = backoff
			backoff = min(2*backoff, 30*time.Second)
		} else {
			backoff = 200 * time.Millisecond
		}
		timer := time.NewTimer(max(wait, 100*time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-a.poke:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (a *Authority) watch(ctx context.Context) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.trigger() },
		UpdateFunc: func(any, any) { a.trigger() },
		DeleteFunc: func(any) { a.trigger() },
	}
	byName := func(name string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	informers := []cache.SharedIndexInformer{
		coreinformers.NewFilteredSecretInformer(a.cs, a.o.Namespace, 0, cache.Indexers{}, byName(a.o.SecretName)),
		arinformers.NewFilteredMutatingWebhookConfigurationInformer(a.cs, 0, cache.Indexers{}, byName(a.o.MutatingName)),
		arinformers.NewFilteredValidatingWebhookConfigurationInformer(a.cs, 0, cache.Indexers{}, byName(a.o.ValidatingName)),
	}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
	}
	return nil
}

// sync does one round: the Secret (created if absent, rotated when due), the caBundle of both
// configurations, and this replica's serving certificate. It returns how long to wait before the
// next round when nothing happens meanwhile.
func (a *Authority) sync(ctx context.Context) (time.Duration, error) {
	logger := log.FromContext(ctx)
	st, rv, err := a.load(ctx)
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		// Only this goroutine writes a.trusted, which plan reads through trustedSince.
		a.mu.Lock()
		force := a.rotateFrom != nil && a.rotateFrom.Equal(st.active.cert)
		a.mu.Unlock()
		next, what, err := plan(st, planInput{
			now: time.Now(), validity: a.o.Validity, trustDelay: a.o.TrustDelay,
			trustedSince: a.trustedSince, force: force,
		}, newCA)
		if err != nil {
			return 0, err
		}
		if what == "" {
			break
		}
		newRV, err := a.update(ctx, next, rv)
		if apierrors.IsConflict(err) && attempt < 5 {
			// Another replica wrote first: decide again from what it wrote.
			if st, rv, err = a.load(ctx); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("updating Secret %s/%s: %w", a.o.Namespace, a.o.SecretName, err)
		}
		logger.Info(what, "activeCA", fingerprint(next.active.cert))
		st, rv = next, newRV
	}

	st, names, err := a.applyBundle(ctx)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if a.st == nil || !bytes.Equal(a.st.bundle(now), st.bundle(now)) || !a.st.active.cert.Equal(st.active.cert) {
		a.notify()
	}
	a.st = st
	if err := a.ensureServing(ctx, now, names); err != nil {
		return 0, err
	}
	wait := time.Until(st.deadline(a.trustedSince, a.o.TrustDelay))
	if a.serving != nil {
		wait = min(wait, time.Until(renewAt(a.serving.Leaf)))
	}
	return wait, nil
}

// trustedSince says since when this replica has seen c in both configurations.
func (a *Authority) trustedSince(c *x509.Certificate) (time.Time, bool) {
	t, ok := a.trusted[sha256.Sum256(c.Raw)]
	return t, ok
}

// load reads the Secret, creating it with a new CA when it is absent (and replacing it when its
// active CA cannot be read). It returns the state and the Secret's resourceVersion.
func (a *Authority) load(ctx context.Context) (*state, string, error) {
	secrets := a.cs.CoreV1().Secrets(a.o.Namespace)
	for attempt := 0; ; attempt++ {
		sec, err := secrets.Get(ctx, a.o.SecretName, metav1.GetOptions{})
		if err == nil {
			st, problems := parseState(sec.Data)
			for _, p := range problems {
				log.FromContext(ctx).Error(p, "ignoring a broken entry of the CA Secret")
			}
			if st != nil {
				return st, sec.ResourceVersion, nil
			}
			// The active CA is unreadable (edited by hand?): replace it, conditioned on what we read.
			log.FromContext(ctx).Error(problems[0], "the CA Secret's active CA cannot be read; replacing it")
			fresh, err := a.fresh()
			if err != nil {
				return nil, "", err
			}
			rv, err := a.update(ctx, fresh, sec.ResourceVersion)
			if apierrors.IsConflict(err) && attempt < 5 {
				continue
			}
			return fresh, rv, err
		}
		if !apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("reading Secret %s/%s: %w", a.o.Namespace, a.o.SecretName, err)
		}
		fresh, err := a.fresh()
		if err != nil {
			return nil, "", err
		}
		created, err := secrets.Create(ctx, a.secret(fresh, ""), metav1.CreateOptions{FieldManager: a.o.FieldManager})
		if apierrors.IsAlreadyExists(err) && attempt < 5 {
			continue // another replica created it first: use theirs
		}
		if err != nil {
			return nil, "", fmt.Errorf("creating Secret %s/%s: %w", a.o.Namespace, a.o.SecretName, err)
		}
		log.FromContext(ctx).Info("created the webhook CA", "activeCA", fingerprint(fresh.active.cert))
		return fresh, created.ResourceVersion, nil
	}
}

// fresh is the state of a new Secret: a new CA, and the CA this replica used until now (if any) as
// the previous one, so that its serving certificate stays trusted while it moves to the new one.
func (a *Authority) fresh() (*state, error) {
	ca, err := newCA(time.Now(), a.o.Validity)
	if err != nil {
		return nil, err
	}
	st := &state{active: ca}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st != nil && time.Now().Before(a.st.active.cert.NotAfter) {
		st.previous, st.previousPEM = a.st.active.cert, a.st.active.certPEM
	}
	return st, nil
}

func (a *Authority) secret(st *state, rv string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.o.SecretName, Namespace: a.o.Namespace, ResourceVersion: rv,
			Labels: map[string]string{
				"app.kubernetes.io/name":      "tiled-operator",
				"app.kubernetes.io/component": "webhook-ca",
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: st.data(),
	}
}

// update writes st, conditioned on the resourceVersion rv, and returns the new resourceVersion.
func (a *Authority) update(ctx context.Context, st *state, rv string) (string, error) {
	sec, err := a.cs.CoreV1().Secrets(a.o.Namespace).Update(ctx, a.secret(st, rv), metav1.UpdateOptions{FieldManager: a.o.FieldManager})
	if err != nil {
		return "", err
	}
	return sec.ResourceVersion, nil
}

// applyBundle makes the caBundle of every webhook of both configurations what the Secret calls
// for. It reads both configurations, then the Secret, fresh from the API server, and writes a
// configuration only conditioned on the resourceVersion it read (see the package comment for why
// this order). It records which CAs both configurations now trust, and returns the Secret's state
// and the serving certificate's names.
func (a *Authority) applyBundle(ctx context.Context) (*state, sans, error) {
	ar := a.cs.AdmissionregistrationV1()
	m, err := ar.MutatingWebhookConfigurations().Get(ctx, a.o.MutatingName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && a.o.URL != "" {
		m, err = nil, nil
	}
	if err != nil {
		return nil, sans{}, fmt.Errorf("reading MutatingWebhookConfiguration %s (installed by config/default): %w", a.o.MutatingName, err)
	}
	v, err := ar.ValidatingWebhookConfigurations().Get(ctx, a.o.ValidatingName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && a.o.URL != "" {
		v, err = nil, nil
	}
	if err != nil {
		return nil, sans{}, fmt.Errorf("reading ValidatingWebhookConfiguration %s (installed by config/default): %w", a.o.ValidatingName, err)
	}
	sec, err := a.cs.CoreV1().Secrets(a.o.Namespace).Get(ctx, a.o.SecretName, metav1.GetOptions{})
	if err != nil {
		return nil, sans{}, fmt.Errorf("reading Secret %s/%s: %w", a.o.Namespace, a.o.SecretName, err)
	}
	st, _ := parseState(sec.Data)
	if st == nil {
		return nil, sans{}, fmt.Errorf("the Secret %s/%s has no readable CA", a.o.Namespace, a.o.SecretName)
	}
	bundle := st.bundle(time.Now())
	opts := metav1.ApplyOptions{FieldManager: a.o.FieldManager, Force: true}
	if mac, err := a.mutatingApply(m, bundle); err != nil {
		return nil, sans{}, err
	} else if mac != nil {
		if m, err = ar.MutatingWebhookConfigurations().Apply(ctx, mac, opts); err != nil {
			return nil, sans{}, fmt.Errorf("applying the caBundle of MutatingWebhookConfiguration %s: %w", a.o.MutatingName, err)
		}
		log.FromContext(ctx).Info("applied the caBundle", "configuration", a.o.MutatingName, "cas", bytes.Count(bundle, []byte("BEGIN CERTIFICATE")))
	}
	if vac, err := a.validatingApply(v, bundle); err != nil {
		return nil, sans{}, err
	} else if vac != nil {
		if v, err = ar.ValidatingWebhookConfigurations().Apply(ctx, vac, opts); err != nil {
			return nil, sans{}, fmt.Errorf("applying the caBundle of ValidatingWebhookConfiguration %s: %w", a.o.ValidatingName, err)
		}
		log.FromContext(ctx).Info("applied the caBundle", "configuration", a.o.ValidatingName, "cas", bytes.Count(bundle, []byte("BEGIN CERTIFICATE")))
	}

	var clientConfigs []admissionregistrationv1.WebhookClientConfig
	for _, w := range m.Webhooks {
		clientConfigs = append(clientConfigs, w.ClientConfig)
	}
	for _, w := range v.Webhooks {
		clientConfigs = append(clientConfigs, w.ClientConfig)
	}
	a.mu.Lock()
	a.observeTrust(clientConfigs, time.Now())
	a.mu.Unlock()
	return st, a.names(clientConfigs), nil
}

// observeTrust records the CAs every webhook trusts; the caller holds the lock.
func (a *Authority) observeTrust(configs []admissionregistrationv1.WebhookClientConfig, now time.Time) {
	var common map[[32]byte]bool
	for _, cc := range configs {
		in := map[[32]byte]bool{}
		for _, c := range certsIn(cc.CABundle) {
			in[sha256.Sum256(c.Raw)] = common == nil || common[sha256.Sum256(c.Raw)]
		}
		common = map[[32]byte]bool{}
		for k, ok := range in {
			if ok {
				common[k] = true
			}
		}
	}
	next := map[[32]byte]time.Time{}
	for k := range common {
		if since, ok := a.trusted[k]; ok {
			next[k] = since
		} else {
			next[k] = now
		}
	}
	a.trusted = next
}

// certsIn parses the certificates of a PEM bundle, skipping what is not one.
func certsIn(bundle []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && block.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

// names are the serving certificate's: those the API server checks when it calls the webhooks
// (each Service's <name>.<namespace>.svc, or the URL's host), and the configured ones.
func (a *Authority) names(configs []admissionregistrationv1.WebhookClientConfig) sans {
	dns, ips := append([]string(nil), a.o.DNSNames...), append([]net.IP(nil), a.o.IPs...)
	for _, cc := range configs {
		if s := cc.Service; s != nil {
			dns = append(dns, s.Name+"."+s.Namespace+".svc", s.Name+"."+s.Namespace+".svc.cluster.local")
		}
		if cc.URL != nil {
			if u, err := url.Parse(*cc.URL); err == nil {
				if ip := net.ParseIP(u.Hostname()); ip != nil {
					ips = append(ips, ip)
				} else if u.Hostname() != "" {
					dns = append(dns, u.Hostname())
				}
			}
		}
	}
	if len(dns) == 0 && len(ips) == 0 {
		dns, ips = []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	}
	return newSANs(dns, ips)
}

// mutatingApply returns what to apply to the mutating configuration live (nil when it already has
// bundle everywhere): the caBundle of each of its webhooks, conditioned on its resourceVersion; with
// URL, the whole configuration generated from config/webhook.
func (a *Authority) mutatingApply(live *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte) (*arv1ac.MutatingWebhookConfigurationApplyConfiguration, error) {
	var hooks []admissionregistrationv1.MutatingWebhook
	var rv *string
	if live != nil {
		hooks, rv = live.Webhooks, &live.ResourceVersion
	}
	return configurationApply(a, mutatingKind, a.o.MutatingName, hooks, rv, bundle)
}

// validatingApply is mutatingApply for the validating configuration.
func (a *Authority) validatingApply(live *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte) (*arv1ac.ValidatingWebhookConfigurationApplyConfiguration, error) {
	var hooks []admissionregistrationv1.ValidatingWebhook
	var rv *string
	if live != nil {
		hooks, rv = live.Webhooks, &live.ResourceVersion
	}
	return configurationApply(a, validatingKind, a.o.ValidatingName, hooks, rv, bundle)
}

// configKind is what differs between the mutating and the validating configuration: W is the
// kind's webhook, AC its apply configuration, C the configuration's apply configuration.
type configKind[W, AC, C any] struct {
	// generated are the webhooks of the configuration generated from config/webhook.
	generated func() ([]W, error)
	// get returns a webhook's name and its client config, which may be changed through the pointer.
	get func(*W) (string, *admissionregistrationv1.WebhookClientConfig)
	// caOnly is the apply of a webhook's caBundle alone.
	caOnly func(name string, bundle []byte) *AC
	// configuration is the apply of the configuration with these webhooks, conditioned on the
	// resourceVersion when it is not nil.
	configuration func(name string, resourceVersion *string, hooks []*AC) *C
}

var mutatingKind = configKind[admissionregistrationv1.MutatingWebhook, arv1ac.MutatingWebhookApplyConfiguration, arv1ac.MutatingWebhookConfigurationApplyConfiguration]{
	generated: func() ([]admissionregistrationv1.MutatingWebhook, error) {
		g, _, err := webhookconfig.Configurations()
		if err != nil {
			return nil, err
		}
		return g.Webhooks, nil
	},
	get: func(w *admissionregistrationv1.MutatingWebhook) (string, *admissionregistrationv1.WebhookClientConfig) {
		return w.Name, &w.ClientConfig
	},
	caOnly: func(name string, bundle []byte) *arv1ac.MutatingWebhookApplyConfiguration {
		return arv1ac.MutatingWebhook().WithName(name).WithClientConfig(arv1ac.WebhookClientConfig().WithCABundle(bundle...))
	},
	configuration: func(name string, rv *string, hooks []*arv1ac.MutatingWebhookApplyConfiguration) *arv1ac.MutatingWebhookConfigurationApplyConfiguration {
		ac := arv1ac.MutatingWebhookConfiguration(name)
		if rv != nil {
			ac.WithResourceVersion(*rv)
		}
		return ac.WithWebhooks(hooks...)
	},
}

var validatingKind = configKind[admissionregistrationv1.ValidatingWebhook, arv1ac.ValidatingWebhookApplyConfiguration, arv1ac.ValidatingWebhookConfigurationApplyConfiguration]{
	generated: func() ([]admissionregistrationv1.ValidatingWebhook, error) {
		_, g, err := webhookconfig.Configurations()
		if err != nil {
			return nil, err
		}
		return g.Webhooks, nil
	},
	get: func(w *admissionregistrationv1.ValidatingWebhook) (string, *admissionregistrationv1.WebhookClientConfig) {
		return w.Name, &w.ClientConfig
	},
	caOnly: func(name string, bundle []byte) *arv1ac.ValidatingWebhookApplyConfiguration {
		return arv1ac.ValidatingWebhook().WithName(name).WithClientConfig(arv1ac.WebhookClientConfig().WithCABundle(bundle...))
	},
	configuration: func(name string, rv *string, hooks []*arv1ac.ValidatingWebhookApplyConfiguration) *arv1ac.ValidatingWebhookConfigurationApplyConfiguration {
		ac := arv1ac.ValidatingWebhookConfiguration(name)
		if rv != nil {
			ac.WithResourceVersion(*rv)
		}
		return ac.WithWebhooks(hooks...)
	},
}

// configurationApply is mutatingApply and validatingApply for kind k: live are the webhooks of the
// live configuration, resourceVersion its (nil when there is none).
func configurationApply[W, AC, C any](a *Authority, k configKind[W, AC, C], name string, live []W, resourceVersion *string, bundle []byte) (*C, error) {
	var generated []W
	if a.o.URL != "" {
		g, err := k.generated()
		if err != nil {
			return nil, err
		}
		generated = g
	}
	hooks, err := webhookApplies(a, live, resourceVersion != nil, generated, k.get,
		func(name string) *AC { return k.caOnly(name, bundle) }, bundle)
	if err != nil || hooks == nil {
		return nil, err
	}
	return k.configuration(name, resourceVersion, hooks), nil
}

// webhookApplies is the part of mutatingApply and validatingApply that does not depend on the
// kind: the webhooks to apply to one configuration, or nil when its live webhooks (haveLive) are
// already current. With URL they are the generated webhooks pointed at it (converted to apply
// configurations); without, one caBundle-only apply per live webhook, made by caOnly. get returns a
// webhook's name and its client config, which may be changed through the pointer.
func webhookApplies[W, AC any](a *Authority, live []W, haveLive bool, generated []W,
	get func(*W) (string, *admissionregistrationv1.WebhookClientConfig), caOnly func(name string) *AC, bundle []byte) ([]*AC, error) {
	read := func(w W) (string, admissionregistrationv1.WebhookClientConfig) {
		name, cc := get(&w)
		return name, *cc
	}
	if a.o.URL != "" {
		want := map[string]string{}
		out := make([]*AC, 0, len(generated))
		for i := range generated {
			w := generated[i]
			name, cc := get(&w)
			*cc = a.urlConfig(*cc, bundle)
			want[name] = *cc.URL
			ac := new(AC)
			if err := convert(&w, ac); err != nil {
				return nil, err
			}
			out = append(out, ac)
		}
		if haveLive && current(live, read, want, bundle) {
			return nil, nil
		}
		return out, nil
	}
	if !haveLive || current(live, read, nil, bundle) {
		return nil, nil
	}
	out := make([]*AC, 0, len(live))
	for i := range live {
		name, _ := get(&live[i])
		out = append(out, caOnly(name))
	}
	return out, nil
}

// current says whether every webhook has bundle and, when urls is not nil, exactly the webhooks
// of urls with those URLs.
func current[W any](webhooks []W, get func(W) (string, admissionregistrationv1.WebhookClientConfig), urls map[string]string, bundle []byte) bool {
	if urls != nil && len(webhooks) != len(urls) {
		return false
	}
	for _, w := range webhooks {
		name, cc := get(w)
		if !bytes.Equal(cc.CABundle, bundle) {
			return false
		}
		if urls != nil && (cc.URL == nil || urls[name] != *cc.URL) {
			return false
		}
	}
	return true
}

func (a *Authority) urlConfig(cc admissionregistrationv1.WebhookClientConfig, bundle []byte) admissionregistrationv1.WebhookClientConfig {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	u := a.o.URL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: bundle}
}

// ensureServing signs a new serving certificate when there is none, when it is due for renewal,
// when its names or its CA are not the current ones, but only with an active CA both
// configurations trust; the caller holds the lock.
func (a *Authority) ensureServing(ctx context.Context, now time.Time, names sans) error {
	_, activeTrusted := a.trustedSince(a.st.active.cert)
	cur := a.serving
	due := cur == nil || !now.Before(renewAt(cur.Leaf)) || !sansOf(cur.Leaf).equal(names) || !signedBy(cur.Leaf, a.st.active.cert)
	if due && activeTrusted {
		next, err := a.st.active.issue(now, a.o.ServingValidity, names)
		if err != nil {
			return err
		}
		a.serving = next
		log.FromContext(ctx).Info("serving a new certificate", "serial", next.Leaf.SerialNumber.String(),
			"notAfter", next.Leaf.NotAfter.UTC().Format(time.RFC3339), "dnsNames", next.Leaf.DNSNames, "ca", fingerprint(a.st.active.cert))
		a.notify()
	}
	trusted := false
	if a.serving != nil && now.Before(a.serving.Leaf.NotAfter) {
		for _, c := range a.trustedCAs() {
			if signedBy(a.serving.Leaf, c) {
				trusted = true
				break
			}
		}
	}
	if trusted != a.servingTrusted {
		a.servingTrusted = trusted
		a.notify()
	}
	return nil
}

// trustedCAs are the CAs of the state that both configurations trust; the caller holds the lock.
func (a *Authority) trustedCAs() []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range []*x509.Certificate{a.st.active.cert, certOf(a.st.next), a.st.previous} {
		if c == nil {
			continue
		}
		if _, ok := a.trustedSince(c); ok {
			out = append(out, c)
		}
	}
	return out
}

func certOf(p *keyPair) *x509.Certificate {
	if p == nil {
		return nil
	}
	return p.cert
}

// fingerprint is a short identifier of a certificate for the logs.
func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return fmt.Sprintf("%x", sum[:6])
}

// convert turns a typed object into its apply configuration (they share the JSON form).
func convert(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}
