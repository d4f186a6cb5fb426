package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/traffic"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/hack/fleet"
	"github.com/bluesky/tiled-operator/hack/testenv"
)

// Result holds the figures of one fleet size. The keys are documented in docs/benchmarks.md.
type Result struct {
	N     int    `json:"n"`
	Setup *Setup `json:"setup,omitempty"`

	ObjectsCreated       int            `json:"objects_created"`
	ObjectsByKind        map[string]int `json:"objects_by_kind"`
	StampoutWrites       int64          `json:"stampout_writes"`
	StampoutObjectWrites int64          `json:"stampout_object_writes"`
	StampoutStatusWrites int64          `json:"stampout_status_writes"`
	StampoutEventWrites  int64          `json:"stampout_event_writes"`
	WritesPerObject      float64        `json:"writes_per_object"`
	ReadsAfterSync       int64          `json:"reads_after_sync"`
	ConvergeSeconds      float64        `json:"converge_seconds"`

	FloorSeconds  float64 `json:"floor_seconds"`
	FloorRequests int64   `json:"floor_requests"`
	FloorObjects  int     `json:"floor_objects"`
	ConvergeRatio float64 `json:"converge_to_floor_ratio"`

	SteadyWrites   int64 `json:"steady_writes"`
	SteadyRequests int64 `json:"steady_requests"`

	IdleRequests        int64   `json:"idle_requests"`
	IdleWatches         int64   `json:"idle_watches"`
	IdleNonWatch        int64   `json:"idle_requests_excluding_watches"`
	IdleSeconds         float64 `json:"idle_seconds"`
	IdleStatefulSetsRdy int     `json:"idle_statefulsets_ready"`

	ProfileChangeWrites         int64    `json:"profile_change_writes"`
	ProfileChangeObjectsChanged int      `json:"profile_change_objects_changed"`
	ProfileChangeChangedByKind  []string `json:"profile_change_changed_kinds"`
	ProfileChangeSeconds        float64  `json:"profile_change_seconds"`

	OverrideWrites         int64    `json:"override_writes"`
	OverrideObjectsChanged []string `json:"override_objects_changed"`

	OperatorRequests      int64   `json:"operator_requests"`
	NaiveRequests         int64   `json:"naive_requests"`
	NaiveWrites           int64   `json:"naive_writes"`
	NaiveReads            int64   `json:"naive_reads"`
	NaiveConvergeSeconds  float64 `json:"naive_converge_seconds"`
	NaiveToOperatorRatio  float64 `json:"naive_to_operator_ratio"`
	NaivePhases           string  `json:"naive_requests_by_phase"`
	OperatorPhases        string  `json:"operator_requests_by_phase"`
	ExpandNsPerInstance   float64 `json:"expand_ns_per_instance"`
	ExpandAllocsPerInst   float64 `json:"expand_allocs_per_instance"`
	ExpandBytesPerInst    float64 `json:"expand_bytes_per_instance"`
	RSSMiB                float64 `json:"rss_mib"`
	RSSBeforeManagerMiB   float64 `json:"rss_before_manager_mib"`
	GoHeapPeakMiB         float64 `json:"go_heap_inuse_peak_mib"`
	GoSysPeakMiB          float64 `json:"go_sys_peak_mib"`
	StampoutRequestDetail string  `json:"stampout_requests_detail"`
	// HeapProfiles are the heap profiles written with -heap-profile (end of the operator's phases,
	// and at the peak), relative to the repository when inside it.
	HeapProfiles      []string `json:"heap_profiles,omitempty"`
	IdleRequestDetail string   `json:"idle_requests_detail"`
}

