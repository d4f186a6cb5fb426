package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"
)

// Before a timed phase — the floor, the stamp-out, each convergence trial — the harness waits
// until the machine is settled: a control plane that has just started (post-start hooks, RBAC
// bootstrap, the OpenAPI of newly created CRDs) and a manager that has just synced its caches use
// the CPU for seconds after they answer, and on two shared cores that work would be charged to
// whichever phase came first. The floor and the operator get the same wait, so neither is timed on
// a busier machine than the other.
const (
	settleWindow  = time.Second
	settleBusy    = 0.15 // fraction of all the machine's CPUs in use over a window that is settled
	settleTimeout = time.Minute
)

// cpuSample is the machine's CPU time from /proc/stat's aggregate line, in clock ticks.
type cpuSample struct{ busy, total uint64 }

// parseProcStat reads the aggregate "cpu" line of /proc/stat: busy is everything but idle and
// iowait.
func parseProcStat(data string) (cpuSample, error) {
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var s cpuSample
		// user nice system idle iowait irq softirq steal; guest and guest_nice, after them, are
		// already counted in user and nice.
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return cpuSample{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			s.total += n
			if i != 3 && i != 4 { // idle, iowait
				s.busy += n
			}
		}
		return s, nil
	}
	return cpuSample{}, fmt.Errorf("/proc/stat: no aggregate cpu line")
}

// busyFraction is the share of all CPUs in use between two samples.
func busyFraction(before, after cpuSample) float64 {
	if after.total <= before.total {
		return 0
	}
	return float64(after.busy-before.busy) / float64(after.total-before.total)
}

func readCPUSample() (cpuSample, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}, err
	}
	return parseProcStat(string(data))
}

// settle waits until a window of settleWindow has the machine's CPUs busy less than settleBusy of
// the time, or settleTimeout passes (then the phase runs anyway, and the log says so).
func settle(ctx context.Context, what string) {
	start := time.Now()
	prev, err := readCPUSample()
	if err != nil {
		log.Printf("settle before %s: %v", what, err)
		return
	}
	last := 1.0
	for time.Since(start) < settleTimeout {
		select {
		case <-ctx.Done():
			return
		case <-time.After(settleWindow):
		}
		cur, err := readCPUSample()
		if err != nil {
			log.Printf("settle before %s: %v", what, err)
			return
		}
		last = busyFraction(prev, cur)
		if last < settleBusy {
			return
		}
		prev = cur
	}
	log.Printf("settle before %s: the machine was still %.0f%% busy after %s; timing it anyway", what, 100*last, settleTimeout)
}
