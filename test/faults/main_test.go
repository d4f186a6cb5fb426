package faults_test

import (
	"fmt"
	"os"
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
	results tally
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// tally counts the trials' outcomes for the summary line.
type tally struct {
	mu             sync.Mutex
	passed, failed []string
}

func (t *tally) add(name string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok {
		t.passed = append(t.passed, name)
	} else {
		t.failed = append(t.failed, name)
	}
}

func TestMain(m *testing.M) {
	if !enabled {
		os.Exit(m.Run()) // TestFaults reports SKIP
	}
	code := testenv.Run(m, testenv.Options{ControllerManager: true, APIServerFlags: map[string]string{"service-cluster-ip-range": "10.96.0.0/16"}}, &env)
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
			results.add(t.Name(), !t.Failed())
			t.Logf("%s: %s in %s", t.Name(), map[bool]string{true: "FAILED", false: "passed"}[t.Failed()], time.Since(start).Round(time.Second))
		}()
		f(t, NewWithT(t))
	})
}

// TestFaults runs every trial in order; the webhook trial is last because it installs
// cluster-wide webhook configurations (removed at its end).
func TestFaults(t *testing.T) {
	if !enabled {
		t.Skip("the fault-injection suite runs with `make test-faults` (TILED_FAULTS=1)")
	}
	t.Run("StopDuringStampOut", testStopDuringStampOut)
	trial(t, "APIServerRestartMidReconcile", testAPIServerRestart)
	trial(t, "ExternalEdits", testExternalEdits)
	trial(t, "ProfileDeletedInUse", testProfileDeleted)
	trial(t, "ProfileBecomesConflicting", testProfileConflict)
	trial(t, "DatabaseSecretDisappears", testDatabaseSecret)
	trial(t, "RetentionBeamlinesRemoved", testRetentionBeamlines)
	trial(t, "RetentionClusterDeleted", testRetentionCluster)
	trial(t, "RestartWritesNothing", testRestartWritesNothing)
	trial(t, "ChildrenDeleted", testChildrenDeleted)
	trial(t, "BeamlineRemovedAndReadded", testBeamlineReadded)
	trial(t, "CachesFreedWithTheFleet", testCachesFreed)
	trial(t, "WebhookServerDownThenUp", testWebhookDown)
}
