package memtarget

import (
	"context"
	"math"
	"runtime/debug"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const mib = 1 << 20

// TestLimit: the target while the live heap leaves room under it, a quarter above the live heap
// past it, never above the ceiling; no target leaves the ceiling alone.
func TestLimit(t *testing.T) {
	s := Settings{Target: 100 * mib, Ceiling: 460 * mib, Headroom: DefaultHeadroom}
	for _, tc := range []struct {
		name       string
		s          Settings
		live, want int64
	}{
		{"a small fleet: the target", s, 20 * mib, 100 * mib},
		{"the live heap at the target's edge", s, 80 * mib, 100 * mib},
		{"past it: a quarter above the live heap", s, 200 * mib, 250 * mib},
		{"never above the ceiling", s, 400 * mib, 460 * mib},
		{"no ceiling", Settings{Target: 100 * mib, Headroom: DefaultHeadroom}, 400 * mib, 500 * mib},
		{"no target: the ceiling", Settings{Ceiling: 460 * mib, Headroom: DefaultHeadroom}, 20 * mib, 460 * mib},
		{"nothing", Settings{}, 20 * mib, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(NewPacer(tc.s).Limit(tc.live)).To(Equal(tc.want))
		})
	}
}

// TestPacerFollowsTheCollector: past the target, the headroom grows by half while the collector
// takes more than its budget, up to the most; it shrinks by a third under half the budget, down to
// the least; between the two it stays; under the target, without a budget, or with no room to
// grow, it never grows.
func TestPacerFollowsTheCollector(t *testing.T) {
	s := Settings{Target: 100 * mib, Ceiling: 1000 * mib, Headroom: 0.25, MaxHeadroom: 1, GCBudget: 0.25}
	for _, tc := range []struct {
		name   string
		s      Settings
		shares []float64
		want   float64
		live   int64
	}{
		{"under the target the collector works for it", s, []float64{0.9, 0.9, 0.9}, 0.25, 70 * mib},
		// 90 MiB live: a quarter above it (112.5 MiB) passes the target, but the caches themselves
		// fit in it: the headroom stays, however hard the collector works.
		{"under the target, the headroom past it: still the target's pace", s, []float64{0.9, 0.9, 0.9}, 0.25, 90 * mib},
		{"within the budget", s, []float64{0.2, 0.15, 0.25}, 0.25, 0},
		{"past it once", s, []float64{0.6}, 0.375, 0},
		{"past it for long: the most", s, []float64{0.6, 0.6, 0.6, 0.6, 0.6}, 1, 0},
		{"between half the budget and the budget: it stays", s, []float64{0.6, 0.6, 0.2, 0.13}, 0.5625, 0},
		{"the load passes: back to the least", s, []float64{0.6, 0.6, 0.6, 0, 0.1, 0, 0, 0}, 0.25, 0},
		{"no budget", Settings{Target: 100 * mib, Headroom: 0.25, MaxHeadroom: 1}, []float64{0.9, 0.9}, 0.25, 0},
		{"no room to grow", Settings{Target: 100 * mib, Headroom: 0.25, MaxHeadroom: 0.25, GCBudget: 0.25}, []float64{0.9}, 0.25, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := NewPacer(tc.s)
			live := tc.live
			if live == 0 {
				live = 200 * mib
			}
			for _, share := range tc.shares {
				p.Observe(share, live)
			}
			g.Expect(p.Headroom()).To(BeNumerically("~", tc.want, 1e-9))
		})
	}
}

// TestPacerObserveCPU: the first counters are the baseline; the share is the collector's part of
// the CPU time between two calls; a window with almost no CPU time is idle and counts as none.
func TestPacerObserveCPU(t *testing.T) {
	g := NewWithT(t)
	p := NewPacer(Settings{Target: 100 * mib, Headroom: 0.25, MaxHeadroom: 1, GCBudget: 0.5})
	p.ObserveCPU(60, 40, 200*mib) // the baseline (0.6 of all so far): a share over the whole life would say nothing of now
	g.Expect(p.Headroom()).To(Equal(0.25))
	p.ObserveCPU(60.6, 40.4, 200*mib) // 0.6 of 1 s: over the budget
	g.Expect(p.Headroom()).To(Equal(0.375))
	p.ObserveCPU(60.9, 41.1, 200*mib) // 0.3 of 1 s: between half the budget and the budget
	g.Expect(p.Headroom()).To(Equal(0.375))
	p.ObserveCPU(60.93, 41.11, 200*mib) // 0.03 of 0.04 s: idle, none
	g.Expect(p.Headroom()).To(Equal(0.25))
}

// TestPacerLimitWithHeadroom: a grown headroom raises the limit above a live heap past the target,
// still never above the ceiling, and leaves the target alone while the live heap is under it.
func TestPacerLimitWithHeadroom(t *testing.T) {
	g := NewWithT(t)
	p := NewPacer(Settings{Target: 100 * mib, Ceiling: 460 * mib, Headroom: 0.25, MaxHeadroom: 1, GCBudget: 0.25})
	g.Expect(p.Limit(200 * mib)).To(Equal(int64(250 * mib)))
	for range 4 {
		p.Observe(0.9, 200*mib)
	}
	g.Expect(p.Headroom()).To(Equal(1.0))
	g.Expect(p.Limit(40 * mib)).To(Equal(int64(100 * mib)))
	g.Expect(p.Limit(200 * mib)).To(Equal(int64(400 * mib)))
	g.Expect(p.Limit(300 * mib)).To(Equal(int64(460 * mib)))
}

// TestRunSetsTheLimit: Run gives the runtime the limit for its live heap, and stops with its context.
func TestRunSetsTheLimit(t *testing.T) {
	g := NewWithT(t)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Run(ctx, Settings{Target: 512 * mib, Ceiling: 1024 * mib, Headroom: DefaultHeadroom}, 10*time.Millisecond)
		close(done)
	}()
	g.Eventually(func() int64 { return debug.SetMemoryLimit(-1) }).Should(Equal(int64(512 * mib)))
	cancel()
	g.Eventually(done).Should(BeClosed())
}
