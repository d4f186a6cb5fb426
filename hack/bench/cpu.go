package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's CPU times (100 on Linux).
const clockTicks = 100

// processCPU is the CPU time (user and system, in seconds) used so far by the harness and each of
// the processes it started — kube-apiserver, etcd, kube-controller-manager, the manager replicas —
// by command name. A phase's share is the difference of two readings.
type processCPU map[string]float64

// readProcessCPU reads /proc for the harness process and its children.
func readProcessCPU() processCPU { return readProcessCPUFrom("/proc", os.Getpid()) }

// readProcessCPUFrom reads a /proc tree for the process self and its children.
func readProcessCPUFrom(proc string, self int) processCPU {
	out := processCPU{}
	if t, ok := procTicks(filepath.Join(proc, strconv.Itoa(self), "stat")); ok {
		out["harness"] += t.cpu
	}
	stats, _ := filepath.Glob(filepath.Join(proc, "[0-9]*", "stat"))
	for _, p := range stats {
		t, ok := procTicks(p)
		if !ok || t.ppid != self {
			continue
		}
		out[t.comm] += t.cpu
	}
	return out
}

type procStat struct {
	comm string
	ppid int
	cpu  float64
}

// procTicks parses /proc/PID/stat: the command name, the parent, and utime+stime in seconds.
func procTicks(path string) (procStat, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, false
	}
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	fields := strings.Fields(s[closing+1:])
	// After the name: state(0) ppid(1) ... utime(11) stime(12).
	if len(fields) < 13 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(fields[1])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return procStat{comm: s[open+1 : closing], ppid: ppid, cpu: (utime + stime) / clockTicks}, true
}

// since is the CPU each process used between the reading before and this one. The kernel cuts
// command names to 15 bytes; they are given their full names.
func (now processCPU) since(before processCPU) map[string]float64 {
	full := map[string]string{"kube-controller": "kube-controller-manager"}
	out := map[string]float64{}
	for name, v := range now {
		if d := v - before[name]; d > 0 {
			if f, ok := full[name]; ok {
				name = f
			}
			out[name] += d
		}
	}
	return out
}

// cpuSummary formats a phase's CPU seconds by process, largest first, with the total:
// "kube-apiserver 55.1, manager 19.8, …; total 97.0" ("—" when not measured).
func cpuSummary(m map[string]float64) string {
	if len(m) == 0 {
		return "—"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	total := cpuTotal(m)
	sort.Slice(names, func(i, j int) bool {
		return m[names[i]] > m[names[j]] || m[names[i]] == m[names[j]] && names[i] < names[j]
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f", n, m[n]))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; total %.1f", total)
}

// cpuTotal sums a phase's CPU over its processes in the order of their names: a float sum
// depends on its order, and a map's order changes from run to run, so summing in map order made
// the generated report differ in its last digit between two runs over the same results.
func cpuTotal(m map[string]float64) float64 {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	t := 0.0
	for _, n := range names {
		t += m[n]
	}
	return t
}
