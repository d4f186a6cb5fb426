// Command manager runs the tiled-operator: the controllers that expand TiledClusters into
// TiledInstances and run each instance's workloads, with health probes, metrics and leader election.
package main

import (
	"flag"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/webhooks"
)

// The manager's metrics endpoint is protected by authentication and authorization.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func main() {
	var o controllers.ManagerOptions
	flag.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", `Address of the metrics endpoint ("0" turns it off).`)
	flag.BoolVar(&o.SecureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with Kubernetes authentication and authorization.")
	flag.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.BoolVar(&o.LeaderElection, "leader-elect", false, "Elect a leader so that only one replica of the manager is active.")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the manager's own).")
	wh, webhooksOn := webhooks.BindFlags(flag.CommandLine)
	var watch string
	flag.StringVar(&watch, "watch-namespaces", "", "Comma-separated namespaces to watch (default: all).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	for _, ns := range strings.Split(watch, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			o.WatchNamespaces = append(o.WatchNamespaces, ns)
		}
	}
	log := ctrl.Log.WithName("setup")

	if *webhooksOn {
		o.Webhooks = wh
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no Kubernetes configuration: set KUBECONFIG, use --kubeconfig, or run in a cluster")
		os.Exit(1)
	}
	mgr, err := controllers.NewManager(cfg, o)
	if err != nil {
		log.Error(err, "cannot set up the manager")
		os.Exit(1)
	}
	log.Info("operator running", "host", cfg.Host)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped with an error")
		os.Exit(1)
	}
}
