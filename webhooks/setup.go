package webhooks

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/webhooks/certs"
)

// Options configure the webhooks.
type Options struct {
	// Host and Port the webhook server listens on; Port 0 is 9443.
	Host string
	Port int
	// CertMode says who provides the serving certificate. Empty means CertSelf when SelfSigned is
	// set, CertCertManager otherwise.
	CertMode CertMode
	// SelfSigned is CertMode CertSelf, for callers that predate CertMode.
	SelfSigned bool
	// CertDir holds tls.crt and tls.key with CertCertManager (the mounted Secret) and CertOLM
	// (default OLMCertDir); the webhook server reloads them when they change. Unused with CertSelf,
	// whose certificates never touch the disk.
	CertDir string
	// Certs configure the manager's own CA with CertSelf (FieldManager is filled in).
	Certs CertOptions
	// FieldManager is the operator's field manager (v1alpha1.FieldOwner): requests under it pass
	// through the mutating webhook, and it applies the CA bundle. Default tiled-operator.
	FieldManager string
	// OperatorUsernames are the users the operator runs as; their requests pass through the
	// mutating webhook.
	OperatorUsernames []string
	// WatchNamespaces are the namespaces the operator watches (empty: all). Admission requests for
	// objects in other namespaces are allowed unchecked: the manager's cache does not hold their
	// profiles and clusters, and another operator may be watching them.
	WatchNamespaces []string
	// Builtins are the built-in defaults; zero means expansion.DefaultBuiltins().
	Builtins expansion.Builtins
}

// BindFlags registers the webhook flags on fs and returns the options they fill; enabled tells
// whether --webhooks was given. Call Options.Complete after parsing. For cmd/manager.
func BindFlags(fs *flag.FlagSet) (o *Options, enabled *bool) {
	o = &Options{}
	enabled = fs.Bool("webhooks", false, "Serve the admission webhooks.")
	fs.IntVar(&o.Port, "webhook-port", webhook.DefaultPort, "Port of the webhook server.")
	fs.Func("cert-management", `Who provides the webhook certificate: "self" (the manager's own CA in a Secret of its namespace, shared by all replicas; it patches the webhook configurations' caBundle), "cert-manager" (a Secret mounted at --webhook-cert-dir, caBundle injected by cert-manager) or "olm" (OLM's certificate, mounted at `+OLMCertDir+`). Default "self".`,
		func(s string) error {
			m, err := ParseCertMode(s)
			o.CertMode = m
			return err
		})
	fs.StringVar(&o.CertDir, "webhook-cert-dir", "", "With --cert-management=cert-manager or olm: directory of tls.crt and tls.key (default "+OLMCertDir+").")
	fs.StringVar(&o.Certs.SecretName, "webhook-ca-secret", certs.DefaultSecretName, "With --cert-management=self: the Secret, in the manager's namespace ($POD_NAMESPACE), that holds the CA every replica signs with.")
	fs.DurationVar(&o.Certs.Validity, "webhook-ca-validity", certs.DefaultValidity, "With --cert-management=self: validity of a CA; rotated when a third is left.")
	fs.DurationVar(&o.Certs.ServingValidity, "webhook-cert-validity", certs.DefaultServingValidity, "With --cert-management=self: validity of a serving certificate; renewed when a third is left.")
	fs.StringVar(&o.Certs.URL, "webhook-url", "", "With --cert-management=self, for local runs: install the whole webhook configurations, calling this base URL (e.g. https://127.0.0.1:9443) instead of the Service.")
	return o, enabled
}

// mode is the certificate mode in effect.
func (o *Options) mode() CertMode {
	switch {
	case o.CertMode != "":
		return o.CertMode
	case o.SelfSigned:
		return CertSelf
	default:
		return CertCertManager
	}
}

// Complete fills the defaults of the flags BindFlags registered: certificate management "self"
// unless --cert-management said otherwise.
func (o *Options) Complete() {
	if o.CertMode == "" && !o.SelfSigned {
		o.CertMode = CertSelf
	}
}

func (o *Options) setDefaults() {
	if o.Port == 0 {
		o.Port = webhook.DefaultPort
	}
	if o.CertDir == "" {
		o.CertDir = OLMCertDir
	}
	if o.FieldManager == "" {
		o.FieldManager = v1alpha1.FieldOwner
	}
	if o.Builtins.Version == "" {
		o.Builtins = expansion.DefaultBuiltins()
	}
	if ns, name, ok := serviceAccount(); ok {
		o.OperatorUsernames = append(o.OperatorUsernames, "system:serviceaccount:"+ns+":"+name)
	}
}

// serviceAccount reads the in-cluster service account from the environment (set by the Deployment
// through the downward API as POD_NAMESPACE and SERVICE_ACCOUNT_NAME), if any.
func serviceAccount() (string, string, bool) {
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("SERVICE_ACCOUNT_NAME")
	return ns, name, ns != "" && name != ""
}

// NewServer returns the webhook server for the manager's options (ctrl.Options.WebhookServer), or
// nil when o is nil (webhooks off). With CertSelf, Setup gives it the certificates.
func NewServer(o *Options) webhook.Server {
	if o == nil {
		return nil
	}
	c := *o
	c.setDefaults()
	return webhook.NewServer(webhook.Options{Host: c.Host, Port: c.Port, CertDir: c.CertDir})
}

