package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the operator's own Prometheus metrics, beside controller-runtime's.
type Metrics struct {
	expansions        *prometheus.CounterVec
	expansionDuration prometheus.Histogram
}

// NewMetrics registers the operator's metrics with reg.
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
	}
	for _, c := range []prometheus.Collector{m.expansions, m.expansionDuration} {
		if err := reg.Register(c); err != nil {
			if _, ok := err.(prometheus.AlreadyRegisteredError); !ok { //nolint:errorlint // prometheus returns the value type
				panic(err)
			}
		}
	}
	return m
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
