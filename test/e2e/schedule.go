package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Needs says what an end-to-end case shares with the others, and so what may run beside it. The
// suite runs on one node with one operator: some cases change that operator (install it, upgrade it,
// kill its leader) and some change the first fleet every later case reads; the rest make a
// namespace and a fleet of their own and can run beside each other.
type Needs int

const (
	// Alone cases need the node-wide operator to themselves: installs, operator upgrades, a leader
	// killed or failed over, and the cases whose figures or checks read every namespace. Nothing
	// runs beside them; they start when every case before them has ended.
	Alone Needs = iota
	// FirstFleet cases use the first fleet (namespace beamlines, its profile and its pods): they
	// run one at a time, in their order, beside OwnNamespace cases.
	FirstFleet
	// OwnNamespace cases make a namespace and a fleet of their own (or only read): they run beside
	// any case but an Alone one.
	OwnNamespace
	// UpgradeFleet cases read or remove the operator-upgrade cases' fleet (namespace e2e-opup):
	// like FirstFleet, one at a time in their order, beside the others.
	UpgradeFleet
	// Together cases make a namespace and a fleet of their own, but do not fit beside the long
	// cases (the node's two cores): consecutive Together cases run at once, beside each other
	// only, as one Alone step (every case before them ends first, none after them starts until
	// they all have ended).
	Together
)

// chained says whether cases of these needs run one after another in their order.
func (n Needs) chained() bool { return n == FirstFleet || n == UpgradeFleet }

func (n Needs) String() string {
	switch n {
	case Alone:
		return "alone"
	case FirstFleet:
		return "first fleet"
	case OwnNamespace:
		return "own namespace"
	case UpgradeFleet:
		return "upgrade fleet"
	case Together:
		return "together"
	}
	return "unknown"
}

// Case is one end-to-end case: its title, what it shares, and whether the suite can go on without
// it (Required: when it fails, no later case starts).
type Case struct {
	Name     string
	Needs    Needs
	Required bool
}

// Outcome is what Schedule records of a case.
type Outcome struct {
	Ran     bool          // false when a Required case before it failed
	Passed  bool          // its verdict
	Start   time.Duration // from the suite's start
	Elapsed time.Duration
	// Beside is the most other cases that ran at some moment while it ran: 0 means it ran alone,
	// and its timings were taken without other cases' load.
	Beside int
}

// Schedule runs cases through run, in their order, as many at once as parallel allows (at least 1)
// and their Needs permit: an Alone case waits for every case before it to end and holds back every
// case after it; consecutive Together cases do the same as one step, run at once (up to parallel);
// FirstFleet cases run one after another in their order; OwnNamespace cases run
// beside any but Alone ones; UpgradeFleet cases form a chain of their own like FirstFleet's. A
// Required case runs alone, as a barrier, and when it fails no later case runs. A free slot goes to
// the earliest case, in the suite's order, that may start (grant). run is called from several
// goroutines at once; Schedule returns when every case it started has ended, with one Outcome per
// case.
func Schedule(cases []Case, parallel int, run func(i int) bool) []Outcome {
	if parallel < 1 {
		parallel = 1
	}
	s := &scheduler{
		out:     make([]Outcome, len(cases)),
		running: map[int]bool{},
		free:    parallel,
		granted: make([]chan struct{}, len(cases)),
		waiting: map[int]bool{},
		next:    map[int]int{},
		ended:   map[int]bool{},
		start:   time.Now(),
	}
	for i := range s.granted {
		s.granted[i] = make(chan struct{})
	}
	// The last case started of each chain (FirstFleet, UpgradeFleet), -1 for none yet.
	tail := map[Needs]int{FirstFleet: -1, UpgradeFleet: -1}
	var wg sync.WaitGroup
	for i := 0; i < len(cases); i++ {
		c := cases[i]
		if s.stopped() {
			break
		}
		if c.Needs == Together && !c.Required {
			// The run of consecutive Together cases, as one Alone step: they take the slots among
			// themselves.
			end := i + 1
			for end < len(cases) && cases[end].Needs == Together && !cases[end].Required {
				end++
			}
			s.op.Lock()
			s.together(i, end, parallel, run)
			s.op.Unlock()
			i = end - 1
			continue
		}
		if c.Needs == Alone || c.Required {
			// Every case before it ends, and none after it starts, until it has ended. It takes no
			// slot: nothing else runs.
			s.op.Lock()
			s.do(i, run)
			s.op.Unlock()
			if c.Required && !s.out[i].Passed {
				s.stop()
			}
			continue
		}
		s.op.RLock() // released when the case ends: an Alone case after it waits for that
		prev := -1
		if c.Needs.chained() {
			prev, tail[c.Needs] = tail[c.Needs], i
		}
		s.queue(i, prev)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer s.op.RUnlock()
			<-s.granted[i]
			s.do(i, run)
			s.leave(i)
		}(i)
	}
	wg.Wait()
	return s.out
}

