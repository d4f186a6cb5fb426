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
// case after it; FirstFleet cases run one after another in their order; OwnNamespace cases run
// beside any but Alone ones; UpgradeFleet cases form a chain of their own like FirstFleet's. A
// Required case runs alone, as a barrier, and when it fails no later case runs. run is called from several goroutines at once; Schedule returns when every case it
// started has ended, with one Outcome per case.
func Schedule(cases []Case, parallel int, run func(i int) bool) []Outcome {
	if parallel < 1 {
		parallel = 1
	}
	s := &scheduler{
		out:     make([]Outcome, len(cases)),
		running: map[int]bool{},
		slots:   make(chan struct{}, parallel),
		start:   time.Now(),
	}
	// The last case of each chain (FirstFleet, UpgradeFleet) ends when its channel closes.
	chainDone := map[Needs]chan struct{}{FirstFleet: closedChan(), UpgradeFleet: closedChan()}
	var wg sync.WaitGroup
	for i, c := range cases {
		if s.stopped() {
			break
		}
		if c.Needs == Alone || c.Required {
			// Every case before it ends, and none after it starts, until it has ended.
			s.op.Lock()
			s.do(i, run)
			s.op.Unlock()
			if c.Required && !s.out[i].Passed {
				s.stop()
			}
			continue
		}
		s.op.RLock() // released when the case ends: an Alone case after it waits for that
		var prev, mine chan struct{}
		if c.Needs.chained() {
			prev, mine = chainDone[c.Needs], make(chan struct{})
			chainDone[c.Needs] = mine
		}
		wg.Add(1)
		go func(i int, prev <-chan struct{}, mine chan struct{}) {
			defer wg.Done()
			defer s.op.RUnlock()
			if mine != nil {
				defer close(mine)
				<-prev // the chain's previous case has ended
			}
			s.slots <- struct{}{}
			defer func() { <-s.slots }()
			s.do(i, run)
		}(i, prev, mine)
	}
	wg.Wait()
	return s.out
}

type scheduler struct {
	op      sync.RWMutex // Alone cases hold it for writing, the others for reading
	slots   chan struct{}
	start   time.Time
	mu      sync.Mutex
	running map[int]bool
	out     []Outcome
	halted  bool
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

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
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
