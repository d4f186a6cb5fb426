package controllers_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
)

// watchCall is one watch the manager opened: the resource, whether it asked for metadata only
// (Accept: ...;as=PartialObjectMetadata), and its label selector.
type watchCall struct {
	resource      string
	metadataOnly  bool
	labelSelector string
}

func (w watchCall) String() string {
	form := "whole objects"
	if w.metadataOnly {
		form = "metadata only"
	}
	return fmt.Sprintf("%s (%s, labelSelector %q)", w.resource, form, w.labelSelector)
}

// watchRecorder records every watch request sent through the transports it wraps, and the most
// watches of one resource that were open at once: an informer that renews or resumes its watch
// closes the old one first, a second informer of the same resource watches beside it.
type watchRecorder struct {
	mu      sync.Mutex
	watches []watchCall
	open    map[string]int
	maxOpen map[string]int
}

func (r *watchRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		if q.Get("watch") != "true" && q.Get("watch") != "1" {
			return next.RoundTrip(req)
		}
		w := watchCall{
			resource:      watchedResource(req.URL),
			metadataOnly:  strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata"),
			labelSelector: q.Get("labelSelector"),
		}
		r.mu.Lock()
		r.watches = append(r.watches, w)
		r.open[w.resource]++
		r.maxOpen[w.resource] = max(r.maxOpen[w.resource], r.open[w.resource])
		r.mu.Unlock()
		resp, err := next.RoundTrip(req)
		if err != nil || resp == nil {
			r.closed(w.resource)
			return resp, err
		}
		resp.Body = &watchBody{ReadCloser: resp.Body, done: func() { r.closed(w.resource) }}
		return resp, nil
	})
}

func (r *watchRecorder) closed(resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open[resource]--
}

// watchBody reports once when the watch's response body is closed.
type watchBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *watchBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// watchedResource is GROUP/RESOURCE ("apps/statefulsets", "/configmaps" for the core group) of a
// collection URL: /api/v1[/namespaces/NS]/RESOURCE or /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE.
func watchedResource(u *url.URL) string {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	group := ""
	if parts[0] == "apis" && len(parts) > 1 {
		group = parts[1]
	}
	return group + "/" + parts[len(parts)-1]
}

// The manager's informers are the design's and no more: one watch at a time per kind it caches,
// the child kinds it never reads the content of (controllers.ChildKinds) as metadata only, and
// every child kind (ServiceMonitors too: the test installs their CRD), PersistentVolumes and Pods
// only as far as they carry the operator's managed-by label. A typed read of a metadata-only kind
// somewhere in a controller would start a second, whole-object informer of that kind, with a copy
// of every such object in the cluster; this fails on it.
//
// It runs first in the package (its file's name sorts first): run after the package's other tests,
// some fifty in-process operators started and stopped before it, its operator's instance controller
// reconciled nothing within the stamp-out's minute (three runs of the whole package on 2026-12-07;
// never alone, nor after any third of the package). A goroutine dump then held 366 metadata
// informers' watch filters of stopped managers blocked sending (controller-runtime's GVK fix-up
// watcher, apimachinery's watch.Filter); the link was not found. The test counts the watches of
// its own operator's process, so it is taken in a process no other operator has run in.
func TestOperatorWatchesEachKindOnceAsDeclared(t *testing.T) {
	g := NewWithT(t)
	rec := &watchRecorder{open: map[string]int{}, maxOpen: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = rec.wrap

	// With the ServiceMonitor CRD the operator caches ServiceMonitors too (it looks for the CRD at
	// start).
	installServiceMonitorCRD(t, g)

	stampOutWith(t, g, cfg, "watches")

	// What the design says: resource -> metadata only, and whether it is label-selected.
	type want struct{ metadataOnly, selected bool }
	expected := map[string]want{}
	resourceOf := func(gvk schema.GroupVersionKind) string {
		m, err := env.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		g.Expect(err).NotTo(HaveOccurred(), "mapping %s", gvk)
		return m.Resource.Group + "/" + m.Resource.Resource
	}
	for _, obj := range controllers.ChildKinds() {
		gvk, err := apiutil.GVKForObject(obj, env.Scheme)
		g.Expect(err).NotTo(HaveOccurred())
		_, meta := obj.(*metav1.PartialObjectMetadata)
		expected[resourceOf(gvk)] = want{metadataOnly: meta, selected: true}
	}
	expected["monitoring.coreos.com/servicemonitors"] = want{selected: true}
	expected["/persistentvolumes"] = want{selected: true}
	expected["/pods"] = want{selected: true}
	for _, r := range []string{"tiledinstances", "tiledclusters", "tiledprofiles"} {
		expected[tiledv1alpha1.GroupVersion.Group+"/"+r] = want{}
	}
	managed := tiledv1alpha1.LabelManagedBy + "=" + tiledv1alpha1.ManagedByValue

	rec.mu.Lock()
	defer rec.mu.Unlock()
	byResource := map[string][]watchCall{}
	for _, w := range rec.watches {
		byResource[w.resource] = append(byResource[w.resource], w)
	}
	var problems []string
	for r, calls := range byResource {
		exp, ok := expected[r]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: watched, but no informer of it is declared", calls[0]))
			continue
		case rec.maxOpen[r] != 1:
			problems = append(problems, fmt.Sprintf("%s: %d watches open at once, want 1: %v", r, rec.maxOpen[r], calls))
		}
		for _, w := range calls {
			if w.metadataOnly != exp.metadataOnly {
				problems = append(problems, fmt.Sprintf("%s: want metadata only %v", w, exp.metadataOnly))
			}
			if exp.selected != (w.labelSelector == managed) {
				problems = append(problems, fmt.Sprintf("%s: want label-selected on %s: %v", w, managed, exp.selected))
			}
		}
	}
	for r := range expected {
		if _, ok := byResource[r]; !ok {
			problems = append(problems, r+": declared, never watched")
		}
	}
	sort.Strings(problems)
	g.Expect(problems).To(BeEmpty(), "the manager's watches, against the informers the design declares")
}
