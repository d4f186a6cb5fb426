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
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bluesky/tiled-operator/hack/testenv"
)

func main() {
	sizes := flag.String("n", "30,300,1000", "comma-separated fleet sizes (instances)")
	idle := flag.Duration("idle", 10*time.Minute, "length of the idle phase")
	quiet := flag.Duration("quiet", 2*time.Second, "a phase ends when the controller has sent no request for this long")
	timeout := flag.Duration("timeout", 30*time.Minute, "longest wait for any one phase")
	out := flag.String("out", filepath.Join(testenv.RepoRoot(), "bench", "results.json"), "where to write the JSON results (empty: nowhere)")
	heapProfile := flag.String("heap-profile", "", "write Go heap profiles of the operator's phases: PATH.N at their end (after a GC) and PATH.N.peak when the heap in use was highest")
	cpuProfile := flag.String("cpu-profile", "", "write a CPU profile of the stamp-out phase to this file (-child runs of one size)")
	skip := flag.String("skip", "", "comma-separated phases to leave out: idle, naive (for quick trials; results then lack them)")
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

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	o := options{idle: *idle, quiet: *quiet, timeout: *timeout, skip: map[string]bool{}, heapProfile: *heapProfile, cpuProfile: *cpuProfile,
		flags: fmt.Sprintf("-idle %s -quiet %s -skip %q", *idle, *quiet, *skip)}
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
		args := []string{"-child", "-n", s, "-idle", idle.String(), "-quiet", quiet.String(), "-timeout", timeout.String(), "-skip", *skip}
		if *heapProfile != "" {
			args = append(args, "-heap-profile", *heapProfile+"."+s)
		}
		if *cpuProfile != "" {
			args = append(args, "-cpu-profile", *cpuProfile+"."+s)
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
	row("instances (N)", func(r *Result) string { return strconv.Itoa(r.N) })
	row("objects created", func(r *Result) string { return strconv.Itoa(r.ObjectsCreated) })
	row("stamp-out writes", func(r *Result) string { return i(r.StampoutWrites) })
	row("  object / status / event writes", func(r *Result) string {
		return fmt.Sprintf("%d / %d / %d", r.StampoutObjectWrites, r.StampoutStatusWrites, r.StampoutEventWrites)
	})
	row("  writes per object created", func(r *Result) string { return fmt.Sprintf("%.3f", r.WritesPerObject) })
	row("reads after cache sync", func(r *Result) string { return i(r.ReadsAfterSync) })
	row("converge (s)", func(r *Result) string { return fmt.Sprintf("%.2f", r.ConvergeSeconds) })
	row("floor: plain SSA loop (s)", func(r *Result) string { return fmt.Sprintf("%.2f", r.FloorSeconds) })
	row("  converge / floor", func(r *Result) string { return fmt.Sprintf("%.2f", r.ConvergeRatio) })
	row("steady-state writes (full resync)", func(r *Result) string { return i(r.SteadyWrites) })
	row("idle requests (all verbs)", func(r *Result) string { return i(r.IdleRequests) })
	row("  of which WATCH re-establishments", func(r *Result) string { return i(r.IdleWatches) })
	row("  idle window (s)", func(r *Result) string { return fmt.Sprintf("%.0f", r.IdleSeconds) })
	row("profile change: writes", func(r *Result) string { return i(r.ProfileChangeWrites) })
	row("  objects changed", func(r *Result) string { return strconv.Itoa(r.ProfileChangeObjectsChanged) })
	row("override change: writes", func(r *Result) string { return i(r.OverrideWrites) })
	row("  objects changed", func(r *Result) string { return strconv.Itoa(len(r.OverrideObjectsChanged)) })
	row("operator requests (4 phases)", func(r *Result) string { return i(r.OperatorRequests) })
	naive := func(f func(*Result) string) func(*Result) string {
		return func(r *Result) string {
			if r.NaiveRequests == 0 {
				return "—"
			}
			return f(r)
		}
	}
	row("naive baseline requests", naive(func(r *Result) string { return i(r.NaiveRequests) }))
	row("  naive / operator", naive(func(r *Result) string { return fmt.Sprintf("%.1f", r.NaiveToOperatorRatio) }))
	row("  naive converge (s)", naive(func(r *Result) string { return fmt.Sprintf("%.2f", r.NaiveConvergeSeconds) }))
	row("engine: ns per instance", func(r *Result) string { return fmt.Sprintf("%.0f", r.ExpandNsPerInstance) })
	row("  allocs per instance", func(r *Result) string { return fmt.Sprintf("%.0f", r.ExpandAllocsPerInst) })
	row("peak RSS, VmHWM (MiB)", func(r *Result) string { return fmt.Sprintf("%.1f", r.RSSMiB) })
	row("  RSS before the manager (MiB)", func(r *Result) string { return fmt.Sprintf("%.1f", r.RSSBeforeManagerMiB) })
	row("  Go heap in use, peak (MiB)", func(r *Result) string { return fmt.Sprintf("%.1f", r.GoHeapPeakMiB) })
	row("  Go runtime Sys, peak (MiB)", func(r *Result) string { return fmt.Sprintf("%.1f", r.GoSysPeakMiB) })
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
