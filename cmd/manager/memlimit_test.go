package main

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/operator/memtarget"
)

// TestMemorySettings: the ceiling is the ratio of the container's limit and the target the ratio of
// its request (never above the ceiling); GOMEMLIMIT turns the steering off; bad values are errors
// naming the variable or flag.
func TestMemorySettings(t *testing.T) {
	for _, tc := range []struct {
		name, gomemlimit, limit, request string
		limitRatio, targetRatio          float64
		want                             memtarget.Settings
		steer                            bool
		err                              string
	}{
		{name: "limit and request", limit: "536870912", request: "134217728", limitRatio: 0.9, targetRatio: 0.8,
			want: memtarget.Settings{Ceiling: 483183820, Target: 107374182, Headroom: memtarget.DefaultHeadroom, MaxHeadroom: memtarget.DefaultMaxHeadroom, GCBudget: memtarget.DefaultGCBudget}, steer: true},
		{name: "a limit only: the ceiling", limit: "536870912", limitRatio: 0.9, targetRatio: 0.8,
			want: memtarget.Settings{Ceiling: 483183820, Headroom: memtarget.DefaultHeadroom, MaxHeadroom: memtarget.DefaultMaxHeadroom, GCBudget: memtarget.DefaultGCBudget}, steer: true},
		{name: "a request above the limit: the target is the ceiling", limit: "100", request: "1000", limitRatio: 0.9, targetRatio: 0.8,
			want: memtarget.Settings{Ceiling: 90, Target: 90, Headroom: memtarget.DefaultHeadroom, MaxHeadroom: memtarget.DefaultMaxHeadroom, GCBudget: memtarget.DefaultGCBudget}, steer: true},
		{name: "nothing set", limitRatio: 0.9, targetRatio: 0.8, want: memtarget.Settings{Headroom: memtarget.DefaultHeadroom, MaxHeadroom: memtarget.DefaultMaxHeadroom, GCBudget: memtarget.DefaultGCBudget}},
		{name: "GOMEMLIMIT wins", gomemlimit: "100MiB", limit: "536870912", request: "134217728", limitRatio: 0.9, targetRatio: 0.8},
		{name: "a limit that is no number", limit: "512Mi", limitRatio: 0.9, targetRatio: 0.8, err: `$MEMORY_LIMIT="512Mi" is not a quantity of memory in bytes`},
		{name: "a request that is no number", request: "-1", limitRatio: 0.9, targetRatio: 0.8, err: `$MEMORY_REQUEST="-1" is not a quantity of memory in bytes`},
		{name: "bad limit ratio", limit: "536870912", limitRatio: 1.5, targetRatio: 0.8, err: "--memory-limit-ratio=1.5: want a ratio in (0, 1]"},
		{name: "bad target ratio", limit: "536870912", limitRatio: 0.9, targetRatio: -1, err: "--memory-target-ratio=-1: want a ratio in [0, 1] (0 steers nothing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			t.Setenv(EnvMemoryLimit, tc.limit)
			t.Setenv(EnvMemoryRequest, tc.request)
			got, steer, err := memorySettings(tc.limitRatio, tc.targetRatio)
			if tc.err != "" {
				g.Expect(err).To(MatchError(tc.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(steer).To(Equal(tc.steer))
			if tc.steer {
				g.Expect(got).To(Equal(tc.want))
			}
		})
	}
}
