package faults_test

import (
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// A fleet of cacheN beamlines is created and deleted three times under one manager: what the
// applier remembers returns to where it started each time, and the heap (this process holds the
// manager) does not grow from one round to the next.
func testCachesFreed(t *testing.T, g Gomega) {
	const rounds = 3
	n := envInt("TILED_FAULTS_CACHE_N", 300)
	ns, _ := newFleet(t, g, "faults-caches", nil)
	op := startOperator(t, g, ns, nil)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	base := op.Applier.Len()
	heap := make([]uint64, 0, rounds)
	for round := 1; round <= rounds; round++ {
		c := defaultCluster(n)(ns)
		start := time.Now()
		g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
		waitStampedOut(t, g, op, ns, n)
		stamped := time.Since(start)
		full := op.Applier.Len()
		start = time.Now()
		g.Expect(env.Client.Delete(ctxT(t), getCluster(t, g, ns), client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		g.Eventually(func(g Gomega) {
			var tis tiledv1alpha1.TiledInstanceList
			g.Expect(op.GetClient().List(ctxT(t), &tis, client.InNamespace(ns))).To(Succeed())
			g.Expect(tis.Items).To(BeEmpty())
			g.Expect(op.Applier.Len()).To(BeNumerically("<=", base), "applier records left")
		}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
		g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, 2*time.Minute)).To(Succeed())
		t.Logf("round %d: stamped out (and quiet) in %s, deleted (and quiet) in %s", round, stamped.Round(time.Second), time.Since(start).Round(time.Second))
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = append(heap, ms.HeapAlloc)
		t.Logf("round %d: %d beamlines; applier records %d with the fleet, %d after (%d before any); heap after %.1f MiB",
			round, n, full, op.Applier.Len(), base, float64(ms.HeapAlloc)/(1<<20))
	}
	// Flat: the last round ends within 20 % (plus 8 MiB of noise) of the first.
	g.Expect(float64(heap[rounds-1])).To(BeNumerically("<=", 1.2*float64(heap[0])+8*(1<<20)), "heap grows round after round: %v", heap)
}
