package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// FieldOwner is the one field manager under which the operator applies every object.
const FieldOwner = "tiled-operator"

// ManagerOptions configure the operator's controller-runtime manager.
type ManagerOptions struct {
	// MetricsBindAddress serves Prometheus metrics; "0" turns them off.
	MetricsBindAddress string
	// SecureMetrics serves metrics over HTTPS behind Kubernetes authentication and authorization.
	SecureMetrics bool
	// HealthProbeBindAddress serves /healthz and /readyz; "0" turns them off.
	HealthProbeBindAddress string
	// LeaderElection makes only one of several manager replicas active.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader-election Lease; empty uses the in-cluster namespace.
	LeaderElectionNamespace string
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

// NewManager builds the operator's manager with health and readiness probes, metrics and leader
// election, and registers the operator's controllers with it.
func NewManager(cfg *rest.Config, o ManagerOptions) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	metrics := metricsserver.Options{BindAddress: o.MetricsBindAddress, SecureServing: o.SecureMetrics}
	if o.SecureMetrics {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	leaseDuration, renewDeadline, retryPeriod := 30*time.Second, 20*time.Second, 5*time.Second
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              "tiled-operator.tiled.blueskyproject.io",
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
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
	return mgr, nil
}
