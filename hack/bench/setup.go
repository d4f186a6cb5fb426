package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// Setup records how a size was measured, printed with its figures by the report (docs/benchmarks.md
// asks that no figure appear without the setup it came from).
type Setup struct {
	// Date is when the measurement of this size started (UTC, RFC 3339).
	Date string `json:"date"`
	// Commit is the checked-out commit, with "-dirty" when the tree had uncommitted changes.
	Commit string `json:"commit"`
	// Flags are the harness's flags for this size (idle window, quiet period, phases skipped).
	Flags string `json:"flags"`
	// ControlPlane names the processes that ran beside the manager.
	ControlPlane string `json:"control_plane"`
	// Manager is how the manager ran: in the harness's process, and with which options.
	Manager string `json:"manager"`
	// Machine: CPU model and count, memory, kernel, Go version.
	Machine string `json:"machine"`
}

func recordSetup(flags string, mem containerMemory) Setup {
	return Setup{
		Date:   time.Now().UTC().Format(time.RFC3339),
		Commit: gitCommit(),
		Flags:  flags,
		ControlPlane: "kube-apiserver with an audit log (Metadata level) and etcd (" + controlPlaneVersion() + ", hack/controlplane.sh); " +
			"kube-controller-manager with " + strings.Join(kcmControllers, ", ") + "; " +
			"a static volume provisioner in the harness (a PersistentVolume per waiting claim); no kubelet, no scheduler (pods stay Pending)",
		Manager: "bin/manager (cmd/manager) in its own process, watching all namespaces, with " + strings.Join(managerFlags("NS", managerPorts{}), " ") +
			" and MEMORY_LIMIT=" + strconv.FormatInt(mem.limit, 10) + ", MEMORY_REQUEST=" + strconv.FormatInt(mem.request, 10) +
			" (the memory limit and request of config/manager/manager.yaml: the Go soft memory limit is steered between --memory-target-ratio, " +
			strconv.FormatFloat(operator.DefaultMemoryTargetRatio, 'g', -1, 64) + ", of the request and --memory-limit-ratio, " +
			strconv.FormatFloat(operator.DefaultMemoryLimitRatio, 'g', -1, 64) + ", of the limit, operator/memtarget); " +
			"ports and NS chosen per run",
		Machine: machine(),
	}
}

func gitCommit() string {
	root := testenv.RepoRoot()
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	// The run's own outputs (bench/: results and heap profiles, written size after size) do not
	// make the tree dirty.
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}

func controlPlaneVersion() string {
	dir, err := testenv.AssetsDir()
	if err != nil {
		return "unknown version"
	}
	parts := strings.Split(strings.TrimRight(dir, "/"), "/")
	return parts[len(parts)-1]
}

func machine() string {
	model := ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	memGiB := float64(procMemTotalKiB()) / (1 << 20)
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return strings.Join([]string{
		model, strings.TrimSpace(strings.Join([]string{itoa(runtime.NumCPU()), "CPUs"}, " ")),
		fmtGiB(memGiB) + " memory", "Linux " + kernel, runtime.Version(),
	}, ", ")
}
