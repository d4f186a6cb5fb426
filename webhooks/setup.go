package webhooks

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
)

// Options configure the webhooks.
type Options struct {
	// Host and Port the webhook server listens on; Port 0 is 9443.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key: mounted from cert-manager's Secret in a cluster, or
	// written by the manager with SelfSigned. Default: controller-runtime's,
	// <tmp>/k8s-webhook-server/serving-certs.
	CertDir string
	// SelfSigned makes the manager create, rotate and publish its own CA and serving certificate
	// (see Certs); without it the certificate comes from cert-manager.
	SelfSigned bool
	// Certs configure the self-signed certificates (Dir and FieldManager are filled in).
	Certs CertOptions
	// FieldManager is the operator's field manager (controllers.FieldOwner): requests under it pass
	// through the mutating webhook, and it applies the CA bundle. Default tiled-operator.
	FieldManager string
	// OperatorUsernames are the users the operator runs as; their requests pass through the
	// mutating webhook.
	OperatorUsernames []string
	// Builtins are the built-in defaults; zero means expansion.DefaultBuiltins().
	Builtins expansion.Builtins
}

// BindFlags registers the webhook flags on fs and returns the options they fill; enabled tells
// whether --webhooks was given. For cmd/manager.
func BindFlags(fs *flag.FlagSet) (o *Options, enabled *bool) {
	o = &Options{}
	enabled = fs.Bool("webhooks", false, "Serve the admission webhooks.")
	fs.IntVar(&o.Port, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", "", "Directory of the webhook server's tls.crt and tls.key.")
	fs.BoolVar(&o.SelfSigned, "webhook-self-signed", false, "Create, rotate and publish a self-signed webhook certificate instead of using cert-manager's.")
	fs.DurationVar(&o.Certs.Validity, "webhook-cert-validity", 90*24*time.Hour, "Validity of the self-signed webhook certificates.")
	fs.StringVar(&o.Certs.URL, "webhook-url", "", "With --webhook-self-signed: install the webhook configurations calling this base URL (local runs).")
	return o, enabled
}

func (o *Options) setDefaults() {
	if o.Port == 0 {
		o.Port = webhook.DefaultPort
	}
	if o.CertDir == "" {
		o.CertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	if o.FieldManager == "" {
		o.FieldManager = "tiled-operator"
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
// nil when o is nil (webhooks off).
func NewServer(o *Options) webhook.Server {
	if o == nil {
		return nil
	}
	c := *o
	c.setDefaults()
	return webhook.NewServer(webhook.Options{Host: c.Host, Port: c.Port, CertDir: c.CertDir})
}

// Webhooks are the registered handlers and, with SelfSigned, the certificates.
type Webhooks struct {
	InstanceDefaulter *InstanceDefaulter
	InstanceValidator *InstanceValidator
	ProfileValidator  *ProfileValidator
	ClusterValidator  *ClusterValidator
	// Certs are the self-signed certificates (nil unless SelfSigned).
	Certs *Certs
}

// Setup registers the webhooks with the manager's webhook server (built by NewServer with the same
// options), starts the informers they read, and with SelfSigned creates the certificates and adds
// the runnable that publishes and rotates them.
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
	srv.Register(MutateInstancePath, &admission.Webhook{Handler: w.InstanceDefaulter})
	srv.Register(ValidateInstancePath, &admission.Webhook{Handler: w.InstanceValidator})
	srv.Register(ValidateProfilePath, &admission.Webhook{Handler: w.ProfileValidator})
	srv.Register(ValidateProfileDeletePath, &admission.Webhook{Handler: w.ProfileValidator})
	srv.Register(ValidateClusterPath, &admission.Webhook{Handler: w.ClusterValidator})
	if err := mgr.AddReadyzCheck("webhooks", srv.StartedChecker()); err != nil {
		return nil, err
	}
	if !o.SelfSigned {
		return w, nil
	}
	co := o.Certs
	co.Dir = o.CertDir
	co.FieldManager = o.FieldManager
	if co.URL != "" {
		co.URL = strings.TrimSuffix(co.URL, "/")
		if len(co.IPs) == 0 {
			if host, _, err := net.SplitHostPort(strings.TrimPrefix(co.URL, "https://")); err == nil {
				if ip := net.ParseIP(host); ip != nil {
					co.IPs = []net.IP{ip}
				} else {
					co.DNSNames = append(co.DNSNames, host)
				}
			}
		}
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	if w.Certs, err = NewCerts(cs, co); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	if err := mgr.Add(w.Certs); err != nil {
		return nil, err
	}
	return w, nil
}

func objectsRead() []client.Object {
	return []client.Object{&v1alpha1.TiledProfile{}, &v1alpha1.TiledCluster{}, &v1alpha1.TiledInstance{}}
}
