package main

import (
	"math"
	"runtime/debug"
	"testing"

	. "github.com/onsi/gomega"
)

// TestSetMemoryLimit: the soft limit is the ratio of the container's limit; GOMEMLIMIT wins; bad
// values are errors naming the variable or flag, and leave the runtime's limit alone.
func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, tc := range []struct {
		name, gomemlimit, limit string
		ratio                   float64
		want                    int64
		err                     string
	}{
		{name: "ratio of the limit", limit: "536870912", ratio: 0.9, want: 483183820},
		{name: "no limit, nothing set", ratio: 0.9, want: 0},
		{name: "GOMEMLIMIT wins", gomemlimit: "100MiB", limit: "536870912", ratio: 0.9, want: math.MaxInt64},
		{name: "not a number", limit: "512Mi", ratio: 0.9, err: `$MEMORY_LIMIT="512Mi" is not a memory limit in bytes`},
		{name: "bad ratio", limit: "536870912", ratio: 1.5, err: "--memory-limit-ratio=1.5: want a ratio in (0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			debug.SetMemoryLimit(math.MaxInt64)
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			t.Setenv(EnvMemoryLimit, tc.limit)
			got, err := setMemoryLimit(tc.ratio)
			if tc.err != "" {
				g.Expect(err).To(MatchError(tc.err))
				g.Expect(debug.SetMemoryLimit(-1)).To(Equal(int64(math.MaxInt64)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			if tc.want > 0 && tc.gomemlimit == "" {
				g.Expect(debug.SetMemoryLimit(-1)).To(Equal(tc.want))
			}
		})
	}
}
