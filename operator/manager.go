package operator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/operator/eventonce"
	"github.com/bluesky/tiled-operator/operator/fleetmetrics"
	"github.com/bluesky/tiled-operator/operator/metricsauth"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/webhooks"
)

// DefaultMemoryLimitRatio is the manager's highest soft memory limit (GOMEMLIMIT) as a fraction of
// its container's memory limit (--memory-limit-ratio).
const DefaultMemoryLimitRatio = 0.9

// DefaultMemoryTargetRatio is the memory the manager aims to stay within while its caches allow, as
// a fraction of its container's memory request (--memory-target-ratio; package memtarget). The rest
// of the request is for what the runtime's limit does not count: the pages of the binary.
const DefaultMemoryTargetRatio = 0.8

// ManagerOptions configure the operator's controller-runtime manager.
type ManagerOptions struct {
	// MetricsBindAddress serves Prometheus metrics; "0" turns them off.
	MetricsBindAddress string
	// SecureMetrics serves metrics over HTTPS behind Kubernetes authentication and authorization.
	SecureMetrics bool
	// HealthProbeBindAddress serves /healthz and /readyz; "0" turns them off.
	HealthProbeBindAddress string
	// PprofBindAddress serves the Go profiler (/debug/pprof/) for memory and CPU profiles; "0" or
	// empty turns it off.
	PprofBindAddress string
	// LeaderElection makes only one of several manager replicas active.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader-election Lease; empty uses the in-cluster namespace.
	LeaderElectionNamespace string
	// WatchNamespaces restricts the operator to these namespaces; empty watches all.
	WatchNamespaces []string
	// Webhooks serves the admission webhooks (package webhooks); nil turns them off.
	Webhooks *webhooks.Options
	// Builtins are the built-in defaults of every expansion (the controllers' and the webhooks'); zero
	// means expansion.DefaultBuiltins(). cmd/manager passes them with the images of its
	// RELATED_IMAGE_<ROLE> variables (expansion.ImagesFromEnvironment).
	Builtins expansion.Builtins
	// Restartable allows several managers in one process, one after another (tests, benchmarks):
	// controller names are then not checked for uniqueness across managers.
	Restartable bool
}

// NewScheme returns the scheme of the manager: client-go's types and the operator's.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := tiledv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Operator is the manager with the operator's controllers, and the parts tests and benchmarks read.
type Operator struct {
	ctrl.Manager
	// Traffic counts every request the manager's clients send to the API server.
	Traffic *traffic.Counter
	// Applier is the server-side apply writer shared by the controllers.
	Applier *applier.Applier
	// Webhooks are the admission webhooks and their certificates (nil when they are off).
	Webhooks *webhooks.Webhooks

	clusterResync, instanceResync, profileResync chan event.GenericEvent
}

// ResyncAll reconciles every TiledCluster, TiledInstance and TiledProfile in the cache again, as a
// periodic resync would: with nothing changed, it must cost no write.
func (o *Operator) ResyncAll(ctx context.Context) error {
	var clusters tiledv1alpha1.TiledClusterList
	if err := o.GetClient().List(ctx, &clusters); err != nil {
		return err
	}
	var instances tiledv1alpha1.TiledInstanceList
	if err := o.GetClient().List(ctx, &instances); err != nil {
		return err
	}
	for i := range clusters.Items {
		o.clusterResync <- event.GenericEvent{Object: &clusters.Items[i]}
	}
	for i := range instances.Items {
		o.instanceResync <- event.GenericEvent{Object: &instances.Items[i]}
	}
	var profileList tiledv1alpha1.TiledProfileList
	if err := o.GetClient().List(ctx, &profileList); err != nil {
		return err
	}
	for i := range profileList.Items {
		o.profileResync <- event.GenericEvent{Object: &profileList.Items[i]}
	}
	return nil
}

// managedSelector selects the objects the operator manages; the caches of child kinds hold only those.
var managedSelector = labels.SelectorFromSet(labels.Set{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue})

