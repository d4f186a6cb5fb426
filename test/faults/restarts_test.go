package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The manager is stopped at a random point of the stamp-out (after a random number of writes,
// seeded), then a new manager starts: it converges to exactly the expected objects, with no
// duplicate or orphan, and no Secret that existed when the first manager stopped is regenerated.
// run runs each trial (trial, or a pool's); each has its namespace and its managers.
func testStopDuringStampOut(t *testing.T, run func(name string, f func(t *testing.T, g Gomega))) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7f4a7c15))
	for i := 0; i < trials; i++ {
		frac := rng.Float64()
		run(fmt.Sprintf("trial-%02d", i+1), func(t *testing.T, g Gomega) {
			ns, _ := newFleet(t, g, "faults-stop", nil)
			c := defaultCluster(fleetN)(ns)
			expected := len(expectedKeys(g, c))
			stopAt := int64(1 + frac*float64(expected-1))
			op := startOperator(t, g, ns, nil)
			g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
			g.Expect(fleet.Poll(ctxT(t), 2*time.Millisecond, 5*time.Minute, "writes before the stop", func(context.Context) (bool, error) {
				return op.Traffic.Snapshot().Writes() >= stopAt, nil
			})).To(Succeed())
			_ = op.Stop()
			written := op.Traffic.Snapshot().Writes()
			t.Logf("stopped after %d writes (aimed at %d of about %d objects)", written, stopAt, expected)
			objs, err := fleet.Objects(ctxT(t), env.Client, ns)
			g.Expect(err).NotTo(HaveOccurred())
			before := secretData(objs)

			op2 := startOperator(t, g, ns, nil)
			waitStampedOut(t, g, op2, ns, fleetN)
			after := checkFleet(t, g, c)
			afterSecrets := secretData(after)
			for k, data := range before {
				g.Expect(afterSecrets).To(HaveKey(k))
				g.Expect(afterSecrets[k]).To(Equal(data), "%s was regenerated after the restart", k)
			}
			t.Logf("%d objects, %d Secrets existed at the stop and kept their data", len(after), len(before))
		})
	}
}

// The apiserver is restarted (etcd kept) while the operator stamps out: the same manager, never
// restarted, converges to exactly the expected objects, and a full resync afterwards writes nothing.
func testAPIServerRestart(t *testing.T, g Gomega) {
	ns, _ := newFleet(t, g, "faults-apiserver", nil)
	c := defaultCluster(fleetN)(ns)
	expected := len(expectedKeys(g, c))
	op := startOperator(t, g, ns, nil)
	g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
	g.Expect(fleet.Poll(ctxT(t), 5*time.Millisecond, 5*time.Minute, "a third of the stamp-out", func(context.Context) (bool, error) {
		return op.Traffic.Snapshot().Writes() >= int64(expected/3), nil
	})).To(Succeed())
	at := op.Traffic.Snapshot().Writes()
	g.Expect(env.RestartAPIServer(ctxT(t), 3*time.Second)).To(Succeed())
	t.Logf("apiserver restarted after %d writes of about %d", at, expected)
	select {
	case <-op.Done():
		t.Fatal("the manager stopped when the apiserver went away")
	default:
	}
	waitStampedOut(t, g, op, ns, fleetN)
	objs := checkFleet(t, g, c)
	rvs := fleet.ResourceVersions(objs)
	before := op.Traffic.Snapshot()
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	time.Sleep(3 * time.Second)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	g.Expect(op.Traffic.Snapshot().Sub(before).Writes()).To(BeZero(), "writes on a resync after recovering")
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty())
	select {
	case <-op.Done():
		t.Fatal("the manager stopped")
	default:
	}
}

// The fleet is stamped out, the manager stops and a new one starts (a crash, a change of leader):
// the new one sends no write at all, a full resync included.
func testRestartWritesNothing(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-restart", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	objs := checkFleet(t, g, c)
	rvs := fleet.ResourceVersions(objs)
	_ = op.Stop()
	op2 := startOperator(t, g, ns, nil)
	g.Expect(op2.ResyncAll(ctxT(t))).To(Succeed())
	time.Sleep(3 * time.Second)
	g.Expect(fleet.WaitQuiet(ctxT(t), op2.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	all := op2.Traffic.Snapshot()
	t.Logf("a new manager over %d objects: %d writes, %d requests in all", len(objs), all.Writes(), all.Total())
	g.Expect(all.Writes()).To(BeZero(), "writes by a new manager over a fleet already in place:\n%s", all)
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty())
}
