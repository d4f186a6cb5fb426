package faults_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// Children of random instances (seeded) are deleted, some right after the operator created them
// and some once all is quiet: each comes back, and the fleet is exactly as expected again.
func testChildrenDeleted(t *testing.T, g Gomega) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x2545f491))
	ns, _ := newFleet(t, g, "faults-children", nil)
	c := defaultCluster(fleetN)(ns)
	op := startOperator(t, g, ns, nil)
	g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
	deleteSome := func(when string) int {
		objs, err := fleet.Objects(ctxT(t), env.Client, ns)
		g.Expect(err).NotTo(HaveOccurred())
		n := 0
		for k, o := range objs {
			if strings.HasPrefix(k, "TiledInstance/") || rng.IntN(4) != 0 {
				continue
			}
			// Claims and volumes carry protection finalizers; kube-controller-manager (running here)
			// lifts them, as no pod uses them.
			if err := env.Client.Delete(ctxT(t), o); err == nil {
				n++
			}
		}
		t.Logf("deleted %d children %s", n, when)
		return n
	}
	// Early: as soon as about a third of the stamp-out is written.
	g.Expect(fleet.Poll(ctxT(t), 2*time.Millisecond, 5*time.Minute, "a third of the stamp-out", func(context.Context) (bool, error) {
		return op.Traffic.Snapshot().Writes() >= int64(len(expectedKeys(g, c))/3), nil
	})).To(Succeed())
	deleteSome("during the stamp-out")
	waitStampedOut(t, g, op, ns, fleetN)
	g.Eventually(func(g Gomega) { checkFleet(t, g, c) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	// Late: when all is quiet.
	before := op.Traffic.Snapshot()
	n := deleteSome("when quiet")
	g.Eventually(func(g Gomega) { checkFleet(t, g, c) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	d := op.Traffic.Snapshot().Sub(before)
	objectWrites := d.Sum(func(k traffic.Key) bool {
		return k.IsWrite() && !strings.HasSuffix(k.Resource, "/status") && k.Resource != "events"
	})
	t.Logf("%d children deleted when quiet came back with %d object writes", n, objectWrites)
	g.Expect(objectWrites).To(BeNumerically("==", n), "one write per deleted child:\n%s", d)
}