// NewManager builds the operator's manager with health and readiness probes, metrics and leader
// election, and registers the operator's controllers with it. Every request it sends is counted.
func NewManager(cfg *rest.Config, o ManagerOptions) (*Operator, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	// No gzip: the operator talks to an API server on the cluster's own network, where compressing
	// every list and every event of a watch costs both ends CPU and saves no time; for the same
	// reason kube-controller-manager and kube-scheduler turn it off.
	cfg.DisableCompression = true
	counter := traffic.New(crmetrics.Registry)
	counter.Instrument(cfg)
	byObject := map[client.Object]cache.ByObject{&corev1.PersistentVolume{}: {Label: managedSelector}}
	for _, obj := range controllers.ChildKinds() {
		byObject[obj] = cache.ByObject{Label: managedSelector}
	}
	// One REST mapper for the manager and for this question: whether ServiceMonitors exist, asked
	// before the cache is built so that, when they do, their cache too holds only managed ones
	// (controller-runtime maps every ByObject kind when the cache is built, so an absent CRD cannot
	// be named there). The manager is handed the same mapper, so discovery is not asked twice; the
	// mapper's HTTP client is its own, built from cfg (counted, uncompressed).
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the REST mapper: %w", err)
	}
	_, smErr := mapper.RESTMapping(controllers.ServiceMonitorKind().GroupVersionKind().GroupKind())
	serviceMonitors := smErr == nil
	if serviceMonitors {
		byObject[controllers.ServiceMonitorKind()] = cache.ByObject{Label: managedSelector}
	}
	// The operator's pods, for the instances' conditions: only their status is kept.
	byObject[&corev1.Pod{}] = cache.ByObject{Label: managedSelector, Transform: func(in any) (any, error) {
		out, err := podstatus.Trim(in)
		internStrings(out)
		return out, err
	}}
	metrics := metricsserver.Options{BindAddress: o.MetricsBindAddress, SecureServing: o.SecureMetrics}
	if o.SecureMetrics {
		metrics.FilterProvider = metricsauth.FilterProvider // TokenReview and SubjectAccessReview, cached
	}
	leaseDuration, renewDeadline, retryPeriod := 30*time.Second, 20*time.Second, 5*time.Second
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:         scheme,
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		Cache: cache.Options{
			ByObject: byObject, DefaultNamespaces: namespaces(o.WatchNamespaces),
			DefaultTransform: trimTransform(), // managedFields slimmed, child kinds trimmed (cachetrim.go)
		},
		// ServiceMonitors are read as unstructured: from the cache too, never past it.
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.Restartable)},
		Metrics:                       metrics,
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		PprofBindAddress:              o.PprofBindAddress,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              "tiled-operator.tiled.blueskyproject.io",
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		WebhookServer:                 webhooks.NewServer(o.Webhooks),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	apl := applier.New(mgr.GetClient(), tiledv1alpha1.FieldOwner, crmetrics.Registry)
	apl.Trust(tiledv1alpha1.RetentionFieldOwner)
	op := &Operator{
		Manager: mgr,
		Traffic: counter,
		Applier: apl,

		clusterResync:  make(chan event.GenericEvent, 64),
		instanceResync: make(chan event.GenericEvent, 64),
		profileResync:  make(chan event.GenericEvent, 64),
	}
	builtins := o.Builtins
	if builtins.Version == "" {
		builtins = expansion.DefaultBuiltins()
	}
	// One Event per transition: a repeat against the same object version would be a series, a
	// patch the operator is not granted (package eventonce).
	recorder := eventonce.New(mgr.GetEventRecorder(tiledv1alpha1.FieldOwner))
	opMetrics := controllers.NewMetrics(crmetrics.Registry)
	if err := (&controllers.TiledClusterReconciler{
		Client: mgr.GetClient(), Applier: op.Applier, Recorder: recorder, Builtins: builtins,
		Metrics: opMetrics, Resync: op.clusterResync,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the TiledCluster controller: %w", err)
	}
	if err := (&controllers.TiledProfileReconciler{
		Client: mgr.GetClient(), Applier: op.Applier, Recorder: recorder, Resync: op.profileResync,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the TiledProfile controller: %w", err)
	}
	if err := (&controllers.TiledInstanceReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Applier: op.Applier, Recorder: recorder,
		Builtins: builtins, ServiceMonitorAvailable: serviceMonitors, Resync: op.instanceResync, Metrics: opMetrics,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the TiledInstance controller: %w", err)
	}
	if err := addFleetMetrics(mgr, crmetrics.Registry); err != nil {
		return nil, fmt.Errorf("setting up the fleet metrics: %w", err)
	}
	if o.Webhooks != nil {
		wo := *o.Webhooks
		wo.Builtins = builtins // the mutating webhook expands as the controllers do
		if op.Webhooks, err = webhooks.Setup(mgr, wo); err != nil {
			return nil, fmt.Errorf("setting up the webhooks: %w", err)
		}
	}
	return op, nil
}

// addFleetMetrics registers the fleet's metrics (package operator/fleetmetrics) with reg: read on
// each scrape from the manager's cache, on the leader only (a runnable that needs leader election
// turns them on).
func addFleetMetrics(mgr ctrl.Manager, reg prometheus.Registerer) error {
	c := fleetmetrics.New(mgr.GetCache(), fleetmetrics.WithLogger(mgr.GetLogger().WithName("fleetmetrics")))
	if err := mgr.Add(c.LeaderRunnable(mgr.GetCache())); err != nil {
		return err
	}
	return fleetmetrics.Register(reg, c)
}

func namespaces(names []string) map[string]cache.Config {
	if len(names) == 0 {
		return nil
	}
	out := make(map[string]cache.Config, len(names))
	for _, n := range names {
		out[n] = cache.Config{}
	}
	return out
}
