package memtarget

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Settings are the bounds of the soft memory limit, in bytes, and how the headroom above the live
// heap follows the collector's CPU.
type Settings struct {
	// Target is the memory the manager aims to stay within while its live heap allows; 0 steers
	// nothing (the limit is then the ceiling).
	Target int64
	// Ceiling is the highest soft limit; 0 is none.
	Ceiling int64
	// Headroom is how far above the live heap the limit stays once the live heap needs more than
	// the target, as a fraction of it, while the collector keeps within GCBudget (DefaultHeadroom).
	Headroom float64
	// MaxHeadroom is the most headroom the limit grows to while the collector spends more than
	// GCBudget (DefaultMaxHeadroom); at or below Headroom the headroom is fixed.
	MaxHeadroom float64
	// GCBudget is the share of the process's CPU time the collector may spend before the headroom
	// grows (DefaultGCBudget); 0 keeps the headroom fixed.
	GCBudget float64
}

// DefaultHeadroom lets the heap grow by a quarter over what the last collection left live once the
// caches outgrow the target.
const DefaultHeadroom = 0.25

// DefaultMaxHeadroom is the headroom of Go's default pacing (GOGC=100): the heap may double what
// the last collection left live. More would spend memory that even the default pacing does not.
const DefaultMaxHeadroom = 1.0

// DefaultGCBudget is the collector's share of the process's CPU time above which the headroom
// grows: half, where the collector takes as much CPU as the program it collects for. Below it the
// memory target wins, and the collector may work hard for it (at a thousand instances, a good share
// of the manager's CPU); above it the collector runs without pause.
const DefaultGCBudget = 0.5

// Pacer holds the headroom the limit currently gives the live heap: Headroom while the collector
// keeps within its budget, more (up to MaxHeadroom) while it does not. Without it, a fleet whose
// caches outgrow the target by far keeps the heap so close to its live size that the collector runs
// without pause — at three thousand instances it took most of the manager's CPU.
type Pacer struct {
	s        Settings
	headroom float64
	// gc and user are the runtime's CPU counters at the last ObserveCPU; sampled says there was one.
	gc, user float64
	sampled  bool
}

// NewPacer starts at the settings' headroom.
func NewPacer(s Settings) *Pacer { return &Pacer{s: s, headroom: s.Headroom} }

// Headroom is the headroom the limit gives the live heap now.
func (p *Pacer) Headroom() float64 { return p.headroom }

// Limit is the soft memory limit for a live heap of live bytes (0: no limit).
func (p *Pacer) Limit(live int64) int64 {
	if p.s.Target <= 0 {
		return p.s.Ceiling
	}
	limit := max(p.s.Target, live+int64(float64(live)*p.headroom))
	if p.s.Ceiling > 0 {
		limit = min(limit, p.s.Ceiling)
	}
	return limit
}

// Observe adjusts the headroom to the collector's share of the process's CPU time over the last
// window, in which the live heap was last live bytes: past the budget it grows by half (up to
// MaxHeadroom), but only once the live heap itself has outgrown the target — the caches need more
// than the target, and the collector would otherwise run without pause for a margin that small;
// under half the budget it shrinks by a third (down to Headroom), so that memory goes back to the
// target's pacing once the load passes. Between the two it stays, so that the limit does not swing
// with every window.
//
// A live heap under the target never grows the headroom, even when the fixed headroom alone lifts
// the limit past the target (a live heap between Target/(1+Headroom) and Target): there the
// collector works for the target, and the runtime's own limiter (it lets the heap past the soft
// limit when the collector would take more than half of the CPU) keeps it from running without
// pause. Growing the headroom there let a thousand instances' heap (90 MB live, under a 102 MB
// target) double through a burst of reconciles: 174 MiB anonymous memory for 96 MB live.
func (p *Pacer) Observe(gcShare float64, live int64) {
	if p.s.GCBudget <= 0 || p.s.MaxHeadroom <= p.s.Headroom {
		return
	}
	switch {
	case gcShare > p.s.GCBudget && live > p.s.Target:
		p.headroom = min(p.headroom*1.5, p.s.MaxHeadroom)
	case gcShare < p.s.GCBudget/2:
		p.headroom = max(p.headroom/1.5, p.s.Headroom)
	}
}

// ObserveCPU takes the runtime's cumulative CPU counters of the collector and of the program's own
// code, in seconds, and from the second call on observes the collector's share of the CPU time
// since the last call (Observe). A window in which the process spent less than minBusy is idle: its
// share counts as none.
func (p *Pacer) ObserveCPU(gc, user float64, live int64) {
	if p.sampled {
		share := 0.0
		if busy := (gc - p.gc) + (user - p.user); busy >= minBusy {
			share = (gc - p.gc) / busy
		}
		p.Observe(share, live)
	}
	p.gc, p.user, p.sampled = gc, user, true
}

// DefaultInterval is how often Run reads the live heap: the collector runs several times a second
// while a fleet is stamped out, and the limit follows within a few of its cycles.
const DefaultInterval = 250 * time.Millisecond

// window is how many intervals the collector's share of the CPU is measured over.
const window = 8

// minBusy is the least CPU time, in seconds, the process must have spent in a window for the
// collector's share of it to say anything: an idle manager's share is noise, and counts as none.
const minBusy = 0.05

// The runtime metrics Run reads: the heap the last collection left live, and the CPU time the
// collector and the program's own code have spent (the runtime's estimates, comparable with each
// other only).
const (
	liveHeap = "/gc/heap/live:bytes"
	gcCPU    = "/cpu/classes/gc/total:cpu-seconds"
	userCPU  = "/cpu/classes/user:cpu-seconds"
)

// Run sets the runtime's soft memory limit to the pacer's limit for the live heap, read every
// interval, until ctx ends, and every window of intervals tells the pacer the collector's share of
// the CPU time. It changes the limit only when the new one differs by more than a mebibyte.
func Run(ctx context.Context, s Settings, interval time.Duration) {
	p := NewPacer(s)
	sample := []metrics.Sample{{Name: liveHeap}, {Name: gcCPU}, {Name: userCPU}}
	var current int64 = -1
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		metrics.Read(sample)
		if i%window == 0 && sample[0].Value.Kind() == metrics.KindUint64 &&
			sample[1].Value.Kind() == metrics.KindFloat64 && sample[2].Value.Kind() == metrics.KindFloat64 {
			p.ObserveCPU(sample[1].Value.Float64(), sample[2].Value.Float64(), int64(sample[0].Value.Uint64()))
		}
		if sample[0].Value.Kind() == metrics.KindUint64 {
			if limit := p.Limit(int64(sample[0].Value.Uint64())); limit > 0 && abs(limit-current) > 1<<20 {
				debug.SetMemoryLimit(limit)
				current = limit
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