// Webhooks are the registered handlers and, with CertSelf, the certificates.
type Webhooks struct {
	InstanceDefaulter *InstanceDefaulter
	InstanceValidator *InstanceValidator
	ProfileValidator  *ProfileValidator
	ClusterValidator  *ClusterValidator
	// Certs is the manager's own CA and serving certificate (nil unless CertSelf).
	Certs *certs.Authority
	// Ready passes once the webhook server answers TLS with its certificate: the manager's readiness
	// check "webhooks", for callers that wait for the webhooks before sending objects.
	Ready healthz.Checker
}

// Setup registers the webhooks with the manager's webhook server (built by NewServer with the same
// options), starts the informers they read, and adds the readiness checks: the webhook server
// answers TLS (Webhooks.Ready) and, with CertSelf, serves a certificate the webhook configurations
// trust; with CertSelf no handshake is tried before it has that certificate. With CertSelf it also
// adds the certs.Authority that keeps the CA Secret, the caBundle and the serving certificate.
func Setup(mgr ctrl.Manager, o Options) (*Webhooks, error) {
	o.setDefaults()
	ctx := context.Background()
	// The handlers list profiles, clusters and instances from the cache: their informers start with
	// the manager, so that the first admission does not wait for a cache to sync.
	for _, obj := range objectsRead() {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("webhooks: informer for %T: %w", obj, err)
		}
	}
	w := &Webhooks{
		InstanceDefaulter: &InstanceDefaulter{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Builtins: o.Builtins,
			Operator: Identity{FieldManager: o.FieldManager, Usernames: o.OperatorUsernames}},
		InstanceValidator: &InstanceValidator{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Builtins: o.Builtins},
		ProfileValidator:  &ProfileValidator{Reader: mgr.GetClient(), Builtins: o.Builtins, Reviews: mgr.GetClient()},
		ClusterValidator:  &ClusterValidator{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Builtins: o.Builtins},
	}
	srv := mgr.GetWebhookServer()
	scope := func(h admission.Handler) *admission.Webhook {
		return &admission.Webhook{Handler: namespaceScoped(h, o.WatchNamespaces)}
	}
	srv.Register(MutateInstancePath, scope(w.InstanceDefaulter))
	srv.Register(ValidateInstancePath, scope(w.InstanceValidator))
	srv.Register(ValidateProfilePath, scope(w.ProfileValidator))
	srv.Register(ValidateProfileDeletePath, scope(w.ProfileValidator))
	srv.Register(ValidateClusterPath, scope(w.ClusterValidator))
	srv.Register(MutateApprovalPath, scope(ApprovalStamper{}))
	if o.mode() != CertSelf {
		w.Ready = srv.StartedChecker()
		if err := mgr.AddReadyzCheck("webhooks", w.Ready); err != nil {
			return nil, err
		}
		return w, nil
	}
	def, ok := srv.(*webhook.DefaultServer)
	if !ok {
		return nil, fmt.Errorf("webhooks: the manager's webhook server is a %T, not the one NewServer builds", srv)
	}
	co := o.Certs
	co.FieldManager = o.FieldManager
	if co.MutatingName == "" {
		co.MutatingName = MutatingConfigurationName
	}
	if co.ValidatingName == "" {
		co.ValidatingName = ValidatingConfigurationName
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	w.Certs = certs.New(cs, co)
	// The server takes its certificate from memory, not from files: it refuses TLS until the API
	// server trusts the CA that signed it.
	def.Options.TLSOpts = append(def.Options.TLSOpts, func(c *tls.Config) { c.GetCertificate = w.Certs.GetCertificate })
	w.Ready = startedWith(w.Certs.Ready, srv.StartedChecker())
	if err := mgr.AddReadyzCheck("webhooks", w.Ready); err != nil {
		return nil, err
	}
	if err := mgr.Add(w.Certs); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook-certs", w.Certs.Ready); err != nil {
		return nil, err
	}
	return w, nil
}

// startedWith is the webhook server's started check (a TLS handshake with it) made only once
// certificate passes: until the server has a certificate to present, each handshake would be
// refused, and logged by the server ("http: TLS handshake error ... no serving certificate"), at
// every readiness probe and every poll of a caller waiting for the webhooks.
func startedWith(certificate, started healthz.Checker) healthz.Checker {
	return func(req *http.Request) error {
		if err := certificate(req); err != nil {
			return fmt.Errorf("webhook server not started: %w", err)
		}
		return started(req)
	}
}

// namespaceScoped allows requests for namespaces outside namespaces (when it is not empty)
// without calling h.
func namespaceScoped(h admission.Handler, namespaces []string) admission.Handler {
	if len(namespaces) == 0 {
		return h
	}
	set := map[string]bool{}
	for _, n := range namespaces {
		set[n] = true
	}
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		if req.Namespace != "" && !set[req.Namespace] {
			return admission.Allowed("namespace " + req.Namespace + " is not watched by this operator")
		}
		return h.Handle(ctx, req)
	})
}

func objectsRead() []client.Object {
	return []client.Object{&v1alpha1.TiledProfile{}, &v1alpha1.TiledCluster{}, &v1alpha1.TiledInstance{}}
}
