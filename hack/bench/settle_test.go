package main

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestParseProcStat: the aggregate line is read, per-CPU lines and the rest are not; idle and
// iowait are not busy; guest time (already in user) is not counted twice; a bad field is an error.
func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		want    cpuSample
		wantErr string
	}{
		{
			name: "aggregate line with guest fields",
			// cpu user nice system idle iowait irq softirq steal guest guest_nice
			data: "cpu  100 5 50 800 40 1 2 2 30 0\ncpu0 50 2 25 400 20 1 1 1 15 0\nintr 1 2 3\n",
			want: cpuSample{busy: 100 + 5 + 50 + 1 + 2 + 2, total: 100 + 5 + 50 + 800 + 40 + 1 + 2 + 2},
		},
		{
			name: "old kernels without steal and guest",
			data: "cpu 10 0 10 80 0 0 0\n",
			want: cpuSample{busy: 20, total: 100},
		},
		{name: "no aggregate line", data: "cpu0 1 2 3 4 5\n", wantErr: "no aggregate cpu line"},
		{name: "a field that is not a number", data: "cpu 1 x 3 4 5\n", wantErr: "cpu field 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := parseProcStat(tc.data)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestBusyFraction: the busy share between two samples; no time passed is 0, not a division by 0.
func TestBusyFraction(t *testing.T) {
	g := NewWithT(t)
	g.Expect(busyFraction(cpuSample{busy: 100, total: 1000}, cpuSample{busy: 150, total: 1200})).To(BeNumerically("~", 0.25, 1e-9))
	g.Expect(busyFraction(cpuSample{busy: 100, total: 1000}, cpuSample{busy: 100, total: 1000})).To(BeZero())
}
