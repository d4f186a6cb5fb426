package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metricValue is the value of the sample of the named metric, in controller-runtime's registry
// (the operator's metrics endpoint), whose labels include every one of want; found is false when
// no sample has them.
func metricValue(g Gomega, name string, want map[string]string) (value float64, found bool) {
	families, err := crmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := true
			for k, v := range want {
				if label(m, k) != v {
					match = false
				}
			}
			if match {
				if c := m.GetCounter(); c != nil {
					return c.GetValue(), true
				}
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// expectMigrationCounted checks that the end of the standalone instance's migration was counted
// once in tiled_operator_migrations_total with result (succeeded, failed), and that the fleet's
// metrics (package operator/fleetmetrics) report whether it failed.
func expectMigrationCounted(t *testing.T, g Gomega, ns, name, result string) {
	t.Helper()
	labels := map[string]string{"namespace": ns, "tiled_cluster": "", "instance": name}
	counted := map[string]string{"result": result}
	for k, v := range labels {
		counted[k] = v
	}
	g.Eventually(func(g Gomega) {
		v, found := metricValue(g, "tiled_operator_migrations_total", counted)
		g.Expect(found).To(BeTrue(), "tiled_operator_migrations_total%v", counted)
		g.Expect(v).To(Equal(1.0))
		failed, found := metricValue(g, "tiled_operator_instance_migration_failed", labels)
		g.Expect(found).To(BeTrue(), "tiled_operator_instance_migration_failed%v", labels)
		g.Expect(failed == 1).To(Equal(result == "failed"))
	}, upgradeWithin, upgradePoll).Should(Succeed())
	other := map[string]string{"result": map[string]string{"failed": "succeeded", "succeeded": "failed"}[result]}
	for k, v := range labels {
		other[k] = v
	}
	_, found := metricValue(g, "tiled_operator_migrations_total", other)
	g.Expect(found).To(BeFalse(), "tiled_operator_migrations_total%v", other)
}
