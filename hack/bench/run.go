package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// Result holds the figures of one fleet size. The keys are documented in docs/benchmarks.md.
type Result struct {
	N        int    `json:"n"`
	Clusters int    `json:"clusters"`
	Setup    *Setup `json:"setup,omitempty"`

	ObjectsCreated int            `json:"objects_created"`
	ObjectsByKind  map[string]int `json:"objects_by_kind"`
	// The operator's own count (its request counter, scraped from /metrics).
	StampoutWrites        int64   `json:"stampout_writes"`
	StampoutObjectWrites  int64   `json:"stampout_object_writes"`
	StampoutStatusWrites  int64   `json:"stampout_status_writes"`
	StampoutEventWrites   int64   `json:"stampout_event_writes"`
	StampoutLeaseWrites   int64   `json:"stampout_lease_writes"`
	WritesPerObject       float64 `json:"writes_per_object"`
	StampoutRequestDetail string  `json:"stampout_requests_detail"`
	// The apiserver's count (audit log) of the operator's requests in the same phase.
	StampoutAuditRequests    int64   `json:"stampout_audit_requests"`
	StampoutAuditWrites      int64   `json:"stampout_audit_writes"`
	StampoutOperatorRequests int64   `json:"stampout_operator_requests"`
	RequestsPerObject        float64 `json:"requests_per_object"`
	StampoutKCMWrites        int64   `json:"stampout_kcm_writes"`
	StartupRequests          int64   `json:"startup_requests"`
	ReadsAfterSync           int64   `json:"reads_after_sync"`
	ConvergeSeconds          float64 `json:"converge_seconds"`
	// StampoutLastWrite is, by resource, when the operator's last write of the stamp-out was
	// received, in seconds after the first TiledCluster's creation: where the time to converge ends.
	StampoutLastWrite map[string]float64 `json:"stampout_last_write_seconds,omitempty"`

	FloorConcurrency     int        `json:"floor_concurrency"`
	FloorSeconds         float64    `json:"floor_seconds"`
	FloorRequests        int64      `json:"floor_requests"`
	FloorObjects         int        `json:"floor_objects"`
	FloorBestSeconds     float64    `json:"floor_best_seconds"`
	FloorBestConcurrency int        `json:"floor_best_concurrency"`
	Floors               []FloorRun `json:"floors"`
	ConvergeRatio        float64    `json:"converge_to_floor_ratio"`
	ConvergeBestRatio    float64    `json:"converge_to_best_floor_ratio"`
	// ConvergeTrials are paired runs of the floor at the operator's concurrency and the stamp-out,
	// each on a fresh control plane, the first the full run's own; ConvergeRatioMedian is the median
	// of their ratios.
	ConvergeTrials      []ConvergeTrial `json:"converge_trials,omitempty"`
	ConvergeRatioMedian float64         `json:"converge_to_floor_ratio_median,omitempty"`
	// StampoutCPU is the CPU time, in seconds, each process used from the first TiledCluster's
	// creation until the operator was quiet (kube-apiserver, etcd, kube-controller-manager, the
	// manager, the harness); FloorCPU the same for the floor at the operator's concurrency, whose
	// client runs in the harness.
	StampoutCPU map[string]float64 `json:"stampout_cpu_seconds,omitempty"`
	FloorCPU    map[string]float64 `json:"floor_cpu_seconds,omitempty"`

	IdleSeconds          float64 `json:"idle_seconds"`
	IdleRequests         int64   `json:"idle_requests"`
	IdleLease            int64   `json:"idle_lease_requests"`
	IdleWatches          int64   `json:"idle_watches"`
	IdleOther            int64   `json:"idle_other_requests"`
	IdleOperatorRequests int64   `json:"idle_operator_counted_requests"`
	IdleRequestDetail    string  `json:"idle_requests_detail"`

	ProfileChangeWrites         int64    `json:"profile_change_writes"`
	ProfileChangeAuditRequests  int64    `json:"profile_change_audit_requests"`
	ProfileChangeObjectsChanged int      `json:"profile_change_objects_changed"`
	ProfileChangeChangedByKind  []string `json:"profile_change_changed_kinds"`
	ProfileChangeSeconds        float64  `json:"profile_change_seconds"`
	RequestsPerChangedObject    float64  `json:"requests_per_changed_object"`

	OverrideWrites         int64    `json:"override_writes"`
	OverrideAuditRequests  int64    `json:"override_audit_requests"`
	OverrideObjectsChanged []string `json:"override_objects_changed"`

	RestartSeconds       float64 `json:"restart_seconds"`
	RestartRequests      int64   `json:"restart_requests"`
	RestartObjectWrites  int64   `json:"restart_object_writes"`
	RestartRequestDetail string  `json:"restart_requests_detail"`
	RestartRSSMiB        float64 `json:"restart_rss_mib"`
	RestartRSSFileMiB    float64 `json:"restart_rss_file_mib"`

	FailoverSeconds       float64 `json:"failover_seconds"`
	FailoverRequests      int64   `json:"failover_requests"`
	FailoverObjectWrites  int64   `json:"failover_object_writes"`
	FailoverRequestDetail string  `json:"failover_requests_detail"`

	OperatorCountTotal int64 `json:"operator_count_total"`
	AuditCountTotal    int64 `json:"audit_count_total"`

	NaiveRequests        int64   `json:"naive_requests"`
	NaiveWrites          int64   `json:"naive_writes"`
	NaiveReads           int64   `json:"naive_reads"`
	NaiveConvergeSeconds float64 `json:"naive_converge_seconds"`
	NaivePhases          string  `json:"naive_requests_by_phase"`

	ExpandNsPerInstance float64 `json:"expand_ns_per_instance"`
	ExpandAllocsPerInst float64 `json:"expand_allocs_per_instance"`
	ExpandBytesPerInst  float64 `json:"expand_bytes_per_instance"`
	RSSMiB              float64 `json:"rss_mib"`
	RSSAnonPeakMiB      float64 `json:"rss_anon_peak_mib"`
	RSSFileMiB          float64 `json:"rss_file_mib"`
	MemoryLimitMiB      float64 `json:"memory_limit_mib"`
	MemoryRequestMiB    float64 `json:"memory_request_mib,omitempty"`
	// HeapProfiles are the manager's heap profiles written with -heap-profile (end of the first
	// replica's phases, and when its resident set was highest), relative to the repository.
	HeapProfiles []string `json:"heap_profiles,omitempty"`
}

