package memtarget

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Settings are the bounds of the soft memory limit, in bytes.
type Settings struct {
	// Target is the memory the manager aims to stay within while its live heap allows; 0 steers
	// nothing (the limit is then the ceiling).
	Target int64
	// Ceiling is the highest soft limit; 0 is none.
	Ceiling int64
	// Headroom is how far above the live heap the limit stays once the live heap needs more than
	// the target, as a fraction of it (DefaultHeadroom).
	Headroom float64
}

// DefaultHeadroom lets the heap grow by a quarter over what the last collection left live once the
// caches outgrow the target.
const DefaultHeadroom = 0.25

// Limit is the soft memory limit for a live heap of live bytes (0: no limit).
func (s Settings) Limit(live int64) int64 {
	if s.Target <= 0 {
		return s.Ceiling
	}
	limit := max(s.Target, live+int64(float64(live)*s.Headroom))
	if s.Ceiling > 0 {
		limit = min(limit, s.Ceiling)
	}
	return limit
}

// DefaultInterval is how often Run reads the live heap: the collector runs several times a second
// while a fleet is stamped out, and the limit follows within a few of its cycles.
const DefaultInterval = 250 * time.Millisecond

// liveHeap is the runtime metric of the heap the last collection left live.
const liveHeap = "/gc/heap/live:bytes"

// Run sets the runtime's soft memory limit to s.Limit of the live heap, read every interval, until
// ctx ends. It changes the limit only when the new one differs by more than a mebibyte.
func Run(ctx context.Context, s Settings, interval time.Duration) {
	sample := []metrics.Sample{{Name: liveHeap}}
	var current int64 = -1
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			if limit := s.Limit(int64(sample[0].Value.Uint64())); limit > 0 && abs(limit-current) > 1<<20 {
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
