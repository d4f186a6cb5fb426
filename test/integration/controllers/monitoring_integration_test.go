package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestMetricsSecretKept turns an instance's monitoring on, restarts the operator, turns it off and
// on again, on the real API server: the metrics sidecar and the Service's metrics port come and go
// with it, while the metrics Secret's token, generated once, is never regenerated nor written again
// (turned off, the Secret stays: the operator may not delete Secrets), and the instance's own
// Secret never holds it.
func TestMetricsSecretKept(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "monitoring")
	op := startOperator(t, ns)
	on := &tiledv1alpha1.InstanceTemplate{Monitoring: &tiledv1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true)}}
	smallFleet(t, g, ns, tiledv1alpha1.ClusterInstance{Name: "a", Overrides: on})
	waitForStampOut(t, g, op, ns, "fleet", 1)
	n := fleet.NamesOf(getInstance(t, g, ns, "fleet-a"))
	// The sidecar comes and goes with the Tiled pod template, which waits for the database and the
	// cache to be ready.
	markDependenciesReady(t, g, ns, "fleet-a")

	// sidecar says whether the Tiled StatefulSet runs the metrics sidecar and the Service has its port.
	sidecar := func(g Gomega) bool {
		sts, svc := &appsv1.StatefulSet{}, &corev1.Service{}
		g.Expect(exists(t, sts, ns, n.Tiled)).To(BeTrue())
		g.Expect(exists(t, svc, ns, n.Tiled)).To(BeTrue())
		container := false
		for _, c := range sts.Spec.Template.Spec.Containers {
			container = container || c.Name == render.MetricsContainerName
		}
		port := false
		for _, p := range svc.Spec.Ports {
			port = port || p.Name == render.MetricsPortName
		}
		g.Expect(port).To(Equal(container), "the Service's metrics port follows the sidecar")
		return container
	}
	g.Eventually(sidecar, time.Minute, 100*time.Millisecond).Should(BeTrue())

	first := &corev1.Secret{}
	g.Expect(exists(t, first, ns, n.MetricsSecret)).To(BeTrue())
	g.Expect(first.Data).To(HaveLen(1))
	g.Expect(string(first.Data[render.SecretKeyMetricsToken])).To(MatchRegexp(`^[A-Za-z0-9]{48}$`))
	main := &corev1.Secret{}
	g.Expect(exists(t, main, ns, n.Secret)).To(BeTrue())
	g.Expect(main.Data).NotTo(HaveKey(render.SecretKeyMetricsToken), "Prometheus reads the metrics Secret, never the instance's")

	unchanged := func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(exists(t, s, ns, n.MetricsSecret)).To(BeTrue(), "the metrics Secret stays")
		g.Expect(s.Data).To(Equal(first.Data), "the token is never regenerated")
		g.Expect(s.ResourceVersion).To(Equal(first.ResourceVersion), "nor written again")
	}

	op.stop()
	op = startOperator(t, ns)
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op)
	unchanged(g)

	setOverrides := func(o *tiledv1alpha1.InstanceTemplate) {
		g.Eventually(func(g Gomega) {
			c := getCluster(t, g, ns)
			c.Spec.Instances[0].Overrides = o
			g.Expect(env.Client.Update(ctxT(t), c, client.FieldOwner("test"))).To(Succeed())
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	}
	setOverrides(nil)
	g.Eventually(sidecar, time.Minute, 100*time.Millisecond).Should(BeFalse())
	waitQuiet(t, op)
	unchanged(g)

	setOverrides(on)
	g.Eventually(sidecar, time.Minute, 100*time.Millisecond).Should(BeTrue())
	waitQuiet(t, op)
	unchanged(g)
}