// FloorRun is one run of the plain-apply floor.
type FloorRun struct {
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	Requests    int64   `json:"requests"`
	Objects     int     `json:"objects"`
	// CPU is the CPU time, in seconds, each process used during the run.
	CPU map[string]float64 `json:"cpu_seconds,omitempty"`
}

// ConvergeTrial is one paired run of the floor at the operator's concurrency and the operator's
// stamp-out, one after the other.
type ConvergeTrial struct {
	FloorSeconds    float64 `json:"floor_seconds"`
	ConvergeSeconds float64 `json:"converge_seconds"`
	Ratio           float64 `json:"ratio"`
	// FloorCPU and StampoutCPU are the CPU seconds of all processes together in each.
	FloorCPU    float64 `json:"floor_cpu_seconds"`
	StampoutCPU float64 `json:"stampout_cpu_seconds"`
}

// trialRatios lists the trials' ratios, "1.21, 1.30, 1.18".
func trialRatios(ts []ConvergeTrial) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = fmt.Sprintf("%.2f", t.Ratio)
	}
	return strings.Join(s, ", ")
}

// medianRatio is the median of the trials' ratios (the mean of the middle two of an even number).
func medianRatio(ts []ConvergeTrial) float64 {
	if len(ts) == 0 {
		return 0
	}
	r := make([]float64, len(ts))
	for i, t := range ts {
		r[i] = t.Ratio
	}
	sort.Float64s(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

type options struct {
	// trials is the number of paired floor and stamp-out runs (ConvergeTrials) at sizes of one
	// cluster or less.
	trials int

	idle    time.Duration
	quiet   time.Duration
	timeout time.Duration
	skip    map[string]bool

	heapProfile string
	cpuProfile  string
	cpuWindow   time.Duration
	// flags are the harness flags of this size, recorded in Setup.
	flags string
}

func ptrTo[T any](v T) *T { return &v }

// lastRequest wraps a rest config's transport to remember when the last request was sent.
type lastRequest struct{ at atomic.Int64 }

func (l *lastRequest) wrap(cfg *rest.Config) {
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			l.at.Store(time.Now().UnixNano())
			return rt.RoundTrip(r)
		})
	}
}

