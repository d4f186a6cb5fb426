package e2e

import (
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// span is one run of a case: the order in which it started and ended among all starts and ends.
type span struct{ start, end int }

// recorder records the order of starts and ends, and the most cases running at once.
type recorder struct {
	mu      sync.Mutex
	clock   int
	spans   map[int]*span
	order   []int
	running int
	most    int
	started map[int]chan struct{}
}

func newRecorder(n int) *recorder {
	r := &recorder{spans: map[int]*span{}, started: map[int]chan struct{}{}}
	for i := 0; i < n; i++ {
		r.started[i] = make(chan struct{})
	}
	return r
}

func (r *recorder) begin(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	r.spans[i] = &span{start: r.clock}
	r.order = append(r.order, i)
	r.running++
	r.most = max(r.most, r.running)
	close(r.started[i])
}

func (r *recorder) finish(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	r.spans[i].end = r.clock
	r.running--
}

func overlap(a, b *span) bool { return a.start < b.end && b.start < a.end }

func TestSchedule(t *testing.T) {
	// Cases: 0 alone (required), 1 and 2 own namespace (each waits for the other to start: they must
	// run at once), 3 and 4 first fleet, 5 alone, 6 own namespace.
	cases := []Case{
		{Name: "install", Needs: Alone, Required: true},
		{Name: "own a", Needs: OwnNamespace},
		{Name: "own b", Needs: OwnNamespace},
		{Name: "fleet 1", Needs: FirstFleet},
		{Name: "fleet 2", Needs: FirstFleet},
		{Name: "upgrade", Needs: Alone},
		{Name: "own c", Needs: OwnNamespace},
	}
	tests := []struct {
		name     string
		parallel int
	}{
		{"three at once", 3},
		{"two at once", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := newRecorder(len(cases))
			out := Schedule(cases, tc.parallel, func(i int) bool {
				r.begin(i)
				defer r.finish(i)
				if other, ok := map[int]int{1: 2, 2: 1}[i]; ok {
					r.meet(t, other)
				}
				time.Sleep(5 * time.Millisecond)
				return true
			})
			g.Expect(r.order).To(HaveLen(len(cases)))
			for i := range cases {
				g.Expect(out[i].Ran).To(BeTrue(), cases[i].Name)
				g.Expect(out[i].Passed).To(BeTrue(), cases[i].Name)
			}
			g.Expect(r.most).To(BeNumerically("<=", tc.parallel), "more cases at once than parallel")
			// The own-namespace pair ran at once.
			g.Expect(overlap(r.spans[1], r.spans[2])).To(BeTrue(), "own-namespace cases 1 and 2 did not run beside each other")
			g.Expect(out[1].Beside).To(BeNumerically(">=", 1))
			// Nothing overlaps an Alone case.
			for _, a := range []int{0, 5} {
				g.Expect(out[a].Beside).To(BeZero(), cases[a].Name)
				for j := range cases {
					if j != a {
						g.Expect(overlap(r.spans[a], r.spans[j])).To(BeFalse(), "%s overlaps %s", cases[a].Name, cases[j].Name)
					}
				}
			}
			// First-fleet cases one after another, in their order.
			g.Expect(r.spans[3].end).To(BeNumerically("<", r.spans[4].start))
			// Every case before an Alone one ended before it started; every one after it started after.
			for j := 1; j < 5; j++ {
				g.Expect(r.spans[j].end).To(BeNumerically("<", r.spans[5].start))
			}
			g.Expect(r.spans[6].start).To(BeNumerically(">", r.spans[5].end))
		})
	}
}

func TestScheduleOneAtATimeKeepsTheOrder(t *testing.T) {
	g := NewWithT(t)
	cases := []Case{{Name: "a", Needs: OwnNamespace}, {Name: "b", Needs: FirstFleet}, {Name: "c", Needs: OwnNamespace},
		{Name: "d", Needs: Alone}, {Name: "e", Needs: OwnNamespace}}
	r := newRecorder(len(cases))
	Schedule(cases, 1, func(i int) bool { r.begin(i); r.finish(i); return true })
	g.Expect(r.most).To(Equal(1))
	g.Expect(r.order).To(Equal([]int{0, 1, 2, 3, 4}), "one slot goes to each case in the suite's order")
}

func TestScheduleStopsAfterARequiredCaseFails(t *testing.T) {
	g := NewWithT(t)
	cases := []Case{{Name: "ok", Needs: OwnNamespace}, {Name: "fleet", Needs: FirstFleet, Required: true},
		{Name: "later", Needs: OwnNamespace}, {Name: "alone", Needs: Alone}}
	var mu sync.Mutex
	var ran []int
	out := Schedule(cases, 4, func(i int) bool {
		mu.Lock()
		ran = append(ran, i)
		mu.Unlock()
		return i != 1
	})
	g.Expect(ran).To(Equal([]int{0, 1}), "a required case runs after every case before it, and nothing after it once it failed")
	g.Expect(out[1].Passed).To(BeFalse())
	g.Expect(out[2].Ran).To(BeFalse())
	g.Expect(out[3].Ran).To(BeFalse())
}

func TestParseParallel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"", defaultParallel, false},
		{"1", 1, false},
		{"6", 6, false},
		{"0", 0, true},
		{"-2", 0, true},
		{"many", 0, true},
	} {
		g := NewWithT(t)
		n, err := ParseParallel(tc.in)
		if tc.err {
			g.Expect(err).To(MatchError(ContainSubstring("E2E_PARALLEL")), tc.in)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(tc.want))
	}
}

