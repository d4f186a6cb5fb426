// Command manager runs the tiled-operator: the controllers that expand TiledClusters into
// TiledInstances and run each instance's workloads, and with --webhooks the admission webhooks,
// with health probes, metrics and leader election.
//
// Flags (besides controller-runtime's logging flags):
//
//	--leader-elect                  elect one active replica (a Lease in the manager's namespace)
//	--watch-namespaces=a,b          watch only these namespaces (default $WATCH_NAMESPACES, or all);
//	                                OLM passes its target namespaces this way
//	--webhooks                      serve the admission webhooks
//	--cert-management=self          who provides their certificate: self (default), cert-manager, olm
//
// and the webhook, metrics and probe flags `manager --help` lists. docs/getting-started.md says
// which install path sets which. The environment variables RELATED_IMAGE_TILED,
// RELATED_IMAGE_POSTGRESQL and RELATED_IMAGE_CACHE replace the built-in images
// (docs/disconnected.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/operator/memtarget"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The manager's metrics endpoint is protected by authentication and authorization: it asks the
// API server who a scraper's token belongs to and whether it may get /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Leader election: the Lease tiled-operator.tiled.blueskyproject.io in the manager's own namespace
// (read, created by the first leader, renewed by updates), and the Events that record a change of
// leader there. Namespaced: a Role, never cluster-wide.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=system
// +kubebuilder:rbac:groups="",resources=events,verbs=create,namespace=system

// EnvWatchNamespaces is the environment variable --watch-namespaces defaults to. The OLM bundle's
// Deployment sets it from the pod annotation olm.targetNamespaces (empty for AllNamespaces).
const EnvWatchNamespaces = "WATCH_NAMESPACES"

// version is the release this manager was built as, set at link time
// (-ldflags "-X main.version=v0.2.0"; hack/images/build.sh sets the commit). It is logged at start
// and exported as tiled_operator_build_info{version}.
var version = "devel"

func main() {
	if err := run(os.Args[1:]); err != nil {
		ctrl.Log.WithName("setup").Error(err, "the manager stopped")
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var o operator.ManagerOptions
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", `Address of the metrics endpoint ("0" turns it off).`)
	fs.BoolVar(&o.SecureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with Kubernetes authentication and authorization.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", "0", `Address of the Go profiler's /debug/pprof/ endpoints, e.g. 127.0.0.1:8082 ("0" turns it off; it has no authentication, so keep it on loopback).`)
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "Elect a leader so that only one replica of the manager is active.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the manager's own).")
	wh, webhooksOn := webhooks.BindFlags(fs)
	memRatio := fs.Float64("memory-limit-ratio", operator.DefaultMemoryLimitRatio, "The highest soft memory limit of the Go runtime, as a fraction of the container's limit ($"+EnvMemoryLimit+", bytes); GOMEMLIMIT, when set, wins.")
	targetRatio := fs.Float64("memory-target-ratio", operator.DefaultMemoryTargetRatio, "The memory the manager aims to stay within while its caches allow, as a fraction of the container's request ($"+EnvMemoryRequest+", bytes; 0 aims at nothing); GOMEMLIMIT, when set, wins.")
	watch := fs.String("watch-namespaces", os.Getenv(EnvWatchNamespaces), "Comma-separated namespaces to watch (default $"+EnvWatchNamespaces+"; empty: all).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed
	} else if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	o.WatchNamespaces = ParseNamespaces(*watch)
	log := ctrl.Log.WithName("setup")
	memory, steer, err := memorySettings(*memRatio, *targetRatio)
	if err != nil {
		return err
	}
	if o.Builtins, err = builtins(os.Environ()); err != nil {
		return err
	}

	if *webhooksOn {
		wh.Complete()
		wh.WatchNamespaces = o.WatchNamespaces
		o.Webhooks = wh
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes configuration: set KUBECONFIG, use --kubeconfig, or run in a cluster: %w", err)
	}
	mgr, err := operator.NewManager(cfg, o)
	if err != nil {
		return fmt.Errorf("setting up the manager: %w", err)
	}
	buildInfo(crmetrics.Registry, version)
	for _, bi := range expansion.BuiltinImages() {
		if image := o.Builtins.Image(bi.Role); image != bi.Default {
			log.Info("built-in image replaced", "variable", bi.Variable(), "image", image, "builtin", bi.Default)
		}
	}
	log.Info("operator running", "version", version, "host", cfg.Host, "memoryTarget", memory.Target, "memoryCeiling", memory.Ceiling, "namespaces", namespacesForLog(o.WatchNamespaces),
		"webhooks", *webhooksOn, "certManagement", certMode(o.Webhooks))
	ctx := ctrl.SetupSignalHandler()
	if steer {
		go memtarget.Run(ctx, memory, memtarget.DefaultInterval)
	}
	return mgr.Start(ctx)
}

// builtins are the built-in defaults of every expansion, with the images the RELATED_IMAGE_<ROLE>
// variables of environ name instead of the built-in ones (a disconnected site's mirror; OLM's
// convention): an unknown variable or an invalid reference stops the manager, naming the variable.
func builtins(environ []string) (expansion.Builtins, error) {
	images, err := expansion.ImagesFromEnvironment(environ)
	if err != nil {
		return expansion.Builtins{}, fmt.Errorf("the built-in images: %w", err)
	}
	b, err := expansion.DefaultBuiltins().WithImages(images)
	if err != nil {
		return expansion.Builtins{}, fmt.Errorf("the built-in images: %w", err)
	}
	return b, nil
}

// ParseNamespaces splits a comma-separated list, dropping blanks and repeats: OLM's
// olm.targetNamespaces is "" for AllNamespaces, one name for OwnNamespace and SingleNamespace, and
// several for MultiNamespace.
func ParseNamespaces(s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, ns := range strings.Split(s, ",") {
		if ns = strings.TrimSpace(ns); ns != "" && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

func namespacesForLog(ns []string) string {
	if len(ns) == 0 {
		return "all"
	}
	return strings.Join(ns, ",")
}

func certMode(o *webhooks.Options) string {
	if o == nil {
		return "none"
	}
	return string(o.CertMode)
}

// buildInfo exports tiled_operator_build_info{version} 1, so that a scrape (and an upgrade test)
// tells which release each manager pod runs.
func buildInfo(reg prometheus.Registerer, version string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tiled_operator_build_info",
		Help: "Always 1; the label version is the release the manager was built as.",
	}, []string{"version"})
	g.WithLabelValues(version).Set(1)
	_ = reg.Register(g) // registered once per process; a second call (tests) keeps the first
}