func (l *lastRequest) time() time.Time { return time.Unix(0, l.at.Load()) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func isStatus(k traffic.Key) bool { return strings.HasSuffix(k.Resource, "/status") }
func isEvent(k traffic.Key) bool  { return k.Resource == "events" }

func runNaive(ctx context.Context, env *testenv.Env, names []string, o options, r *Result) error {
	n := len(names)
	ns, err := fleet.NewNamespace(ctx, env.Client, "bench-naive")
	if err != nil {
		return err
	}
	if err := fleet.Create(ctx, env.Client, fleet.ProfileObjects(fleet.Profiles(ns))...); err != nil {
		return err
	}
	cfg := rest.CopyConfig(env.Config)
	var last lastRequest
	last.wrap(cfg)
	nv, err := newNaive(cfg, ns)
	if err != nil {
		return err
	}
	nctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- nv.Start(nctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "bench: the naive baseline's manager stopped with %v\n", err)
		}
	}()
	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	synced := nv.GetCache().WaitForCacheSync(syncCtx)
	cancelSync()
	if !synced {
		return fmt.Errorf("caches did not sync")
	}
	if err := fleet.WaitQuiet(ctx, nv.Traffic, o.quiet, o.timeout); err != nil {
		return err
	}
	cache := nv.GetClient()
	phases := map[string]int64{}
	phase := func(name string, act func() error, cond func(context.Context) (bool, error)) error {
		before := nv.Traffic.Snapshot()
		if err := act(); err != nil {
			return err
		}
		if err := fleet.Poll(ctx, 200*time.Millisecond, o.timeout, "naive "+name, cond); err != nil {
			return err
		}
		if err := fleet.WaitQuiet(ctx, nv.Traffic, o.quiet, o.timeout); err != nil {
			return err
		}
		d := nv.Traffic.Snapshot().Sub(before)
		phases[name] = d.Total()
		r.NaiveWrites += d.Writes()
		r.NaiveReads += d.Reads()
		return nil
	}
	start := time.Now()
	if err := phase("stampout", func() error { return env.Client.Create(ctx, fleet.Cluster(ns, "nsls2", names)) },
		func(ctx context.Context) (bool, error) { return fleet.StampedOut(ctx, cache, ns, "nsls2", n) }); err != nil {
		return err
	}
	r.NaiveConvergeSeconds = last.time().Sub(start).Seconds()
	var want int64
	if err := phase("steady", func() error {
		k, err := nv.resyncAll(ctx, ns)
		want = nv.reconciles.Load() + int64(k)
		return err
	}, func(context.Context) (bool, error) { return nv.reconciles.Load() >= want, nil }); err != nil {
		return err
	}
	if err := phase("profile_change", func() error { return setProfileAnnotation(ctx, env.Client, ns, "controls") },
		func(ctx context.Context) (bool, error) {
			return annotated(ctx, cache, ns, "nsls2.bnl.gov/team", "controls", n)
		}); err != nil {
		return err
	}
	if err := phase("override_change", func() error { return setOverride(ctx, env.Client, ns, "nsls2", "bmm") },
		func(ctx context.Context) (bool, error) {
			s := &appsv1.StatefulSet{}
			if err := cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nsls2-bmm"}, s); err != nil {
				return false, err
			}
			return s.Spec.Template.Annotations["nsls2.bnl.gov/note"] == "commissioning", nil
		}); err != nil {
		return err
	}
	r.NaiveRequests = phases["stampout"] + phases["steady"] + phases["profile_change"] + phases["override_change"]
	r.NaivePhases = phaseString(phases)
	return nil
}

func phaseString(p map[string]int64) string {
	var parts []string
	for _, k := range []string{"stampout", "steady", "profile_change", "override_change"} {
		parts = append(parts, fmt.Sprintf("%s=%d", k, p[k]))
	}
	return strings.Join(parts, " ")
}

// setProfileAnnotation changes one field of the nsls2-ops profile.
func setProfileAnnotation(ctx context.Context, c client.Client, ns, value string) error {
	p := &tiledv1alpha1.TiledProfile{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nsls2-ops"}, p); err != nil {
		return err
	}
	p.Spec.Tiled.PodAnnotations["nsls2.bnl.gov/team"] = value
	return c.Update(ctx, p)
}

