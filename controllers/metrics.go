package controllers

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
)

// Metrics are the operator's own Prometheus metrics, beside controller-runtime's.
type Metrics struct {
	expansions        *prometheus.CounterVec
	expansionDuration prometheus.Histogram
	migrations        *prometheus.CounterVec
}

// NewMetrics registers the operator's metrics with reg. A metric reg already holds (a second manager
// in one process: tests, benchmarks) is the one counted into.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		expansions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiled_operator_expansions_total",
			Help: "Expansions of TiledClusters, by result (ok, error).",
		}, []string{"result"}),
		expansionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tiled_operator_expansion_duration_seconds",
			Help:    "Time to expand one TiledCluster.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiled_operator_migrations_total",
			Help: "Database migrations of TiledInstances that ended, by result: succeeded, or failed (rolled back from the backup taken before it). " +
				"tiled_cluster is the owning TiledCluster, empty for a standalone instance.",
		}, []string{"namespace", "tiled_cluster", "instance", "result"}),
	}
	m.expansions = register(reg, m.expansions)
	m.expansionDuration = register(reg, m.expansionDuration)
	m.migrations = register(reg, m.migrations)
	return m
}

// register registers c with reg, or returns the collector reg already holds under the same
// descriptors.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		panic(err)
	}
	if existing, ok := are.ExistingCollector.(T); ok {
		return existing
	}
	return c
}

// ClusterOf is the name of the TiledCluster that controls the instance (its controller
// ownerReference, which the cluster controller sets and reads to tell its members), "" for a
// standalone instance. The tiled.blueskyproject.io/cluster label is not read: it is the cluster's
// name shortened to a label value.
func ClusterOf(ti *tiledv1alpha1.TiledInstance) string {
	ref := metav1.GetControllerOf(ti)
	if ref == nil || ref.Kind != "TiledCluster" || !strings.HasPrefix(ref.APIVersion, tiledv1alpha1.GroupVersion.Group+"/") {
		return ""
	}
	return ref.Name
}

// migrationEnded counts the migration of ti's databases that rec records the end of.
func (m *Metrics) migrationEnded(ti *tiledv1alpha1.TiledInstance, rec *tiledv1alpha1.MigrationRecord) {
	if m == nil || rec == nil {
		return
	}
	result := "succeeded"
	if rec.Result != upgrade.ResultSucceeded {
		result = "failed"
	}
	m.migrations.WithLabelValues(ti.Namespace, ClusterOf(ti), ti.Name, result).Inc()
}

// startExpansion times one expansion; the returned function records its result.
func (m *Metrics) startExpansion() func(error) {
	if m == nil {
		return func(error) {}
	}
	start := time.Now()
	return func(err error) {
		m.expansionDuration.Observe(time.Since(start).Seconds())
		result := "ok"
		if err != nil {
			result = "error"
		}
		m.expansions.WithLabelValues(result).Inc()
	}
}
