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
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A NetworkPolicy implementation admits a new pod's address asynchronously, after the pod has its
// IP: kube-router's next full sync adds it to the sets of the policies whose peers select it.
// Kubernetes documents the same of every implementation (a starting pod may lack connectivity the
// policies grant it), and a client that connects at once may be refused by a policy that admits it
// (seen: case 14's traffic pod refused at its first request). So every client pod of the suite
// starts with an init container, settleContainer, that waits to be released, and the releaser below
// releases it once kube-router has finished a full sync that began after the pod had its IP: from
// then on the node's rules hold its address. It replaces a fixed three-second wait per pod.
//
// kube-router syncs when a pod's IP, phase or labels change, and otherwise only every five minutes.
// The sync the pod's IP caused may have begun before the releaser saw the pod (it looks once the
// settle container runs), and on a quiet node nothing else comes for minutes (seen: a client pod
// released 285 s after it started). So when no sync has begun within settleNudgeAfter of the
// releaser seeing the pod, it asks for one the way kube-router listens: it changes a label of the
// pod (settleSyncLabel, which no policy selects on), and asks again every settleNudgeEvery.

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
	// settleNudgeAfter is how long the releaser waits for a sync of kube-router's own before asking
	// for one; settleNudgeEvery how often it asks again (a request coalesces with a sync under way).
	settleNudgeAfter = time.Second
	settleNudgeEvery = 5 * time.Second
	// settleSyncLabel is the label the releaser changes on a waiting pod to have kube-router sync.
	settleSyncLabel = "e2e.tiled.blueskyproject.io/netpol-sync"
	// settleLabel marks the pods that wait to be released: the releaser lists only them, ten times
	// a second (listing every pod of the node that often cost the suite and the API server minutes
	// of CPU over a run).
	settleLabel = "e2e.tiled.blueskyproject.io/settle"
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
	asked := map[types.UID]int{} // how many syncs the releaser asked for, for the pod
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var pods corev1.PodList
		if err := cl.List(context.Background(), &pods, client.HasLabels{settleLabel}); err != nil {
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
			nudge := 0
			if !released[p.UID] && time.Since(at) > settleNudgeAfter+time.Duration(asked[p.UID])*settleNudgeEvery {
				asked[p.UID]++
				nudge = asked[p.UID]
			}
			mu.Unlock()
			if nudge > 0 {
				go func(ns, name string, n int) {
					if err := askSync(ns, name, n); err != nil {
						fmt.Fprintf(os.Stderr, "e2e: asking kube-router to sync for pod %s/%s: %v\n", ns, name, err)
					}
				}(p.Namespace, p.Name, nudge)
			}
			if free {
				go func(uid types.UID, ns, name string) {
					if err := release(ns, name); err != nil && !settleEnded(err) {
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

// askSync changes the pod's settleSyncLabel to n: kube-router requests a full sync on a pod's label
// change, which begins after the releaser saw the pod's IP.
func askSync(ns, name string, n int) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, settleSyncLabel, strconv.Itoa(n))
	p := &corev1.Pod{}
	p.Namespace, p.Name = ns, name
	return cl.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// settleEnded says whether a release failed only because the settle container ended first: it
// exits as soon as the file exists, which may kill the exec that created it (exit 137) or leave a
// second try no container to exec in.
func settleEnded(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "exit code 137") || strings.Contains(msg, "container not found") ||
		strings.Contains(msg, "no running task found")
}

// release creates the settle file in the pod's settle container.
func release(ns, name string) error {
	_, err := kubectl(nil, "-n", ns, "exec", name, "-c", settleContainer, "--", "python", "-c", "open("+strconv.Quote(settleFile)+", 'w').close()")
	return err
}