// setOverride gives one beamline an override (a pod annotation).
func setOverride(ctx context.Context, c client.Client, ns, cluster, instance string) error {
	tc := &tiledv1alpha1.TiledCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, tc); err != nil {
		return err
	}
	for i := range tc.Spec.Instances {
		if tc.Spec.Instances[i].Name == instance {
			tc.Spec.Instances[i].Overrides = &tiledv1alpha1.InstanceTemplate{Tiled: &tiledv1alpha1.TiledServerSpec{
				PodAnnotations: map[string]string{"nsls2.bnl.gov/note": "commissioning"},
			}}
		}
	}
	return c.Update(ctx, tc)
}

// serverIntents returns the intent annotation (applier.AnnotationIntent) of every Tiled StatefulSet
// in the namespace, by name. The operator's cache keeps a StatefulSet's metadata and status but not
// its pod template (operator/cachetrim.go), so a phase waits for the operator to have applied a
// new intent to the StatefulSets rather than reading the template. The list shares the cache's
// objects (no deep copy): the harness's polling should cost the measured process little.
func serverIntents(ctx context.Context, r client.Reader, ns string) (map[string]string, error) {
	var sts appsv1.StatefulSetList
	if err := r.List(ctx, &sts, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelAppComponent: render.ComponentServer}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(sts.Items))
	for i := range sts.Items {
		out[sts.Items[i].Name] = sts.Items[i].Annotations[applier.AnnotationIntent]
	}
	return out, nil
}

// annotated reports whether every Tiled StatefulSet's pod template has the annotation (the naive
// baseline's cache holds whole objects).
func annotated(ctx context.Context, r client.Reader, ns, key, value string, n int) (bool, error) {
	var sts appsv1.StatefulSetList
	if err := r.List(ctx, &sts, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelAppComponent: render.ComponentServer}); err != nil {
		return false, err
	}
	if len(sts.Items) != n {
		return false, nil
	}
	for _, s := range sts.Items {
		if s.Spec.Template.Annotations[key] != value {
			return false, nil
		}
	}
	return true, nil
}

// serviceRange is the apiserver's ClusterIP range: envtest's default (10.0.0.0/24) holds 254
// addresses, and every instance's Tiled and PostgreSQL Services take one each, in the operator's,
// the floor's and the naive baseline's namespaces.
const serviceRange = "10.96.0.0/16"

// objectVersions lists, from the API server, the objects of the fleet in ns as fleet.Metadata does
// (labelled children, TiledInstances, the namespace's NFS PersistentVolumes) and returns the
// resourceVersion of each by "Kind/name". It pages (500 a request) and keeps nothing else, so
// that the harness, which runs in the measured process, holds a few bytes per object rather than
// the objects' metadata and managedFields.
func objectVersions(ctx context.Context, c client.Client, ns string) (map[string]string, error) {
	out := map[string]string{}
	managed := client.MatchingLabels{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}
	kinds := []struct {
		gvk  schema.GroupVersionKind
		opts []client.ListOption
		keep func(name string) bool
	}{
		{corev1.SchemeGroupVersion.WithKind("ConfigMap"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{corev1.SchemeGroupVersion.WithKind("Secret"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{corev1.SchemeGroupVersion.WithKind("Service"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{appsv1.SchemeGroupVersion.WithKind("StatefulSet"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{networkingv1.SchemeGroupVersion.WithKind("Ingress"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), []client.ListOption{client.InNamespace(ns), managed}, nil},
		{tiledv1alpha1.GroupVersion.WithKind("TiledInstance"), []client.ListOption{client.InNamespace(ns)}, nil},
		// Cluster-scoped: their names start with the namespace (names.For).
		{corev1.SchemeGroupVersion.WithKind("PersistentVolume"), []client.ListOption{managed}, func(name string) bool { return strings.HasPrefix(name, ns+"-") }},
	}
	for _, k := range kinds {
		cont := ""
		for {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
			if err := c.List(ctx, l, append(k.opts, client.Limit(500), client.Continue(cont))...); err != nil {
				return nil, err
			}
			for i := range l.Items {
				if k.keep == nil || k.keep(l.Items[i].Name) {
					out[k.gvk.Kind+"/"+l.Items[i].Name] = l.Items[i].ResourceVersion
				}
			}
			if cont = l.Continue; cont == "" {
				break
			}
		}
	}
	return out, nil
}

// countKinds counts "Kind/name" keys by kind.
func countKinds(versions map[string]string) map[string]int {
	out := map[string]int{}
	for k := range versions {
		kind, _, _ := strings.Cut(k, "/")
		out[kind]++
	}
	return out
}