// meet is a case body's wait for case other to have started: every case that meets another has
// started before either ends, so their spans overlap whatever order their goroutines run in. It
// waits on the recorder's channel, not on time; the minute is only a guard against a scheduler
// that never starts other, and fails the test.
func (r *recorder) meet(t *testing.T, other int) {
	select {
	case <-r.started[other]:
	case <-time.After(time.Minute):
		t.Errorf("case %d never started", other)
	}
}

// scheduleMeeting runs cases through Schedule, parallel at once; each case, once started, meets
// the cases meets lists for it (waits for each to have started), then ends.
func scheduleMeeting(t *testing.T, cases []Case, parallel int, meets map[int][]int) *recorder {
	r := newRecorder(len(cases))
	Schedule(cases, parallel, func(i int) bool {
		r.begin(i)
		defer r.finish(i)
		for _, other := range meets[i] {
			r.meet(t, other)
		}
		return true
	})
	return r
}

func TestScheduleChainsAreSeparate(t *testing.T) {
	g := NewWithT(t)
	// 0 and 2 are the upgrade fleet's (2 after 0), 1 the first fleet's: 1 runs beside 0, 2 only
	// after 0 has ended. 0 and 1 each wait for the other to start, so that both run at once: were
	// only 0 to wait (as this test once did), 1 could start and end before 0's goroutine first ran,
	// and the two not overlap (3 runs in 8 failed so under -race).
	cases := []Case{{Name: "window end", Needs: UpgradeFleet}, {Name: "fleet", Needs: FirstFleet}, {Name: "read back and remove", Needs: UpgradeFleet}}
	r := scheduleMeeting(t, cases, 5, map[int][]int{0: {1}, 1: {0}})
	g.Expect(overlap(r.spans[0], r.spans[1])).To(BeTrue(), "cases of different chains run beside each other")
	g.Expect(r.spans[0].end).To(BeNumerically("<", r.spans[2].start), "the upgrade fleet's cases run in their order, one at a time")
}

func TestScheduleGrantsSlotsInTheSuitesOrder(t *testing.T) {
	g := NewWithT(t)
	// Two slots. 0 and 1 take them (they meet, so both hold one at once). When 0 ends, 2 (the
	// first fleet's next case, eligible from then on) and 3 and 4 (own namespace, eligible all
	// along) want its slot: 2 comes first in the suite, so 2 gets it. 1 holds its slot until 2 has
	// started, so 3 cannot start through 1's slot first. A scheduler that grants the slot to
	// whichever case asked first gives it to 3 or 4, waiting since the start.
	cases := []Case{{Name: "fleet 1", Needs: FirstFleet}, {Name: "own long", Needs: OwnNamespace},
		{Name: "fleet 2", Needs: FirstFleet}, {Name: "own later", Needs: OwnNamespace}, {Name: "own last", Needs: OwnNamespace}}
	r := scheduleMeeting(t, cases, 2, map[int][]int{0: {1}, 1: {0, 2}})
	g.Expect(r.most).To(BeNumerically("<=", 2))
	g.Expect(r.spans[2].start).To(BeNumerically("<", r.spans[3].start), "fleet 2 (eligible when fleet 1 ended) before own later")
	g.Expect(r.spans[2].start).To(BeNumerically("<", r.spans[4].start), "fleet 2 (eligible when fleet 1 ended) before own last")
}

// TestScheduleTogether: consecutive Together cases run at once, beside each other only: the cases
// before them have ended when they start, and the ones after start once they all have ended.
func TestScheduleTogether(t *testing.T) {
	g := NewWithT(t)
	cases := []Case{
		{Name: "install", Needs: Alone, Required: true},
		{Name: "own a", Needs: OwnNamespace},
		{Name: "stuck 1", Needs: Together},
		{Name: "stuck 2", Needs: Together},
		{Name: "stuck 3", Needs: Together},
		{Name: "own b", Needs: OwnNamespace},
		{Name: "fleet", Needs: FirstFleet},
	}
	r := newRecorder(len(cases))
	out := Schedule(cases, 3, func(i int) bool {
		r.begin(i)
		defer r.finish(i)
		switch i { // the three Together cases each wait for the next to start: they must run at once
		case 2:
			r.meet(t, 3)
		case 3:
			r.meet(t, 4)
		case 4:
			r.meet(t, 2)
		}
		time.Sleep(5 * time.Millisecond)
		return true
	})
	for i := range cases {
		g.Expect(out[i].Passed).To(BeTrue(), cases[i].Name)
	}
	for _, i := range []int{2, 3, 4} {
		g.Expect(out[i].Beside).To(Equal(2), "%s ran beside the other two Together cases only", cases[i].Name)
		g.Expect(r.spans[1].end).To(BeNumerically("<", r.spans[i].start), "%s started before the case before it ended", cases[i].Name)
		for _, j := range []int{5, 6} {
			g.Expect(r.spans[j].start).To(BeNumerically(">", r.spans[i].end), "%s started before %s ended", cases[j].Name, cases[i].Name)
		}
	}
	g.Expect(Together.String()).To(Equal("together"))
}

// TestScheduleTogetherWithinParallel: Together cases take no more slots than parallel allows.
func TestScheduleTogetherWithinParallel(t *testing.T) {
	g := NewWithT(t)
	cases := []Case{{Name: "a", Needs: Together}, {Name: "b", Needs: Together}, {Name: "c", Needs: Together}, {Name: "d", Needs: Alone}}
	r := newRecorder(len(cases))
	Schedule(cases, 2, func(i int) bool { r.begin(i); time.Sleep(5 * time.Millisecond); r.finish(i); return true })
	g.Expect(r.most).To(Equal(2))
	g.Expect(r.spans[3].start).To(BeNumerically(">", r.spans[2].end))
}