// scheduler is Schedule's state. Every field below mu is read and written under it.
type scheduler struct {
	op    sync.RWMutex // Alone cases hold it for writing, the others for reading
	start time.Time
	mu    sync.Mutex
	// free is how many more cases may run now. granted[i] is closed when case i may start.
	free    int
	granted []chan struct{}
	// waiting holds the cases that may start as soon as a slot is free; next[p] = i when case i of
	// a chain waits for case p, the one before it, to end; ended holds the cases that have ended.
	waiting map[int]bool
	next    map[int]int
	ended   map[int]bool
	running map[int]bool
	out     []Outcome
	halted  bool
}

// queue makes case i wait for a slot, or, when prev (the case before it in its chain; -1 for
// none) has not ended yet, for prev to end first.
func (s *scheduler) queue(i, prev int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev >= 0 && !s.ended[prev] {
		s.next[prev] = i
		return
	}
	s.waiting[i] = true
	s.grant()
}

// leave ends case i: the case after it in its chain may now start, and its slot is free. Both
// happen under one lock before any slot is granted, so that the chain's next case competes for
// the slot it leaves (a case of a chain is often among the earliest waiting).
func (s *scheduler) leave(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended[i] = true
	if n, ok := s.next[i]; ok {
		delete(s.next, i)
		s.waiting[n] = true
	}
	s.free++
	s.grant()
}

// grant gives the free slots to the waiting cases earliest in the suite's order; s.mu is held.
//
// Why in order: the suite is ordered so that the long cases start first and the chains (the first
// fleet's, the upgrade fleet's) keep moving beside them. Were a slot given to whichever case's
// goroutine asked first (a channel's send queue), a case listed later could take it ahead of an
// earlier one that had been waiting all along: in one run, cases 7 and the upgrade window's end
// (listed after it) took slots at 258 s while case 10 (backups, one of the long cases) waited for
// one until 353 s, and the long cases, not the short ones, set the suite's end. A case of a
// chain that may start when its predecessor ends is also ahead of later cases, since leave makes
// it waiting before the slot is granted.
func (s *scheduler) grant() {
	for s.free > 0 && len(s.waiting) > 0 {
		first := -1
		for j := range s.waiting {
			if first < 0 || j < first {
				first = j
			}
		}
		delete(s.waiting, first)
		s.free--
		close(s.granted[first])
	}
}

// together runs cases from to end (not included) at once, at most parallel at a time, in their
// order, and returns when all have ended. Nothing else runs meanwhile (the caller holds op).
func (s *scheduler) together(from, end, parallel int, run func(int) bool) {
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := from; i < end; i++ {
		slots <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-slots }()
			s.do(i, run)
		}(i)
	}
	wg.Wait()
}

func (s *scheduler) do(i int, run func(int) bool) {
	s.mu.Lock()
	s.running[i] = true
	for j := range s.running {
		s.out[j].Beside = max(s.out[j].Beside, len(s.running)-1)
	}
	start := time.Now()
	s.out[i].Ran, s.out[i].Start = true, start.Sub(s.start)
	s.mu.Unlock()

	ok := run(i)

	s.mu.Lock()
	delete(s.running, i)
	s.out[i].Passed, s.out[i].Elapsed = ok, time.Since(start)
	s.mu.Unlock()
}

func (s *scheduler) stop() {
	s.mu.Lock()
	s.halted = true
	s.mu.Unlock()
}

func (s *scheduler) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.halted
}

// defaultParallel is how many cases run at once when E2E_PARALLEL is not set: the four long
// own-namespace cases (Tiled upgrade, backups, streaming, autoscaling) and one case of the first
// fleet. Most of a case's time is spent waiting for pods, so five fit the node's two cores and
// 24 GiB without a case's own deadlines running out (docs/e2e.md, "Cases in parallel").
const defaultParallel = 5

// ParseParallel reads E2E_PARALLEL's value: defaultParallel when empty, else a whole number of cases
// at once, 1 or more.
func ParseParallel(v string) (int, error) {
	if v == "" {
		return defaultParallel, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("E2E_PARALLEL=%q: want a whole number of cases at once, 1 or more", v)
	}
	return n, nil
}
