package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestReadProcessCPU: the harness and its children are read from /proc/PID/stat (utime + stime in
// clock ticks), other processes are left out, a name with spaces and parentheses is read whole, and
// the kernel's cut name of kube-controller-manager is given back in full.
func TestReadProcessCPU(t *testing.T) {
	g := NewWithT(t)
	proc := t.TempDir()
	stat := func(pid, line string) {
		g.Expect(os.MkdirAll(filepath.Join(proc, pid), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(line), 0o644)).To(Succeed())
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	stat("10", "10 (bench) S 1 10 10 0 -1 0 0 0 0 0 150 50 0 0 20 0")
	stat("11", "11 (kube-apiserver) S 10 10 10 0 -1 0 0 0 0 0 4000 1000 0 0 20 0")
	stat("12", "12 (kube-controller) S 10 10 10 0 -1 0 0 0 0 0 300 100 0 0 20 0")
	stat("13", "13 (odd (name) x) S 10 10 10 0 -1 0 0 0 0 0 7 3 0 0 20 0")
	stat("14", "14 (sshd) S 1 14 14 0 -1 0 0 0 0 0 9999 9999 0 0 20 0")
	before := readProcessCPUFrom(proc, 10)
	g.Expect(before).To(Equal(processCPU{"harness": 2, "kube-apiserver": 50, "kube-controller": 4, "odd (name) x": 0.1}))

	stat("11", "11 (kube-apiserver) S 10 10 10 0 -1 0 0 0 0 0 5000 1500 0 0 20 0")
	stat("15", "15 (manager) S 10 10 10 0 -1 0 0 0 0 0 200 100 0 0 20 0")
	phase := readProcessCPUFrom(proc, 10).since(before)
	g.Expect(phase).To(Equal(map[string]float64{"kube-apiserver": 15, "manager": 3}), "processes that used no CPU are left out; a new one counts from its start")
	g.Expect(cpuSummary(phase)).To(Equal("kube-apiserver 15.0, manager 3.0; total 18.0"))
	g.Expect(cpuSummary(nil)).To(Equal("—"))

	stat("12", "12 (kube-controller) S 10 10 10 0 -1 0 0 0 0 0 400 100 0 0 20 0")
	g.Expect(readProcessCPUFrom(proc, 10).since(before)).To(HaveKeyWithValue("kube-controller-manager", 1.0))
}

// TestCPUTotalIsTheSameEveryRun: the total does not depend on a map's iteration order (the
// generated report once differed in its last digit between two runs over the same results).
func TestCPUTotalIsTheSameEveryRun(t *testing.T) {
	g := NewWithT(t)
	m := map[string]float64{}
	for i := range 40 {
		m[fmt.Sprintf("p%02d", i)] = 0.1 * float64(i*i%17+1) / 3
	}
	first := cpuTotal(m)
	for range 200 {
		g.Expect(cpuTotal(m)).To(Equal(first))
	}
}
