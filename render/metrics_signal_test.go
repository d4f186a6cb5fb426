package render

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestMetricsSidecarStopsOnSIGTERM runs metrics.py serve as pid 1 of a PID namespace of its own, as
// the sidecar runs in its container, and sends it SIGTERM from outside, as the kubelet does: it
// must exit at once. Pid 1 gets no default action for a signal it has no handler for, so without
// one the sidecar ignored SIGTERM and every Tiled pod waited its whole grace period to stop.
func TestMetricsSidecarStopsOnSIGTERM(t *testing.T) {
	g := NewWithT(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a PID namespace (unshare --pid); CI runs as root")
	}
	unshare, err := exec.LookPath("unshare")
	g.Expect(err).NotTo(HaveOccurred(), "unshare (util-linux) is needed to run the sidecar as pid 1")
	python, err := exec.LookPath("python3")
	g.Expect(err).NotTo(HaveOccurred())

	dir := t.TempDir()
	script := filepath.Join(dir, "metrics.py")
	g.Expect(os.WriteFile(script, []byte(MetricsScript()), 0o644)).To(Succeed())
	// serve imports prometheus_client (in the Tiled image) only for its content type; what is tested
	// here is the signal, so a one-line stand-in takes the library's place on the path.
	g.Expect(os.WriteFile(filepath.Join(dir, "prometheus_client.py"), []byte("CONTENT_TYPE_LATEST = 'text/plain'\n"), 0o644)).To(Succeed())
	metricsDir := filepath.Join(dir, "metrics")
	g.Expect(os.Mkdir(metricsDir, 0o755)).To(Succeed())

	// unshare --fork execs the child in the new namespace; --kill-child is not used: the test must
	// see the child exit on its own. The child is the sidecar, pid 1 there.
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", python, script, "serve")
	cmd.Env = append(os.Environ(), "METRICS_DIR="+metricsDir, "METRICS_PORT=0", "METRICS_TOKEN=t", "PYTHONPATH="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	g.Expect(cmd.Start()).To(Succeed())
	var pid int // the sidecar's, as the host sees it: unshare's only child
	t.Cleanup(func() {
		// Killing unshare leaves its child running (and holding the output pipe): kill both.
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
	})

	g.Eventually(out.String, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("serving /metrics"))
	children, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = fmt.Sscan(string(children), &pid)
	g.Expect(err).NotTo(HaveOccurred(), "unshare's child: %q", children)
	g.Expect(syscall.Kill(pid, syscall.SIGTERM)).To(Succeed())

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		g.Expect(err).NotTo(HaveOccurred(), "%s", out.String())
	case <-time.After(5 * time.Second):
		t.Fatalf("metrics.py serve, pid 1 of its namespace, still runs 5 s after SIGTERM (a container would wait its grace period):\n%s", out.String())
	}
	g.Expect(out.String()).To(ContainSubstring("SIGTERM: stopped"))
}
