package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/bluesky/tiled-operator/hack/testenv"
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

// Manager options of the measured operator (see measure); Setup.Manager describes them.
const managerSetup = "controllers.NewManager in the harness's process (its RSS is the process's): one watched namespace, " +
	"leader election off, webhooks off, metrics and health probes off, GOMEMLIMIT unset, GOGC default"

func recordSetup(flags string) Setup {
	return Setup{
		Date:         time.Now().UTC().Format(time.RFC3339),
		Commit:       gitCommit(),
		Flags:        flags,
		ControlPlane: "kube-apiserver and etcd (" + controlPlaneVersion() + ", hack/controlplane.sh), no kube-controller-manager, no kubelet (no pod runs)",
		Manager:      managerSetup,
		Machine:      machine(),
	}
}

func gitCommit() string {
	root := testenv.RepoRoot()
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
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
