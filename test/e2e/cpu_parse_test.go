package e2e

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name, stat string
		want       float64
		ok         bool
	}{
		{name: "utime stime cutime cstime", ok: true, want: 12.34,
			stat: "1234 (kube-apiserver) S 1 1234 1234 0 -1 4194560 100 0 0 0 1000 200 30 4 20 0 12 0 500 0 0"},
		{name: "a command name with spaces and parentheses", ok: true, want: 0.1,
			stat: "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 4 3 2 1 20 0 1 0 0 0 0"},
		{name: "no command name", stat: "garbage"},
		{name: "too short", stat: "1 (x) S 1 2 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := parseProcStat(tc.stat)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(got).To(BeNumerically("~", tc.want, 1e-9))
		})
	}
}

func TestParseMachineBusy(t *testing.T) {
	g := NewWithT(t)
	// user 100, nice 10, system 50, idle 1000, iowait 40, irq 1, softirq 2, steal 3, guest 7, guest_nice 0
	got, err := parseMachineBusy("cpu  100 10 50 1000 40 1 2 3 7 0\ncpu0 50 5 25 500 20 0 1 1 3 0\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeNumerically("~", 1.66, 1e-9))
	_, err = parseMachineBusy("intr 1 2 3\n")
	g.Expect(err).To(MatchError(ContainSubstring("not the cpu line")))
}

func TestTopN(t *testing.T) {
	g := NewWithT(t)
	m := map[string]float64{"a": 1, "b": 5, "c": 3, "d": 3}
	g.Expect(topN(m, 3)).To(Equal(map[string]float64{"b": 5, "c": 3, "d": 3}))
	g.Expect(topN(m, 2)).To(Equal(map[string]float64{"b": 5, "c": 3}))
	g.Expect(topN(m, 10)).To(HaveLen(4))
}