type options struct {
	idle    time.Duration
	quiet   time.Duration
	timeout time.Duration
	skip    map[string]bool

	heapProfile string
	cpuProfile  string
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

// reconcileTotal reads controller-runtime's reconcile counter of one controller.
func reconcileTotal(controller string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// measure runs every phase for a fleet of n beamlines on one control plane and returns the figures.
func measure(ctx context.Context, n int, o options, logw io.Writer) (*Result, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "[n=%d %s] "+format+"\n", append([]any{n, time.Now().Format("15:04:05")}, args...)...)
	}
	env, err := testenv.Start(testenv.Options{APIServerFlags: map[string]string{"service-cluster-ip-range": serviceRange}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			log.Printf("stopping the control plane: %v", err)
		}
	}()
	names, err := fleet.Beamlines(n)
	if err != nil {
		return nil, err
	}
	r := &Result{N: n, Setup: ptrTo(recordSetup(o.flags))}

	// --- the operator -------------------------------------------------------------------------
	ns, err := fleet.NewNamespace(ctx, env.Client, "bench-operator")
	if err != nil {
		return nil, err
	}
	if err := fleet.Create(ctx, env.Client, fleet.ProfileObjects(fleet.Profiles(ns))...); err != nil {
		return nil, err
	}
	// The peak RSS is that of the operator's phases: the kernel's high-water mark is reset here
	// (Linux >= 4.0), after the control plane started and the CRDs were installed.
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	r.RSSBeforeManagerMiB = float64(procStatusKiB("VmRSS")) / 1024
	cfg := rest.CopyConfig(env.Config)
	var last lastRequest
	last.wrap(cfg)
	op, err := controllers.NewManager(cfg, controllers.ManagerOptions{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", WatchNamespaces: []string{ns}, Restartable: true,
	})
	if err != nil {
		return nil, err
	}
	sampler := startHeapSampler(o.heapProfile != "")
	opCtx, stopOp := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() { opDone <- op.Start(opCtx) }()
	stopOperator := func() error {
		if stopOp == nil {
			return nil
		}
		stopOp()
		stopOp = nil
		return <-opDone
	}
	defer func() { _ = stopOperator() }()
	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	synced := op.GetCache().WaitForCacheSync(syncCtx)
	cancelSync()
	if !synced {
		return nil, fmt.Errorf("the operator's caches did not sync")
	}
	if err := fleet.WaitQuiet(ctx, op.Traffic, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	afterSync := op.Traffic.Snapshot()
	cache := op.GetClient() // reads from the operator's informers: no request

	// Stamp-out.
	logf("stamp-out")
	cluster := fleet.Cluster(ns, "nsls2", names)
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := env.Client.Create(ctx, cluster); err != nil {
		return nil, err
	}
	if err := fleet.Poll(ctx, 200*time.Millisecond, o.timeout, "stamp-out", func(ctx context.Context) (bool, error) {
		return fleet.StampedOut(ctx, cache, ns, "nsls2", n)
	}); err != nil {
		return nil, err
	}
	if err := fleet.WaitQuiet(ctx, op.Traffic, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	r.ConvergeSeconds = last.time().Sub(start).Seconds()
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	stamp := op.Traffic.Snapshot().Sub(afterSync)
	versions, err := objectVersions(ctx, env.Client, ns)
	if err != nil {
		return nil, err
	}
	r.ObjectsCreated = len(versions)
	r.ObjectsByKind = countKinds(versions)
	r.StampoutWrites = stamp.Writes()
	r.StampoutObjectWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && !isStatus(k) && !isEvent(k) })
	r.StampoutStatusWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && isStatus(k) })
	r.StampoutEventWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && isEvent(k) })
	r.WritesPerObject = float64(r.StampoutWrites) / float64(r.ObjectsCreated)
	r.StampoutRequestDetail = stamp.String()
	phases := map[string]int64{"stampout": stamp.Total()}
	logf("stamp-out: %d objects, %d writes, %.1fs", r.ObjectsCreated, r.StampoutWrites, r.ConvergeSeconds)

	// Steady state: a forced resync of every cluster and instance.
	logf("steady state")
	before := op.Traffic.Snapshot()
	want := reconcileTotal("tiledinstance") + reconcileTotal("tiledcluster") + float64(n+1)
	if err := op.ResyncAll(ctx); err != nil {
		return nil, err
	}
	if err := fleet.Poll(ctx, 100*time.Millisecond, o.timeout, "resync", func(context.Context) (bool, error) {
		return reconcileTotal("tiledinstance")+reconcileTotal("tiledcluster") >= want, nil
	}); err != nil {
		return nil, err
	}
	if err := fleet.WaitQuiet(ctx, op.Traffic, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	steady := op.Traffic.Snapshot().Sub(before)
	r.SteadyWrites, r.SteadyRequests = steady.Writes(), steady.Total()
	phases["steady"] = steady.Total()

	// Idle: nothing changes, every StatefulSet stays not ready (no kubelet here).
	if !o.skip["idle"] {
		logf("idle for %s", o.idle)
		before = op.Traffic.Snapshot()
		t0 := time.Now()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(o.idle):
		}
		idle := op.Traffic.Snapshot().Sub(before)
		r.IdleSeconds = time.Since(t0).Seconds()
		r.IdleRequests = idle.Total()
		r.IdleWatches = idle.Sum(func(k traffic.Key) bool { return k.Verb == traffic.VerbWatch })
		r.IdleNonWatch = r.IdleRequests - r.IdleWatches
		r.IdleRequestDetail = idle.String()
		var sts appsv1.StatefulSetList
		if err := cache.List(ctx, &sts, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, s := range sts.Items {
			if s.Status.ReadyReplicas > 0 {
				r.IdleStatefulSetsRdy++
			}
		}
	}

	// One profile field changes: the operations team's pod annotation, on every beamline.
	logf("profile change")
	rvBefore := versions
	intentsBefore, err := serverIntents(ctx, cache, ns)
	if err != nil {
		return nil, err
	}
	before = op.Traffic.Snapshot()
	start = time.Now()
	if err := setProfileAnnotation(ctx, env.Client, ns, "controls"); err != nil {
		return nil, err
	}
	if err := fleet.Poll(ctx, 200*time.Millisecond, o.timeout, "profile change", func(ctx context.Context) (bool, error) {
		now, err := serverIntents(ctx, cache, ns)
		if err != nil || len(now) != n {
			return false, err
		}
		for name, intent := range now {
			if intent == intentsBefore[name] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, err
	}
	if err := fleet.WaitQuiet(ctx, op.Traffic, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	r.ProfileChangeSeconds = last.time().Sub(start).Seconds()
	change := op.Traffic.Snapshot().Sub(before)
	if versions, err = objectVersions(ctx, env.Client, ns); err != nil {
		return nil, err
	}
	changed := fleet.Changed(rvBefore, versions)
	r.ProfileChangeWrites = change.Writes()
	r.ProfileChangeObjectsChanged = len(changed)
	r.ProfileChangeChangedByKind = kindsOf(changed)
	phases["profile_change"] = change.Total()

	// One instance override changes.
	logf("override change")
	rvBefore = versions
	if intentsBefore, err = serverIntents(ctx, cache, ns); err != nil {
		return nil, err
	}
	before = op.Traffic.Snapshot()
	if err := setOverride(ctx, env.Client, ns, "nsls2", "bmm"); err != nil {
		return nil, err
	}
	if err := fleet.Poll(ctx, 200*time.Millisecond, o.timeout, "override change", func(ctx context.Context) (bool, error) {
		now, err := serverIntents(ctx, cache, ns)
		return err == nil && now["nsls2-bmm"] != intentsBefore["nsls2-bmm"], err
	}); err != nil {
		return nil, err
	}
	if err := fleet.WaitQuiet(ctx, op.Traffic, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	override := op.Traffic.Snapshot().Sub(before)
	if versions, err = objectVersions(ctx, env.Client, ns); err != nil {
		return nil, err
	}
	r.OverrideWrites = override.Writes()
	r.OverrideObjectsChanged = fleet.Changed(rvBefore, versions)
	phases["override_change"] = override.Total()
	all := op.Traffic.Snapshot().Sub(afterSync)
	r.ReadsAfterSync = all.Reads()
	r.OperatorRequests = phases["stampout"] + phases["steady"] + phases["profile_change"] + phases["override_change"]
	r.OperatorPhases = phaseString(phases)

	// Peak memory of the process (the manager runs in it; the control plane runs in other processes).
	heap, sys := sampler.Stop()
	if o.heapProfile != "" {
		if err := writeHeapProfile(o.heapProfile); err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.heapProfile+".peak", sampler.PeakProfile(), 0o644); err != nil {
			return nil, err
		}
		for _, p := range []string{o.heapProfile, o.heapProfile + ".peak"} {
			if abs, err := filepath.Abs(p); err == nil {
				if rel, err := filepath.Rel(testenv.RepoRoot(), abs); err == nil && !strings.HasPrefix(rel, "..") {
					p = rel
				}
			}
			r.HeapProfiles = append(r.HeapProfiles, p)
		}
	}
	r.RSSMiB = float64(procStatusKiB("VmHWM")) / 1024
	r.GoHeapPeakMiB = float64(heap) / (1 << 20)
	r.GoSysPeakMiB = float64(sys) / (1 << 20)
	if err := stopOperator(); err != nil {
		return nil, fmt.Errorf("the operator stopped with an error: %w", err)
	}
	logf("operator done: rss %.0f MiB", r.RSSMiB)

	// --- the floor ------------------------------------------------------------------------------
	logf("floor")
	floorNS, err := fleet.NewNamespace(ctx, env.Client, "bench-floor")
	if err != nil {
		return nil, err
	}
	fl, err := runFloor(ctx, env.Config, floorNS, names)
	if err != nil {
		return nil, err
	}
	r.FloorSeconds, r.FloorRequests, r.FloorObjects = fl.Seconds, fl.Requests.Total(), fl.Objects
	r.ConvergeRatio = r.ConvergeSeconds / r.FloorSeconds
	logf("floor: %d objects in %.1fs", fl.Objects, fl.Seconds)

	// --- the naive baseline -----------------------------------------------------------------------
	if !o.skip["naive"] {
		logf("naive baseline")
		if err := runNaive(ctx, env, names, o, r); err != nil {
			return nil, fmt.Errorf("naive baseline: %w", err)
		}
	}

	// --- the engine alone -------------------------------------------------------------------------
	logf("engine")
	profs := profileValues(fleet.Profiles("bench"))
	ecluster := fleet.Cluster("bench", "nsls2", names)
	builtins := expansion.DefaultBuiltins()
	var benchErr error
	br := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := expansion.Expand(ecluster, profs, builtins); err != nil {
				benchErr = err
				b.FailNow()
			}
		}
	})
	if benchErr != nil {
		return nil, benchErr
	}
	r.ExpandNsPerInstance = float64(br.NsPerOp()) / float64(n)
	r.ExpandAllocsPerInst = float64(br.AllocsPerOp()) / float64(n)
	r.ExpandBytesPerInst = float64(br.AllocedBytesPerOp()) / float64(n)
	logf("done")
	return r, nil
}

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
	if r.OperatorRequests > 0 {
		r.NaiveToOperatorRatio = float64(r.NaiveRequests) / float64(r.OperatorRequests)
	}
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
// its pod template (controllers/cachetrim.go), so a phase waits for the operator to have applied a
// new intent to the StatefulSets rather than reading the template. The list shares the cache's
// objects (no deep copy): the harness's polling should cost the measured process little.
func serverIntents(ctx context.Context, r client.Reader, ns string) (map[string]string, error) {
	var sts appsv1.StatefulSetList
	if err := r.List(ctx, &sts, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "server"}, client.UnsafeDisableDeepCopy); err != nil {
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
	if err := r.List(ctx, &sts, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "server"}); err != nil {
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

func kindsOf(keys []string) []string {
	counts := map[string]int{}
	var order []string
	for _, k := range keys {
		kind, _, _ := strings.Cut(k, "/")
		if counts[kind] == 0 {
			order = append(order, kind)
		}
		counts[kind]++
	}
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = fmt.Sprintf("%s=%d", k, counts[k])
	}
	return out
}

// serviceRange is the apiserver's ClusterIP range: envtest's default (10.0.0.0/24) holds 254
// addresses, and every instance's Tiled and PostgreSQL Services take one each, in the operator's,
// the floor's and the naive baseline's namespaces.
const serviceRange = "10.96.0.0/16"

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

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
		{tiledv1alpha1.GroupVersion.WithKind("TiledInstance"), []client.ListOption{client.InNamespace(ns)}, nil},
		// Cluster-scoped: their names start with the namespace (render.NamesFor).
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
