package main

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// TestMakeRunWithoutACluster runs `make run`'s script where no cluster answers: it must start a
// local control plane, reach "operator running", serve the samples to kubectl through the printed
// kubeconfig, and on Ctrl-C (SIGINT to its process group) leave no process or file behind. On the
// way it logs no refused TLS handshake (nothing dials the webhook server before it has a
// certificate to present), and its banner says that pods do not start there and how to get a node.
func TestMakeRunWithoutACluster(t *testing.T) {
	g := NewWithT(t)
	kubectl, err := exec.LookPath("kubectl")
	g.Expect(err).NotTo(HaveOccurred(), "kubectl must be on PATH")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(testenv.RepoRoot(), "hack", "run.sh"))
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"),
		"METRICS_BIND_ADDRESS=0", "HEALTH_PROBE_BIND_ADDRESS=127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	cmd.Stderr = cmd.Stdout
	g.Expect(cmd.Start()).To(Succeed())
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()

	var kubeconfig string
	var seen []string
	running := false
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		line := scanner.Text()
		seen = append(seen, line)
		if k, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			kubeconfig = k
		}
		if line == "operator running" {
			running = true
			break
		}
	}
	g.Expect(running).To(BeTrue(), "never reached \"operator running\":\n%s", strings.Join(seen, "\n"))
	g.Expect(kubeconfig).NotTo(BeEmpty(), "no kubeconfig printed")
	var mu sync.Mutex
	later := []string{}
	go func() { // keep draining the output
		for scanner.Scan() {
			mu.Lock()
			later = append(later, scanner.Text())
			mu.Unlock()
		}
	}()
	banner := strings.Join(seen, "\n")
	g.Expect(banner).To(ContainSubstring("no node"), "the banner says pods cannot start")
	g.Expect(banner).To(ContainSubstring("make cluster"), "the banner says how to get a real node")

	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "tiledprofiles").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("nsls2-defaults"))

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	u, err := url.Parse(cfg.Host)
	g.Expect(err).NotTo(HaveOccurred())

	// The samples were admitted by the webhooks, the instances expanded: a few seconds of the operator
	// at work, and no refused TLS handshake in all it printed.
	time.Sleep(3 * time.Second)
	mu.Lock()
	all := append(append([]string{}, seen...), later...)
	mu.Unlock()
	for _, line := range all {
		g.Expect(line).NotTo(ContainSubstring("TLS handshake error"), strings.Join(all, "\n"))
	}

	// Ctrl-C: the terminal sends SIGINT to the whole foreground process group.
	g.Expect(syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("make run exited after Ctrl-C: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("make run did not stop within 60s of Ctrl-C")
	}
	// Nothing is left: the apiserver's port is closed, the kubeconfig and its folder are gone, and no
	// process of the group remains.
	_, err = net.DialTimeout("tcp", u.Host, time.Second)
	g.Expect(err).To(HaveOccurred(), "the apiserver at %s still answers after Ctrl-C", u.Host)
	_, err = os.Stat(kubeconfig)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "kubeconfig %s left behind", kubeconfig)
	g.Eventually(func() error { return syscall.Kill(-cmd.Process.Pid, 0) }, 10*time.Second).Should(MatchError(syscall.ESRCH), "processes of make run remain")
}
