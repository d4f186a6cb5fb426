package faults_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var (
	env     *testenv.Env
	enabled = os.Getenv("TILED_FAULTS") == "1"
	fleetN  = envInt("TILED_FAULTS_N", 100)
	trials  = envInt("TILED_FAULTS_TRIALS", 10)
	seed    = envInt("TILED_FAULTS_SEED", 1)
	// parallel is how many of the independent trials run at once (TILED_FAULTS_PARALLEL; the
	// Makefile's FAULTS_PARALLEL): each has a namespace, a manager and a request counter of its own.
	// 1 until two at once are measured to help: on 2 cores shared with other builds (load 20 to 28)
	// the suite got half a core whatever its concurrency, and two trials at once took longer each.
	parallel = envInt("TILED_FAULTS_PARALLEL", 1)
	results  tally
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// tally counts the trials' outcomes for the summary line, and keeps their durations for the table
// of where the minutes went.
type tally struct {
	mu             sync.Mutex
	passed, failed []string
	timed          []timed
	phases         []timed
}

type timed struct {
	name string
	took time.Duration
	ok   bool
}

func (t *tally) add(name string, ok bool, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok {
		t.passed = append(t.passed, name)
	} else {
		t.failed = append(t.failed, name)
	}
	t.timed = append(t.timed, timed{name, took, ok})
}

func (t *tally) phase(name string, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phases = append(t.phases, timed{name: name, took: took, ok: true})
}

// table prints each trial's seconds, longest first, and each phase's wall time.
func (t *tally) table() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.timed) == 0 {
		return
	}
	rows := slices.Clone(t.timed)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].took > rows[j].took })
	var sum time.Duration
	fmt.Printf("seconds per trial (the independent ones %d at once):\n", parallel)
	for _, r := range rows {
		fmt.Printf("  %8.1f  %-4s %s\n", r.took.Seconds(), map[bool]string{true: "ok", false: "FAIL"}[r.ok], r.name)
		sum += r.took
	}
	fmt.Printf("  %8.1f  sum of the trials\n", sum.Seconds())
	for _, p := range t.phases {
		fmt.Printf("  %8.1f  wall time: %s\n", p.took.Seconds(), p.name)
	}
}

func TestMain(m *testing.M) {
	if !enabled {
		os.Exit(m.Run()) // TestFaults reports SKIP
	}
	code := testenv.Run(m, testenv.Options{ControllerManager: true, APIServerFlags: map[string]string{"service-cluster-ip-range": "10.96.0.0/16"}}, &env)
	results.table()
	fmt.Printf("fault suite (N=%d, %d stop trials, seed %d): %d passed, %d failed\n", fleetN, trials, seed, len(results.passed), len(results.failed))
	for _, f := range results.failed {
		fmt.Printf("  failed: %s\n", f)
	}
	fmt.Printf("%d passed, %d failed\n", len(results.passed), len(results.failed))
	if len(results.failed) > 0 && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// trial runs one fault trial as a subtest and records its outcome.
func trial(t *testing.T, name string, f func(t *testing.T, g Gomega)) {
	t.Run(name, func(t *testing.T) {
		start := time.Now()
		defer func() {
			results.add(t.Name(), !t.Failed(), time.Since(start))
			t.Logf("%s: %s in %s", t.Name(), map[bool]string{true: "FAILED", false: "passed"}[t.Failed()], time.Since(start).Round(time.Second))
		}()
		f(t, NewWithT(t))
	})
}

// pool runs trials concurrently, at most n at once, in the order they were queued. t.Run may be
// called from several goroutines; every call returns before wait does.
type pool struct {
	queue chan func()
	wg    sync.WaitGroup
}

func newPool(n int) *pool {
	p := &pool{queue: make(chan func(), 1024)}
	for range n {
		go func() {
			for f := range p.queue {
				f()
			}
		}()
	}
	return p
}

// trial queues trial(t, name, f); done, when given, is called once it has returned (also when -run
// left it out).
func (p *pool) trial(t *testing.T, name string, f func(t *testing.T, g Gomega), done ...func()) {
	p.wg.Add(1)
	p.queue <- func() {
		defer p.wg.Done()
		for _, d := range done {
			defer d()
		}
		trial(t, name, f)
	}
}

// wait waits for every queued trial and stops the workers.
func (p *pool) wait() {
	p.wg.Wait()
	close(p.queue)
}

// timePhase runs f and records its wall time, unless -run left all its trials out.
func timePhase(name string, f func()) {
	count := func() int {
		results.mu.Lock()
		defer results.mu.Unlock()
		return len(results.timed)
	}
	before, start := count(), time.Now()
	f()
	if count() > before {
		results.phase(name, time.Since(start))
	}
}

// TestFaults runs every trial: first, alone, the one that restarts the API server all share; then
// the independent ones, parallel at once (each in a namespace of its own, with a manager and a request
// counter of its own); then, alone, the one that measures the heap of this process (which holds every
// trial's manager), and last the webhook trial, alone because it installs cluster-wide webhook
// configurations (removed at its end) that refuse profile and cluster writes in every namespace while
// its manager is down.
func TestFaults(t *testing.T) {
	if !enabled {
		t.Skip("the fault-injection suite runs with `make test-faults` (TILED_FAULTS=1)")
	}
	timePhase("alone: APIServerRestartMidReconcile", func() {
		trial(t, "APIServerRestartMidReconcile", testAPIServerRestart)
	})
	timePhase(fmt.Sprintf("independent, %d at once: StopDuringStampOut and nine others", parallel), func() {
		p := newPool(parallel)
		// The stop trials are subtests of StopDuringStampOut, which waits for them (in the pool);
		// queued first, they run first.
		queued := make(chan struct{})
		markQueued := sync.OnceFunc(func() { close(queued) })
		var group sync.WaitGroup
		group.Add(1)
		go func() {
			defer group.Done()
			defer markQueued() // also when -run leaves StopDuringStampOut out
			t.Run("StopDuringStampOut", func(t *testing.T) {
				var stops sync.WaitGroup
				testStopDuringStampOut(t, func(name string, f func(t *testing.T, g Gomega)) {
					stops.Add(1)
					p.trial(t, name, f, stops.Done)
				})
				markQueued()
				stops.Wait()
			})
		}()
		<-queued
		p.trial(t, "ExternalEdits", testExternalEdits)
		p.trial(t, "ProfileDeletedInUse", testProfileDeleted)
		p.trial(t, "ProfileBecomesConflicting", testProfileConflict)
		p.trial(t, "DatabaseSecretDisappears", testDatabaseSecret)
		p.trial(t, "RetentionBeamlinesRemoved", testRetentionBeamlines)
		p.trial(t, "RetentionClusterDeleted", testRetentionCluster)
		p.trial(t, "RestartWritesNothing", testRestartWritesNothing)
		p.trial(t, "ChildrenDeleted", testChildrenDeleted)
		p.trial(t, "BeamlineRemovedAndReadded", testBeamlineReadded)
		group.Wait()
		p.wait()
	})
	timePhase("alone: CachesFreedWithTheFleet", func() {
		trial(t, "CachesFreedWithTheFleet", testCachesFreed)
	})
	timePhase("alone: WebhookServerDownThenUp", func() {
		trial(t, "WebhookServerDownThenUp", testWebhookDown)
	})
}
