//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A NetworkPolicy implementation admits a new pod's address asynchronously, after the pod has its
// IP: kube-router's next full sync adds it to the sets of the policies whose peers select it.
// Kubernetes documents the same of every implementation (a starting pod may lack connectivity the
// policies grant it), and a client that connects at once may be refused by a policy that admits it
// (seen: case 14's traffic pod refused at its first request). So every client pod of the suite
// starts with an init container, settleContainer, that waits to be released, and the releaser below
// releases it once kube-router has finished a full sync that began after the pod had its IP: from
// then on the node's rules hold its address. It replaces a fixed three-second wait per pod.

const (
	// settleContainer is the client pods' init container that waits for its release.
	settleContainer = "network-policies"
	// settleFile is what the releaser creates in it (kubectl exec) to let the pod go on.
	settleFile = "/tmp/e2e-released"
	// settleTimeoutSeconds bounds the init container's wait: a pod the suite never releases fails
	// with a message naming the releaser instead of hanging its case.
	settleTimeoutSeconds = 300
	// settlePoll is how often the releaser looks for pods to release and kube-router's log.
	settlePoll = 100 * time.Millisecond
)

// settleInitContainerYAML is the init container of the client pods (pythonPodYAML), indented for a
// pod's spec.
func settleInitContainerYAML(image string) string {
	return fmt.Sprintf(`  initContainers:
  - name: %s
    image: %s
    imagePullPolicy: IfNotPresent
    command:
    - python
    - -c
    - |
      import os, sys, time
      deadline = time.monotonic() + %d
      while not os.path.exists(%q):
          if time.monotonic() > deadline:
              sys.exit("the e2e suite did not release this pod: no kube-router sync seen after it had its IP (test/e2e/netpolsettle_test.go)")
          time.sleep(0.05)
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
`, settleContainer, image, settleTimeoutSeconds, settleFile)
}

// kubeRouterLog is kube-router's log on the node (hack/node/cluster.sh starts it with --v=1, which
// logs each full sync's start, with its version, the start's Unix time in nanoseconds, and end).
func kubeRouterLog() string { return filepath.Join(e.state, "logs", "kube-router.log") }

const (
	syncStartPrefix = "Starting sync of iptables with version: "
	syncEndMarker   = "sync iptables took "
)

// lastSyncDone returns the start (Unix nanoseconds) of the latest full sync kube-router logged as
// finished, reading the log's tail.
func lastSyncDone() (int64, error) {
	var started, done int64
	err := scanTail(kubeRouterLog(), func(b []byte) {
		line := string(b)
		if i := strings.Index(line, syncStartPrefix); i >= 0 {
			if v, err := strconv.ParseInt(strings.TrimSpace(line[i+len(syncStartPrefix):]), 10, 64); err == nil {
				started = v
			}
		} else if strings.Contains(line, syncEndMarker) && started > 0 {
			done = started
		}
	})
	return done, err
}

// checkKubeRouterLogsSyncs fails the suite at its start when kube-router's log holds no finished
// sync: every client pod would wait for a release that never comes.
func checkKubeRouterLogsSyncs() error {
	done, err := lastSyncDone()
	if err != nil {
		return fmt.Errorf("kube-router's log %s: %w", kubeRouterLog(), err)
	}
	if done == 0 {
		return fmt.Errorf("kube-router's log %s shows no finished sync (%q then %q): start it with --v=1 (hack/node/cluster.sh)",
			kubeRouterLog(), syncStartPrefix, syncEndMarker)
	}
	return nil
}

// releaser releases the client pods (see above) until stop is closed.
func releaser(stop <-chan struct{}) {
	var mu sync.Mutex
	seen := map[types.UID]time.Time{} // when the releaser first saw the pod with its IP
	released := map[types.UID]bool{}
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var pods corev1.PodList
		if err := cl.List(context.Background(), &pods); err != nil {
			continue
		}
		done, _ := lastSyncDone()
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.PodIP == "" || !settling(p) {
				continue
			}
			mu.Lock()
			at, ok := seen[p.UID]
			if !ok {
				at = time.Now()
				seen[p.UID] = at
			}
			free := !released[p.UID] && done > at.UnixNano()
			if free {
				released[p.UID] = true
			}
			mu.Unlock()
			if free {
				go func(uid types.UID, ns, name string) {
					if err := release(ns, name); err != nil {
						// Tried again at the next poll, while the container still waits.
						fmt.Fprintf(os.Stderr, "e2e: releasing pod %s/%s: %v\n", ns, name, err)
						mu.Lock()
						delete(released, uid)
						mu.Unlock()
					}
				}(p.UID, p.Namespace, p.Name)
			}
		}
	}
}

// settling says whether the pod's settle container runs.
func settling(p *corev1.Pod) bool {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == settleContainer {
			return cs.State.Running != nil
		}
	}
	return false
}

// release creates the settle file in the pod's settle container.
func release(ns, name string) error {
	_, err := kubectl(nil, "-n", ns, "exec", name, "-c", settleContainer, "--", "python", "-c", "open("+strconv.Quote(settleFile)+", 'w').close()")
	return err
}
