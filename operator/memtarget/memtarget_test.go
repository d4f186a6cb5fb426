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
			NewWithT(t).Expect(tc.s.Limit(tc.live)).To(Equal(tc.want))
		})
	}
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
