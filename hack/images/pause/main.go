// Command pause is the sandbox ("pause") container of the local node: it holds the pod's namespaces,
// reaps the zombies of a shared PID namespace, and exits 0 on SIGTERM or SIGINT. Built static
// (CGO_ENABLED=0) for a FROM-scratch image, docker.io/local/pause:3.10 (hack/images/build.sh).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (tiled-operator hack/images)")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", s)
		os.Exit(0)
	}
}

// reap collects every exited child without blocking: as PID 1 of a shared PID namespace, orphans
// of the pod's containers are re-parented to this process.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
