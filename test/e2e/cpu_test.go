//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The node has two shared cores and the suite runs cases side by side, so where its minutes go is
// mostly where the CPU goes. cpuSampler measures it while the suite runs: each pod's CPU from its
// cgroup (kubelet's cgroupRoot is the node's name: /sys/fs/cgroup/cpuacct/<node>/kubepods), summed
// by namespace; each node process's (kube-apiserver, etcd, kubelet, containerd, ...: $STATE/pids)
// from /proc; the suite's own; and the machine's busy time from /proc/stat. bench/e2e.json keeps
// the totals (Figures.CPU) and the report prints them beside the cases.

// cpuSamplePeriod is how often the sampler reads the counters. A pod's CPU is the largest value
// read before it ended, so a pod deleted between two samples loses at most a period of use.
const cpuSamplePeriod = 5 * time.Second

type cpuSampler struct {
	stop chan struct{}
	done sync.WaitGroup

	mu        sync.Mutex
	podNS     map[string]string  // pod UID -> namespace
	podName   map[string]string  // pod UID -> name
	podCPU    map[string]float64 // pod UID -> most CPU seconds read
	procCPU   map[string]float64 // node process name -> most CPU seconds read
	busy0     float64            // machine busy seconds at the start
	busy      float64
	start     time.Time
	end       time.Time
	cgroupDir string
}

func startCPUSampler() *cpuSampler {
	s := &cpuSampler{
		stop:      make(chan struct{}),
		podNS:     map[string]string{},
		podName:   map[string]string{},
		podCPU:    map[string]float64{},
		procCPU:   map[string]float64{},
		start:     time.Now(),
		cgroupDir: filepath.Join("/sys/fs/cgroup/cpuacct", os.Getenv("NETNS"), "kubepods"),
	}
	s.busy0, _ = machineBusySeconds()
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(cpuSamplePeriod)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *cpuSampler) sample() {
	var pods corev1.PodList
	listed := cl.List(context.Background(), &pods) == nil
	cg := podCgroupCPU(s.cgroupDir)
	procs := nodeProcessCPU()
	busy, _ := machineBusySeconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	if listed {
		for _, p := range pods.Items {
			s.podNS[string(p.UID)] = p.Namespace
			s.podName[string(p.UID)] = p.Name
		}
	}
	for uid, v := range cg {
		s.podCPU[uid] = max(s.podCPU[uid], v)
	}
	for name, v := range procs {
		s.procCPU[name] = max(s.procCPU[name], v)
	}
	s.busy, s.end = busy, time.Now()
}

// finish stops the sampler after a last sample and returns what it measured.
func (s *cpuSampler) finish() *CPUUse {
	close(s.stop)
	s.done.Wait()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	u := &CPUUse{
		WallSeconds:        s.end.Sub(s.start).Seconds(),
		MachineBusySeconds: s.busy - s.busy0,
		Namespaces:         map[string]float64{},
		Processes:          map[string]float64{},
	}
	var pods []podCPU
	for uid, v := range s.podCPU {
		ns := s.podNS[uid]
		if ns == "" {
			ns = "(pod not listed)"
		}
		u.Namespaces[ns] += v
		u.PodSeconds += v
		pods = append(pods, podCPU{name: ns + "/" + s.podName[uid], seconds: v})
	}
	// The pods that used the most, by name (a StatefulSet's pod recreated under one name adds up).
	byName := map[string]float64{}
	for _, p := range pods {
		byName[p.name] += p.seconds
	}
	u.TopPods = topN(byName, cpuTopPods)
	for name, v := range s.procCPU {
		u.Processes[name] = v
	}
	return u
}

// cpuTopPods is how many of the pods that used the most CPU bench/e2e.json names.
const cpuTopPods = 15

type podCPU struct {
	name    string
	seconds float64
}

// podCgroupCPU reads cpuacct.usage (nanoseconds) of every pod cgroup under dir (kubepods, and its
// burstable and besteffort classes), by pod UID.
func podCgroupCPU(dir string) map[string]float64 {
	out := map[string]float64{}
	for _, class := range []string{"", "burstable", "besteffort"} {
		entries, err := os.ReadDir(filepath.Join(dir, class))
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() || !strings.HasPrefix(name, "pod") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, class, name, "cpuacct.usage"))
			if err != nil {
				continue
			}
			if v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil {
				out[strings.TrimPrefix(name, "pod")] = v / 1e9
			}
		}
	}
	return out
}

// nodeProcessCPU reads the user and system CPU seconds (children included) of the node's processes
// ($STATE/pids/<name>: "<pid> <binary>") and of the suite itself.
func nodeProcessCPU() map[string]float64 {
	out := map[string]float64{}
	if v, ok := procCPUSeconds("self"); ok {
		out["e2e suite"] = v
	}
	entries, _ := os.ReadDir(filepath.Join(e.state, "pids"))
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(e.state, "pids", en.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		if v, ok := procCPUSeconds(f[0]); ok {
			out[en.Name()] = v
		}
	}
	return out
}

// procCPUSeconds is utime+stime+cutime+cstime of /proc/<pid>/stat, in seconds.
func procCPUSeconds(pid string) (float64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, false
	}
	return parseProcStat(string(b))
}

// machineBusySeconds is the machine's CPU time not idle or waiting for I/O, from /proc/stat.
func machineBusySeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(string(b))
}
