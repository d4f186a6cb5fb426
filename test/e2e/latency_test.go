//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// readyWatch records, from watches opened before a TiledCluster is applied, when each pod of a
// namespace and the TiledCluster were first seen Ready, by this process's clock. It splits the
// fleet's time to Ready into what the pods take to start (the same as in the floor, up to the
// machine's noise) and what the operator adds before and after them.
type readyWatch struct {
	mu           sync.Mutex
	podReady     map[string]time.Time
	clusterReady time.Time
	closedEarly  []string
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// watchReadiness opens the watches on pods and TiledClusters in ns; stop ends them.
func watchReadiness(t *testing.T, ns, cluster string) *readyWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &readyWatch{podReady: map[string]time.Time{}, cancel: cancel}
	pods, err := cl.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatalf("watch pods in %s: %v", ns, err)
	}
	tcs, err := cl.Watch(ctx, &v1alpha1.TiledClusterList{}, client.InNamespace(ns))
	if err != nil {
		pods.Stop()
		cancel()
		t.Fatalf("watch TiledClusters in %s: %v", ns, err)
	}
	consume := func(what string, wi watch.Interface, seen func(obj any, at time.Time)) {
		defer w.wg.Done()
		if !followWatch(ctx, wi, seen) {
			w.mu.Lock()
			w.closedEarly = append(w.closedEarly, what)
			w.mu.Unlock()
		}
	}
	w.wg.Add(2)
	go consume("pods", pods, func(obj any, at time.Time) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !podReady(p) {
			return
		}
		w.mu.Lock()
		if _, done := w.podReady[p.Name]; !done {
			w.podReady[p.Name] = at
		}
		w.mu.Unlock()
	})
	go consume("tiledclusters", tcs, func(obj any, at time.Time) {
		tc, ok := obj.(*v1alpha1.TiledCluster)
		if !ok || tc.Name != cluster || !meta.IsStatusConditionTrue(tc.Status.Conditions, "Ready") {
			return
		}
		w.mu.Lock()
		if w.clusterReady.IsZero() {
			w.clusterReady = at
		}
		w.mu.Unlock()
	})
	return w
}

// followWatch hands every object added or modified through wi to seen, with when it came, until ctx
// ends; then it stops wi. It returns false when the server closed the watch first.
func followWatch(ctx context.Context, wi watch.Interface, seen func(obj any, at time.Time)) bool {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return ctx.Err() != nil
			}
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				seen(ev.Object, time.Now())
			}
		}
	}
}

// stop ends the watches and returns what they saw. A watch the server closed before stop is an
// error: its figures would be missing, not zero.
func (w *readyWatch) stop(t *testing.T) (podReady map[string]time.Time, clusterReady time.Time) {
	t.Helper()
	// The caller stops once kubectl saw the TiledCluster Ready; this watch may not have been handed
	// that event yet (two clients, two watches), so wait for it, bounded, before cancelling.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		w.mu.Lock()
		seen := !w.clusterReady.IsZero()
		w.mu.Unlock()
		if seen {
			break
		}
	}
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.closedEarly) > 0 {
		t.Errorf("the server closed the watch on %v before the fleet was Ready", w.closedEarly)
	}
	return w.podReady, w.clusterReady
}

// operatorLatency is what the operator adds to the pods' own start in a stamp-out that began at
// start: dispatch is start → its last write of a child that the pods wait for (any non-status,
// non-event write in ns, but a change of an existing ConfigMap: waitedFor) before the last pod was
// Ready, from the apiserver's audit log; report is the last pod Ready → the TiledCluster Ready,
// both seen by watches. A controller that created the Tiled StatefulSet only after PostgreSQL was
// up, rewrote a child mid-start or polled for status would show here.
func operatorLatency(t *testing.T, ns string, start time.Time, readyAt map[string]time.Time, clusterReady time.Time) (dispatch, report time.Duration, lastPod string) {
	t.Helper()
	var lastReady time.Time
	for name, at := range readyAt {
		if at.After(lastReady) {
			lastReady, lastPod = at, name
		}
	}
	if lastReady.IsZero() || clusterReady.IsZero() {
		t.Errorf("readiness not observed: %d pods seen Ready, TiledCluster Ready seen %t", len(readyAt), !clusterReady.IsZero())
		return 0, 0, ""
	}
	lastWrite := start
	for _, ev := range auditSince(t, operatorUser, start, lastReady) {
		if ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Subresource != "" ||
			ev.ObjectRef.Resource == "events" || !isWrite(ev.Verb) || !waitedFor(ev) {
			continue
		}
		if ev.RequestReceived.After(lastWrite) {
			lastWrite = ev.RequestReceived
		}
	}
	if lastWrite.Equal(start) {
		t.Errorf("no write of the operator in %s between the apply and the last pod Ready in the audit log", ns)
	}
	return lastWrite.Sub(start), clusterReady.Sub(lastReady), lastPod
}

// waitedFor says whether the pods may wait for the write ev: all writes but a change (not the
// creation) of an existing ConfigMap. A pod waits for its ConfigMap to exist (the kubelet mounts
// it before the containers start), never for a later change of it: the mount follows a change
// only at the kubelet's next sync, and a change the running pods must see changes the config hash
// on the StatefulSet's pod template, a write counted here. The write this leaves out is the
// catalog-expected key (render.CatalogExpectedKey), written once the first migrate step reported
// the catalog — during the start of the fleet's slower pods, for no pod to wait on: it is read by
// the next start of a migrate step, to refuse initialising a lost catalog.
func waitedFor(ev auditEvent) bool {
	if ev.ObjectRef.Resource != "configmaps" || ev.Verb != "patch" {
		return true
	}
	return ev.ResponseStatus == nil || ev.ResponseStatus.Code == http.StatusCreated
}
