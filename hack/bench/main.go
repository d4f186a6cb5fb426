// Command bench measures the operator's API traffic and speed on a real control plane (kube-apiserver
// and etcd, built by hack/controlplane.sh) for fleets of NSLS-II-like beamlines, side by side with a
// plain server-side-apply floor and a naive baseline controller, and writes bench/results.json.
//
//	go run ./hack/bench                        # N = 30, 300, 1000; ten minutes idle per N
//	go run ./hack/bench -n 30 -idle 60s
//
// Each N runs in a child process of its own (this program, re-executed with -child), so that the
// process's peak RSS (VmHWM) is that of one fleet size. docs/benchmarks.md explains every figure.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bluesky/tiled-operator/test/support/testenv"
)

func main() {
	sizes := flag.String("n", "30,300,1000", "comma-separated fleet sizes (instances)")
	idle := flag.Duration("idle", 10*time.Minute, "length of the idle phase at the sizes -idle-sizes names")
	idleSizes := flag.String("idle-sizes", "1000", "comma-separated sizes whose idle phase lasts -idle; the others idle for -short-idle")
	shortIdle := flag.Duration("short-idle", time.Minute, "length of the idle phase at other sizes")
	quiet := flag.Duration("quiet", 2*time.Second, "a phase ends when the controller has sent no request for this long")
	timeout := flag.Duration("timeout", 30*time.Minute, "longest wait for any one phase")
	out := flag.String("out", filepath.Join(testenv.RepoRoot(), "bench", "results.json"), "where to write the JSON results (empty: nowhere)")
	heapProfile := flag.String("heap-profile", "", "write Go heap profiles of the operator's phases: PATH.N at their end (after a GC) and PATH.N.peak when the heap in use was highest")
	cpuProfile := flag.String("cpu-profile", "", "write CPU profiles of the manager and kube-apiserver over the first -cpu-window of the stamp-out (PATH.N.stampout.manager, .apiserver) and of kube-apiserver during the floor at the operator's concurrency (PATH.N.floor.apiserver)")
	cpuWindow := flag.Duration("cpu-window", 30*time.Second, "how long each -cpu-profile profile lasts")
	trials := flag.Int("trials", 5, "paired runs of the floor (at the operator's concurrency) and the stamp-out at each size of one cluster or less, each on fresh control planes; converge/floor is the median of their ratios (the first pair is the full run's own)")
	skip := flag.String("skip", "", "comma-separated phases to leave out: idle, floor, naive (for quick trials; results then lack them)")
	child := flag.Bool("child", false, "internal: measure one size and print its JSON result on stdout")
	markdown := flag.String("markdown", "", "print the table of an existing results file as Markdown and exit")
	reportPage := flag.String("report", "", "write this page (docs/benchmarks-figures.md) from the results file -out names, and exit")
	flag.Parse()
	if *markdown != "" {
		data, err := os.ReadFile(*markdown)
		if err != nil {
			fail(err)
		}
		rs, err := parseResults(data)
		if err != nil {
			fail(err)
		}
		writeTable(os.Stdout, rs, true)
		return
	}
	if *reportPage != "" {
		src := *out
		if rel, err := filepath.Rel(testenv.RepoRoot(), src); err == nil && !strings.HasPrefix(rel, "..") && filepath.IsAbs(src) {
			src = rel
		}
		if err := writeReport(src, *reportPage); err != nil {
			fail(err)
		}
		return
	}
	ctrl.SetLogger(logr.Discard())

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	o := options{idle: *idle, quiet: *quiet, timeout: *timeout, skip: map[string]bool{}, heapProfile: *heapProfile, cpuProfile: *cpuProfile, cpuWindow: *cpuWindow, trials: *trials,
		flags: fmt.Sprintf("-idle %s -quiet %s -trials %d -skip %q", *idle, *quiet, *trials, *skip)}
	for _, s := range strings.Split(*skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.skip[s] = true
		}
	}

	if *child {
		n, err := strconv.Atoi(*sizes)
		if err != nil {
			fail(fmt.Errorf("-child takes one size: %w", err))
		}
		r, err := measure(ctx, n, o, os.Stderr)
		if err != nil {
			fail(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			fail(err)
		}
		return
	}

	if _, err := testenv.AssetsDir(); err != nil {
		fail(err)
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	var results []*Result
	for _, s := range strings.Split(*sizes, ",") {
		s = strings.TrimSpace(s)
		if _, err := strconv.Atoi(s); err != nil {
			fail(fmt.Errorf("bad size %q", s))
		}
		sizeIdle := *shortIdle
		for _, l := range strings.Split(*idleSizes, ",") {
			if strings.TrimSpace(l) == s {
				sizeIdle = *idle
			}
		}
		args := []string{"-child", "-n", s, "-idle", sizeIdle.String(), "-quiet", quiet.String(), "-timeout", timeout.String(), "-trials", strconv.Itoa(*trials), "-skip", *skip}
		if *heapProfile != "" {
			args = append(args, "-heap-profile", *heapProfile+"."+s)
		}
		if *cpuProfile != "" {
			args = append(args, "-cpu-profile", *cpuProfile+"."+s, "-cpu-window", cpuWindow.String())
		}
		cmd := exec.CommandContext(ctx, self, args...)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("measuring N=%s: %w", s, err))
		}
		r := &Result{}
		if err := json.Unmarshal(stdout.Bytes(), r); err != nil {
			fail(fmt.Errorf("reading the result of N=%s: %w\n%s", s, err, stdout.String()))
		}
		results = append(results, r)
	}
	writeTable(os.Stdout, results, false)
	if *out != "" {
		// Sizes measured now replace those of an earlier run; other sizes are kept, so that
		// `make bench N=30` updates one entry of bench/results.json.
		merged := results
		if old, err := os.ReadFile(*out); err == nil {
			var prev []*Result
			if json.Unmarshal(old, &prev) == nil {
				merged = mergeResults(prev, results)
			}
		}
		data, err := json.MarshalIndent(merged, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("\nwrote %s\n", *out)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

func parseResults(data []byte) ([]*Result, error) {
	var rs []*Result
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, err
	}
	return rs, nil
}

// writeTable prints one column per fleet size, aligned for a terminal or as a Markdown table.
// Phases a run left out (-skip) print as "—".
func writeTable(w io.Writer, rs []*Result, md bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	first := true
	row := func(name string, f func(*Result) string) {
		if md {
			cells := []string{strings.TrimSpace(name)}
			if strings.HasPrefix(name, "  ") {
				cells[0] = "&nbsp;&nbsp;" + cells[0]
			}
			for _, r := range rs {
				cells = append(cells, f(r))
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
			if first {
				fmt.Fprintf(w, "|%s\n", strings.Repeat(" ---: |", len(cells)))
				first = false
			}
			return
		}
		fmt.Fprint(tw, name+"\t")
		for _, r := range rs {
			fmt.Fprint(tw, f(r)+"\t")
		}
		fmt.Fprintln(tw)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	measured := func(ok func(*Result) bool, f func(*Result) string) func(*Result) string {
		return func(r *Result) string {
			if !ok(r) {
				return "—"
			}
			return f(r)
		}
	}
	row("instances (N)", func(r *Result) string { return strconv.Itoa(r.N) })
	row("  clusters", func(r *Result) string { return strconv.Itoa(r.Clusters) })
	row("objects created", func(r *Result) string { return strconv.Itoa(r.ObjectsCreated) })
	row("stamp-out: operator's requests, apiserver's count", func(r *Result) string { return i(r.StampoutAuditRequests) })
	row("  requests per object created", func(r *Result) string { return fmt.Sprintf("%.2f", r.RequestsPerObject) })
	row("  writes, operator's count", func(r *Result) string { return i(r.StampoutWrites) })
	row("  object / status / event / lease writes", func(r *Result) string {
		return fmt.Sprintf("%d / %d / %d / %d", r.StampoutObjectWrites, r.StampoutStatusWrites, r.StampoutEventWrites, r.StampoutLeaseWrites)
	})
	row("  writes, apiserver's count", func(r *Result) string { return i(r.StampoutAuditWrites) })
	row("  writes per object created", func(r *Result) string { return fmt.Sprintf("%.3f", r.WritesPerObject) })
	row("  kube-controller-manager's writes", func(r *Result) string { return i(r.StampoutKCMWrites) })
	row("reads after cache sync", func(r *Result) string { return i(r.ReadsAfterSync) })
	row("converge (s)", func(r *Result) string { return f2(r.ConvergeSeconds) })
	row("floor at the operator's concurrency (s)", func(r *Result) string {
		return fmt.Sprintf("%.2f (%d)", r.FloorSeconds, r.FloorConcurrency)
	})
	row("  converge / floor", func(r *Result) string { return f2(r.ConvergeRatio) })
	row("  converge / floor, median of paired trials", func(r *Result) string {
		if len(r.ConvergeTrials) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f (%s)", r.ConvergeRatioMedian, trialRatios(r.ConvergeTrials))
	})
	row("floor, best concurrency (s)", func(r *Result) string {
		return fmt.Sprintf("%.2f (%d)", r.FloorBestSeconds, r.FloorBestConcurrency)
	})
	row("  converge / best floor", func(r *Result) string { return f2(r.ConvergeBestRatio) })
	row("stamp-out CPU by process (s)", func(r *Result) string { return cpuSummary(r.StampoutCPU) })
	row("floor CPU by process (s)", func(r *Result) string { return cpuSummary(r.FloorCPU) })
	row("  CPU, stamp-out / floor", func(r *Result) string {
		if len(r.StampoutCPU) == 0 || len(r.FloorCPU) == 0 {
			return "—"
		}
		return f2(cpuTotal(r.StampoutCPU) / cpuTotal(r.FloorCPU))
	})
	idle := func(r *Result) bool { return r.IdleSeconds > 0 }
	row("idle window (s)", measured(idle, func(r *Result) string { return fmt.Sprintf("%.0f", r.IdleSeconds) }))
	row("  Lease renewals", measured(idle, func(r *Result) string { return i(r.IdleLease) }))
	row("  watch renewals", measured(idle, func(r *Result) string { return i(r.IdleWatches) }))
	row("  everything else", measured(idle, func(r *Result) string { return i(r.IdleOther) }))
	row("profile change: requests (apiserver)", func(r *Result) string { return i(r.ProfileChangeAuditRequests) })
	row("  writes (operator)", func(r *Result) string { return i(r.ProfileChangeWrites) })
	row("  objects changed", func(r *Result) string { return strconv.Itoa(r.ProfileChangeObjectsChanged) })
	row("  requests per changed object", func(r *Result) string { return f2(r.RequestsPerChangedObject) })
	row("  seconds", func(r *Result) string { return f2(r.ProfileChangeSeconds) })
	row("override change: requests (apiserver)", func(r *Result) string { return i(r.OverrideAuditRequests) })
	row("  objects changed", func(r *Result) string { return strconv.Itoa(len(r.OverrideObjectsChanged)) })
	row("restart: requests until quiet", func(r *Result) string { return i(r.RestartRequests) })
	row("  object writes", func(r *Result) string { return i(r.RestartObjectWrites) })
	row("  seconds to quiet", func(r *Result) string { return f2(r.RestartSeconds) })
	row("failover (leader killed): seconds to a new leader", func(r *Result) string { return f1(r.FailoverSeconds) })
	row("  requests until quiet", func(r *Result) string { return i(r.FailoverRequests) })
	row("  object writes", func(r *Result) string { return i(r.FailoverObjectWrites) })
	row("operator's requests, its count / apiserver's", func(r *Result) string {
		return fmt.Sprintf("%d / %d", r.OperatorCountTotal, r.AuditCountTotal)
	})
	naive := func(r *Result) bool { return r.NaiveRequests > 0 }
	row("naive baseline requests", measured(naive, func(r *Result) string { return i(r.NaiveRequests) }))
	row("engine: µs per instance", func(r *Result) string { return f1(r.ExpandNsPerInstance / 1000) })
	row("  allocs per instance", func(r *Result) string { return fmt.Sprintf("%.0f", r.ExpandAllocsPerInst) })
	row("peak RSS of the manager, VmHWM (MiB)", func(r *Result) string { return f1(r.RSSMiB) })
	row("  anonymous part, sampled peak (MiB)", func(r *Result) string { return f1(r.RSSAnonPeakMiB) })
	row("  file-backed part (the binary's pages) at the end (MiB)", func(r *Result) string { return f1(r.RSSFileMiB) })
	row("  after a restart (MiB)", func(r *Result) string { return f1(r.RestartRSSMiB) })
	row("  container memory limit (MiB)", func(r *Result) string { return fmt.Sprintf("%.0f", r.MemoryLimitMiB) })
	row("  container memory request (MiB)", func(r *Result) string { return fmt.Sprintf("%.0f", r.MemoryRequestMiB) })
	_ = tw.Flush()
}

// mergeResults keeps the entries of prev whose size was not measured again, and orders by size.
func mergeResults(prev, now []*Result) []*Result {
	byN := map[int]*Result{}
	for _, r := range prev {
		byN[r.N] = r
	}
	for _, r := range now {
		byN[r.N] = r
	}
	out := make([]*Result, 0, len(byN))
	for _, r := range byN {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N < out[j].N })
	return out
}
