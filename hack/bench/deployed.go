package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/traffic"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

// clusterSize is the most beamlines one TiledCluster holds in the benchmark: larger fleets are
// several clusters of this size, each in a namespace of its own (N = 3,000 is three).
const clusterSize = 1000

// kcmControllers run in kube-controller-manager beside the operator, as in a real cluster: the
// StatefulSet controller creates the pods (they stay Pending: no node) and writes the StatefulSets'
// status; the volume binder binds the claims to the volumes the harness's provisioner creates; the
// garbage collector, namespace and service-account controllers do what they do everywhere.
var kcmControllers = []string{
	"garbagecollector", "namespace", "serviceaccount", "statefulset",
	"persistentvolume-binder", "pvc-protection", "pv-protection",
}

// notLeaseOrWatch is the traffic that says the operator is working: not its Lease renewals, not
// its watches.
func notLeaseOrWatch(k traffic.Key) bool {
	return k.Resource != "leases" && k.Verb != traffic.VerbWatch
}

// quietPoll is how often waitQuiet scrapes the manager's request counter: often enough to end a
// phase within a fraction of -quiet (its times come from the audit log, not from the scrapes), and
// seldom enough that the scrapes cost the manager little.
const quietPoll = 500 * time.Millisecond

// waitQuiet waits until the replica has sent no request other than Lease renewals and watches for
// quiet.
func waitQuiet(ctx context.Context, m *managerProc, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) {
		if m.exited() {
			return fmt.Errorf("manager %s exited:\n%s", m.name, tail(m.log.String(), 30))
		}
		s, err := m.traffic(ctx)
		if err == nil {
			if now := s.Sum(notLeaseOrWatch); now != last {
				last, since = now, time.Now()
			} else if time.Since(since) >= quiet {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(quietPoll):
		}
	}
	return fmt.Errorf("manager %s: no quiet moment of %s within %s", m.name, quiet, timeout)
}

// waitLeading waits until the replica leads and answers /readyz.
func waitLeading(ctx context.Context, m *managerProc, timeout time.Duration) error {
	return fleet.Poll(ctx, 100*time.Millisecond, timeout, "manager "+m.name+" leading", func(ctx context.Context) (bool, error) {
		if m.exited() {
			return false, fmt.Errorf("manager %s exited:\n%s", m.name, tail(m.log.String(), 30))
		}
		if !m.ready(ctx) {
			return false, nil
		}
		ok, err := m.leading(ctx)
		return ok && err == nil, nil
	})
}

// waitWebhooksPublished waits until both webhook configurations carry a CA bundle.
func waitWebhooksPublished(ctx context.Context, c client.Client) error {
	return fleet.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "webhook configurations", func(ctx context.Context) (bool, error) {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		return c.Get(ctx, client.ObjectKey{Name: webhooks.MutatingConfigurationName}, m) == nil && len(m.Webhooks) > 0 && len(m.Webhooks[0].ClientConfig.CABundle) > 0 &&
			c.Get(ctx, client.ObjectKey{Name: webhooks.ValidatingConfigurationName}, v) == nil && len(v.Webhooks) > 0 && len(v.Webhooks[0].ClientConfig.CABundle) > 0, nil
	})
}

// fleetNamespace is one cluster of the fleet.
type fleetNamespace struct {
	ns    string
	names []string
}

// startControlPlane starts a control plane as the harness measures on: kube-apiserver with an audit
// log and etcd, kube-controller-manager with kcmControllers.
func startControlPlane() (*testenv.Env, error) {
	return testenv.Start(testenv.Options{
		APIServerFlags:    map[string]string{"service-cluster-ip-range": serviceRange},
		ControllerManager: true, Controllers: kcmControllers, AuditLog: true,
	})
}

// startHarness starts the harness's own client and informers on env, under a User-Agent of its own,
// with the static provisioner, and returns once the informers have synced. Like the manager (and
// kube-controller-manager), it asks for no compressed responses: gzip on loopback is CPU spent for
// nothing, and a compressed watch would be charged to whichever phase runs.
func startHarness(ctx context.Context, env *testenv.Env) (client.Client, cache.Cache, error) {
	hcfg := rest.CopyConfig(env.Config)
	hcfg.UserAgent = "tiled-bench/harness"
	hcfg.DisableCompression = true
	hc, err := client.New(hcfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, nil, err
	}
	informers, err := cache.New(hcfg, cache.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, nil, err
	}
	if err := startProvisioner(ctx, hc, informers); err != nil {
		return nil, nil, err
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return nil, nil, fmt.Errorf("the harness's informers did not sync")
	}
	return hc, informers, nil
}

// watchKinds starts the harness's informers of the kinds objs and waits until they have synced.
// The stamp-out is measured without them (it polls the API server once the operator is quiet):
// every event of a watch costs the API server and the harness CPU that the floor does not pay.
func watchKinds(ctx context.Context, informers cache.Cache, objs ...client.Object) error {
	for _, obj := range objs {
		if _, err := informers.GetInformer(ctx, obj); err != nil {
			return err
		}
	}
	if !informers.WaitForCacheSync(ctx) {
		return fmt.Errorf("the harness's informers did not sync")
	}
	return nil
}

// measure runs every phase for a fleet of n beamlines on one control plane and returns the figures.
func measure(ctx context.Context, n int, o options, logw io.Writer) (*Result, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "[n=%d %s] "+format+"\n", append([]any{n, time.Now().Format("15:04:05")}, args...)...)
	}
	mem, err := shippedMemory()
	if err != nil {
		return nil, err
	}
	r := &Result{N: n, Setup: ptrTo(recordSetup(o.flags, mem))}

	// The fleet's beamlines: clusters of at most clusterSize beamlines.
	var clusterNames [][]string
	for left := n; left > 0; left -= clusterSize {
		names, err := fleet.Beamlines(min(left, clusterSize))
		if err != nil {
			return nil, err
		}
		clusterNames = append(clusterNames, names)
	}

	// --- the floor ----------------------------------------------------------------------------------
	// First, each run on a control plane of its own that is stopped after it, so that the floor and
	// the operator's stamp-out, which follows, are measured a minute apart on this shared machine
	// rather than a quarter of an hour (the operator's other phases come between them otherwise).
	if err := measureFloors(ctx, n, clusterNames, o, r, logf); err != nil {
		return nil, err
	}

	env, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	// Stopped before the convergence trials, which start control planes of their own.
	stopEnv := sync.OnceValue(env.Stop)
	defer func() {
		if err := stopEnv(); err != nil {
			log.Printf("stopping the control plane: %v", err)
		}
	}()
	audit, err := openAuditLog(env.AuditLogPath)
	if err != nil {
		return nil, err
	}
	defer audit.close()
	binDir, err := os.MkdirTemp("", "tiled-bench-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)
	bin, err := buildManager(ctx, binDir)
	if err != nil {
		return nil, err
	}
	hctx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	hc, informers, err := startHarness(hctx, env)
	if err != nil {
		return nil, err
	}

	fleets, systemNS, err := setUpFleets(ctx, hc, clusterNames)
	if err != nil {
		return nil, err
	}
	r.Clusters = len(fleets)

	// --- the operator, first replica ------------------------------------------------------------
	webhookPort, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	mark0, err := audit.mark()
	if err != nil {
		return nil, err
	}
	a, err := startManager(bin, "a", env, systemNS, mem, webhookPort, webhookPort)
	if err != nil {
		return nil, err
	}
	replicas := []*managerProc{a}
	defer func() {
		for _, m := range replicas {
			_ = m.stop(syscall.SIGKILL)
		}
	}()
	sampler := startRSSSampler(ctx, a, o.heapProfile != "")
	if err := waitStarted(ctx, hc, a, o); err != nil {
		return nil, err
	}
	startup, err := audit.since(mark0, actorOperator)
	if err != nil {
		return nil, err
	}
	r.StartupRequests = int64(len(startup))
	afterSync, err := a.traffic(ctx)
	if err != nil {
		return nil, err
	}

	// Stamp-out: every cluster is created at once, through the webhooks.
	settle(ctx, "the stamp-out")
	logf("stamp-out (%d clusters)", len(fleets))
	mark, err := audit.mark()
	if err != nil {
		return nil, err
	}
	cpu0 := readProcessCPU()
	waitProfiles := func() error { return nil }
	if o.cpuProfile != "" {
		waitProfiles = cpuProfiles(ctx, env.Config, a, o.cpuWindow, o.cpuProfile+".stampout")
	}
	start, err := stampOut(ctx, hc, a, fleets, o)
	if err != nil {
		return nil, err
	}
	r.StampoutCPU = readProcessCPU().since(cpu0)
	if err := waitProfiles(); err != nil {
		return nil, fmt.Errorf("CPU profiles of the stamp-out: %w", err)
	}
	stampAudit, err := phaseAudit(audit, mark)
	if err != nil {
		return nil, err
	}
	r.ConvergeSeconds = stampAudit.Last.Sub(start).Seconds()
	r.StampoutLastWrite = stampAudit.lastWriteSeconds(start)
	now, err := a.traffic(ctx)
	if err != nil {
		return nil, err
	}
	stamp := now.Sub(afterSync)
	versions, err := fleetVersions(ctx, hc, fleets)
	if err != nil {
		return nil, err
	}
	r.ObjectsCreated = len(versions)
	r.ObjectsByKind = countKinds(versions)
	r.StampoutWrites = stamp.Writes()
	r.StampoutObjectWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && !isStatus(k) && !isEvent(k) && k.Resource != "leases" })
	r.StampoutStatusWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && isStatus(k) })
	r.StampoutEventWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && isEvent(k) })
	r.StampoutLeaseWrites = stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && k.Resource == "leases" })
	r.WritesPerObject = float64(r.StampoutWrites) / float64(r.ObjectsCreated)
	r.StampoutRequestDetail = stamp.String()
	r.StampoutAuditRequests, r.StampoutAuditWrites = stampAudit.Total, stampAudit.Writes
	r.StampoutOperatorRequests = stamp.Total()
	r.RequestsPerObject = float64(stampAudit.Total) / float64(r.ObjectsCreated)
	r.StampoutKCMWrites, err = kcmWrites(audit, mark)
	if err != nil {
		return nil, err
	}
	logf("stamp-out: %d objects, %d writes (apiserver: %d requests, %d writes), %.1fs", r.ObjectsCreated, r.StampoutWrites, stampAudit.Total, stampAudit.Writes, r.ConvergeSeconds)

	// The later phases wait on the harness's caches of the instances and StatefulSets.
	if err := watchKinds(ctx, informers, &tiledv1alpha1.TiledInstance{}, &appsv1.StatefulSet{}); err != nil {
		return nil, err
	}

	// Idle: nothing changes; kube-controller-manager and the Lease go on.
	if !o.skip["idle"] {
		logf("idle for %s", o.idle)
		before, err := a.traffic(ctx)
		if err != nil {
			return nil, err
		}
		mark, err := audit.mark()
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(o.idle):
		}
		idle, err := phaseAudit(audit, mark)
		if err != nil {
			return nil, err
		}
		after, err := a.traffic(ctx)
		if err != nil {
			return nil, err
		}
		r.IdleSeconds = time.Since(t0).Seconds()
		r.IdleRequests = idle.Total
		r.IdleLease = idle.Leases
		r.IdleWatches = idle.Watches
		r.IdleOther = idle.Total - idle.Leases - idle.Watches
		r.IdleRequestDetail = idle.String()
		r.IdleOperatorRequests = after.Sub(before).Total()
	}

	// One profile field changes: the operations team's pod annotation, on every beamline.
	logf("profile change")
	intentsBefore, err := fleetIntents(ctx, informers, fleets)
	if err != nil {
		return nil, err
	}
	before, err := a.traffic(ctx)
	if err != nil {
		return nil, err
	}
	if mark, err = audit.mark(); err != nil {
		return nil, err
	}
	start = time.Now()
	for _, f := range fleets {
		if err := setProfileAnnotation(ctx, hc, f.ns, "controls"); err != nil {
			return nil, err
		}
	}
	if err := fleet.Poll(ctx, time.Second, o.timeout, "profile change", func(ctx context.Context) (bool, error) {
		now, err := fleetIntents(ctx, informers, fleets)
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
	if err := waitQuiet(ctx, a, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	change, err := phaseAudit(audit, mark)
	if err != nil {
		return nil, err
	}
	r.ProfileChangeSeconds = change.Last.Sub(start).Seconds()
	if now, err = a.traffic(ctx); err != nil {
		return nil, err
	}
	r.ProfileChangeWrites = now.Sub(before).Sum(func(k traffic.Key) bool { return k.IsWrite() && k.Resource != "leases" })
	r.ProfileChangeAuditRequests = change.Total - change.Leases - change.Watches
	r.ProfileChangeObjectsChanged = len(change.Written)
	r.ProfileChangeChangedByKind = change.writtenByResource()
	r.RequestsPerChangedObject = float64(r.ProfileChangeAuditRequests) / float64(max(1, len(change.Written)))

	// One instance override changes.
	logf("override change")
	first := fleets[0]
	if intentsBefore, err = fleetIntents(ctx, informers, fleets); err != nil {
		return nil, err
	}
	if before, err = a.traffic(ctx); err != nil {
		return nil, err
	}
	if mark, err = audit.mark(); err != nil {
		return nil, err
	}
	if err := setOverride(ctx, hc, first.ns, "nsls2", first.names[1]); err != nil {
		return nil, err
	}
	key := first.ns + "/nsls2-" + first.names[1]
	if err := fleet.Poll(ctx, 200*time.Millisecond, o.timeout, "override change", func(ctx context.Context) (bool, error) {
		now, err := fleetIntents(ctx, informers, fleets)
		return err == nil && now[key] != intentsBefore[key], err
	}); err != nil {
		return nil, err
	}
	if err := waitQuiet(ctx, a, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	override, err := phaseAudit(audit, mark)
	if err != nil {
		return nil, err
	}
	if now, err = a.traffic(ctx); err != nil {
		return nil, err
	}
	r.OverrideWrites = now.Sub(before).Sum(func(k traffic.Key) bool { return k.IsWrite() && k.Resource != "leases" })
	r.OverrideAuditRequests = override.Total - override.Leases - override.Watches
	for k := range override.Written {
		r.OverrideObjectsChanged = append(r.OverrideObjectsChanged, k)
	}
	sort.Strings(r.OverrideObjectsChanged)

	// The two counts of the first replica's whole run, side by side.
	all, err := a.traffic(ctx)
	if err != nil {
		return nil, err
	}
	allAudit, err := phaseAudit(audit, mark0)
	if err != nil {
		return nil, err
	}
	r.OperatorCountTotal = all.Total()
	r.AuditCountTotal = allAudit.Total
	r.ReadsAfterSync = all.Sub(afterSync).Reads()

	// Memory of the first replica: the kernel's high-water mark of its resident set.
	peakProfile := sampler.stop()
	r.RSSMiB = float64(a.statusKiB("VmHWM")) / 1024
	r.RSSAnonPeakMiB = float64(sampler.peakAnonKiB()) / 1024
	r.RSSFileMiB = float64(a.statusKiB("RssFile")) / 1024
	r.MemoryLimitMiB, r.MemoryRequestMiB = memMiB(mem.limit), memMiB(mem.request)
	if o.heapProfile != "" {
		end, err := a.heapProfile(ctx)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.heapProfile, end, 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.heapProfile+".peak", peakProfile, 0o644); err != nil {
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
	logf("first replica: rss peak %.0f MiB (anonymous peak %.0f MiB; now %d KiB anonymous, %d KiB of files)", r.RSSMiB, r.RSSAnonPeakMiB, a.statusKiB("RssAnon"), a.statusKiB("RssFile"))

	// Restart: the replica stops as in a rolling update (the Lease released), a new one starts on
	// the same webhook port, syncs, and must find nothing to write.
	logf("restart")
	if err := a.stop(syscall.SIGTERM); err != nil {
		return nil, err
	}
	if mark, err = audit.mark(); err != nil {
		return nil, err
	}
	start = time.Now()
	b, err := startManager(bin, "b", env, systemNS, mem, webhookPort, webhookPort)
	if err != nil {
		return nil, err
	}
	replicas = append(replicas, b)
	if err := waitLeading(ctx, b, 2*time.Minute); err != nil {
		return nil, err
	}
	if err := waitQuiet(ctx, b, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	restart, err := phaseAudit(audit, mark)
	if err != nil {
		return nil, err
	}
	r.RestartSeconds = restart.Last.Sub(start).Seconds()
	r.RestartObjectWrites = restart.objectWrites()
	r.RestartRequests = restart.Total
	r.RestartRequestDetail = restart.String()
	r.RestartRSSMiB = float64(b.statusKiB("VmHWM")) / 1024
	r.RestartRSSFileMiB = float64(b.statusKiB("RssFile")) / 1024
	logf("restart: %d requests, %d object writes, %.1fs", restart.Total, r.RestartObjectWrites, r.RestartSeconds)

	// Failover: a standby replica runs beside the leader; the leader is killed (no Lease release),
	// the standby takes over once the Lease expires, and must find nothing to write.
	logf("failover")
	standbyPort, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	c, err := startManager(bin, "c", env, systemNS, mem, standbyPort, webhookPort)
	if err != nil {
		return nil, err
	}
	replicas = append(replicas, c)
	if err := fleet.Poll(ctx, 200*time.Millisecond, time.Minute, "standby ready", func(ctx context.Context) (bool, error) {
		return c.ready(ctx), nil
	}); err != nil {
		return nil, err
	}
	if err := waitQuiet(ctx, c, o.quiet, o.timeout); err != nil { // the standby's certificate and webhook checks
		return nil, err
	}
	if mark, err = audit.mark(); err != nil {
		return nil, err
	}
	start = time.Now()
	if err := b.stop(syscall.SIGKILL); err != nil {
		return nil, err
	}
	if err := waitLeading(ctx, c, 2*time.Minute); err != nil {
		return nil, err
	}
	r.FailoverSeconds = time.Since(start).Seconds()
	if err := waitQuiet(ctx, c, o.quiet, o.timeout); err != nil {
		return nil, err
	}
	failover, err := phaseAudit(audit, mark)
	if err != nil {
		return nil, err
	}
	r.FailoverObjectWrites = failover.objectWrites()
	r.FailoverRequests = failover.Total
	r.FailoverRequestDetail = failover.String()
	logf("failover: new leader after %.1fs, %d requests, %d object writes", r.FailoverSeconds, failover.Total, r.FailoverObjectWrites)
	if err := c.stop(syscall.SIGTERM); err != nil {
		return nil, err
	}

	// The naive baseline's beamlines: the first cluster's, or every cluster's past one cluster.
	names := first.names
	if n > clusterSize {
		names = nil
		for _, f := range fleets {
			names = append(names, f.names...)
		}
	}
	// --- the naive baseline -----------------------------------------------------------------------
	if !o.skip["naive"] {
		logf("naive baseline")
		if err := runNaive(ctx, env, names, o, r); err != nil {
			return nil, fmt.Errorf("naive baseline: %w", err)
		}
	}

	if r.FloorSeconds > 0 {
		r.ConvergeRatio = r.ConvergeSeconds / r.FloorSeconds
		r.ConvergeBestRatio = r.ConvergeSeconds / r.FloorBestSeconds
	}

	// --- the engine alone -------------------------------------------------------------------------
	logf("engine")
	profs := profileValues(fleet.Profiles("bench"))
	ecluster := fleet.Cluster("bench", "nsls2", first.names)
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
	per := float64(len(first.names))
	r.ExpandNsPerInstance = float64(br.NsPerOp()) / per
	r.ExpandAllocsPerInst = float64(br.AllocsPerOp()) / per
	r.ExpandBytesPerInst = float64(br.AllocedBytesPerOp()) / per

	// --- convergence trials -----------------------------------------------------------------------
	// One run's converge/floor is one sample of a ratio of two times on a shared machine: the pairs
	// after the first are run again, each on control planes of their own, with nothing else running.
	if r.FloorSeconds > 0 && n <= clusterSize && o.trials > 0 {
		stopInformers()
		if err := stopEnv(); err != nil {
			return nil, err
		}
		r.ConvergeTrials = []ConvergeTrial{{
			FloorSeconds: r.FloorSeconds, ConvergeSeconds: r.ConvergeSeconds, Ratio: r.ConvergeRatio,
			FloorCPU: cpuTotal(r.FloorCPU), StampoutCPU: cpuTotal(r.StampoutCPU),
		}}
		for i := 2; i <= o.trials; i++ {
			logf("convergence trial %d of %d", i, o.trials)
			t, err := convergeTrial(ctx, clusterNames, bin, mem, o)
			if err != nil {
				return nil, fmt.Errorf("convergence trial %d: %w", i, err)
			}
			logf("convergence trial %d: floor %.1fs, converge %.1fs, ratio %.2f", i, t.FloorSeconds, t.ConvergeSeconds, t.Ratio)
			r.ConvergeTrials = append(r.ConvergeTrials, t)
		}
		r.ConvergeRatioMedian = medianRatio(r.ConvergeTrials)
	}
	logf("done")
	return r, nil
}

// setUpFleets creates, for each cluster's beamlines, a namespace with the profiles, and the
// operator's namespace.
func setUpFleets(ctx context.Context, hc client.Client, clusterNames [][]string) ([]fleetNamespace, string, error) {
	var fleets []fleetNamespace
	for _, names := range clusterNames {
		ns, err := fleet.NewNamespace(ctx, hc, "bench-operator")
		if err != nil {
			return nil, "", err
		}
		if err := fleet.Create(ctx, hc, fleet.ProfileObjects(fleet.Profiles(ns))...); err != nil {
			return nil, "", err
		}
		fleets = append(fleets, fleetNamespace{ns: ns, names: names})
	}
	systemNS, err := fleet.NewNamespace(ctx, hc, "tiled-operator-system")
	if err != nil {
		return nil, "", err
	}
	return fleets, systemNS, nil
}

// waitStarted waits until the replica m leads, has published the webhook configurations and is
// quiet after its cache sync.
func waitStarted(ctx context.Context, hc client.Client, m *managerProc, o options) error {
	if err := waitLeading(ctx, m, 2*time.Minute); err != nil {
		return err
	}
	if err := waitWebhooksPublished(ctx, hc); err != nil {
		return err
	}
	return waitQuiet(ctx, m, o.quiet, o.timeout)
}

// stampOut creates every cluster at once, through the webhooks, and waits until the operator m is
// quiet with each cluster stamped out. It returns when the first creation was sent. It watches
// nothing: each time the operator is quiet, it lists the instances and StatefulSets once from the
// API server (fleet.StampedOut), so that what it costs the API server does not grow with the events
// of the stamp-out, as a watch's would.
func stampOut(ctx context.Context, hc client.Client, m *managerProc, fleets []fleetNamespace, o options) (time.Time, error) {
	start := time.Now()
	for _, f := range fleets {
		cl := fleet.Cluster(f.ns, "nsls2", f.names)
		if err := fleet.Poll(ctx, 500*time.Millisecond, time.Minute, "creating the cluster", func(ctx context.Context) (bool, error) {
			return hc.Create(ctx, cl) == nil, nil
		}); err != nil {
			return start, err
		}
	}
	deadline := time.Now().Add(o.timeout)
	for {
		if err := waitQuiet(ctx, m, o.quiet, time.Until(deadline)); err != nil {
			return start, fmt.Errorf("stamp-out: %w", err)
		}
		done := true
		for _, f := range fleets {
			ok, err := fleet.StampedOut(ctx, hc, f.ns, "nsls2", len(f.names))
			if err != nil {
				return start, err
			}
			done = done && ok
		}
		if done {
			return start, nil
		}
		if time.Now().After(deadline) {
			return start, fmt.Errorf("stamp-out: not within %s", o.timeout)
		}
	}
}

// convergeTrial runs the floor at the operator's concurrency on a control plane of its own, then
// the operator's stamp-out on another, as the full run does, and returns the pair.
func convergeTrial(ctx context.Context, clusterNames [][]string, bin string, mem containerMemory, o options) (ConvergeTrial, error) {
	fleets := floorFleets(clusterNames)
	fl, err := runFreshFloor(ctx, fleets, controllers.DefaultInstanceConcurrency, "", 0)
	if err != nil {
		return ConvergeTrial{}, fmt.Errorf("floor: %w", err)
	}
	converge, cpu, err := freshStampOut(ctx, clusterNames, bin, mem, o)
	if err != nil {
		return ConvergeTrial{}, fmt.Errorf("stamp-out: %w", err)
	}
	return ConvergeTrial{
		FloorSeconds: fl.Seconds, ConvergeSeconds: converge, Ratio: converge / fl.Seconds,
		FloorCPU: cpuTotal(fl.CPU), StampoutCPU: cpuTotal(cpu),
	}, nil
}

// freshStampOut starts a control plane, the fleet's profiles and one replica of the operator, and
// measures the stamp-out as the full run does: from the first TiledCluster's creation to the
// apiserver's timestamp of the operator's last request, and the CPU every process used.
func freshStampOut(ctx context.Context, clusterNames [][]string, bin string, mem containerMemory, o options) (float64, processCPU, error) {
	env, err := startControlPlane()
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			log.Printf("stopping the trial's control plane: %v", err)
		}
	}()
	audit, err := openAuditLog(env.AuditLogPath)
	if err != nil {
		return 0, nil, err
	}
	defer audit.close()
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	hc, _, err := startHarness(hctx, env)
	if err != nil {
		return 0, nil, err
	}
	fleets, systemNS, err := setUpFleets(ctx, hc, clusterNames)
	if err != nil {
		return 0, nil, err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return 0, nil, err
	}
	m, err := startManager(bin, "trial", env, systemNS, mem, port, port)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = m.stop(syscall.SIGKILL) }()
	if err := waitStarted(ctx, hc, m, o); err != nil {
		return 0, nil, err
	}
	settle(ctx, "the trial's stamp-out")
	mark, err := audit.mark()
	if err != nil {
		return 0, nil, err
	}
	cpu0 := readProcessCPU()
	start, err := stampOut(ctx, hc, m, fleets, o)
	if err != nil {
		return 0, nil, err
	}
	cpu := readProcessCPU().since(cpu0)
	st, err := phaseAudit(audit, mark)
	if err != nil {
		return 0, nil, err
	}
	return st.Last.Sub(start).Seconds(), cpu, nil
}

// measureFloors runs the floor at each of floorConcurrencies (none with -skip floor), each on a
// fresh control plane, and records the runs in r: the one at the operator's concurrency as the
// floor, and the fastest.
func measureFloors(ctx context.Context, n int, clusterNames [][]string, o options, r *Result, logf func(string, ...any)) error {
	fleets := floorFleets(clusterNames)
	r.FloorConcurrency = controllers.DefaultInstanceConcurrency
	concurrencies := floorConcurrencies(r.FloorConcurrency, n)
	if o.skip["floor"] {
		concurrencies = nil
	}
	for _, conc := range concurrencies {
		logf("floor at concurrency %d", conc)
		profile := ""
		if o.cpuProfile != "" && conc == r.FloorConcurrency {
			profile = o.cpuProfile + ".floor"
		}
		fl, err := runFreshFloor(ctx, fleets, conc, profile, o.cpuWindow)
		if err != nil {
			return err
		}
		r.Floors = append(r.Floors, FloorRun{Concurrency: conc, Seconds: fl.Seconds, Requests: fl.Requests.Total(), Objects: fl.Objects, CPU: fl.CPU})
		logf("floor at %d: %d objects in %.1fs", conc, fl.Objects, fl.Seconds)
	}
	for _, f := range r.Floors {
		if f.Concurrency == r.FloorConcurrency {
			r.FloorSeconds, r.FloorRequests, r.FloorObjects, r.FloorCPU = f.Seconds, f.Requests, f.Objects, f.CPU
		}
		if r.FloorBestSeconds == 0 || f.Seconds < r.FloorBestSeconds {
			r.FloorBestSeconds, r.FloorBestConcurrency = f.Seconds, f.Concurrency
		}
	}
	return nil
}

// floorFleets are the fleet's clusters as a floor run takes them: beamlines only, the run creates
// their namespaces on its own control plane.
func floorFleets(clusterNames [][]string) []fleetNamespace {
	fleets := make([]fleetNamespace, len(clusterNames))
	for i, names := range clusterNames {
		fleets[i] = fleetNamespace{names: names}
	}
	return fleets
}

// floorConcurrencies are the concurrencies the floor runs at: the operator's, twice that, and up to
// N = 300 a plain sequential loop too (at N = 1,000 it takes minutes and is never the best); at
// N > 1,000 only the operator's (each run creates the fleet's objects once more).
func floorConcurrencies(operator, n int) []int {
	switch {
	case n > clusterSize:
		return []int{operator}
	case n >= clusterSize:
		return []int{operator, 2 * operator}
	}
	return []int{operator, 1, 2 * operator}
}

// phaseAudit sums the operator's requests after the mark, as the apiserver saw them.
func phaseAudit(a *auditLog, mark int) (auditCounts, error) {
	ev, err := a.since(mark, actorOperator)
	if err != nil {
		return auditCounts{}, err
	}
	return countAudit(ev), nil
}

// kcmWrites counts kube-controller-manager's writes after the mark (pods, StatefulSet status, binds).
func kcmWrites(a *auditLog, mark int) (int64, error) {
	ev, err := a.since(mark, actorKCM)
	if err != nil {
		return 0, err
	}
	return countAudit(ev).Writes, nil
}

// fleetVersions lists the resourceVersions of every fleet namespace's objects ("ns/Kind/name").
func fleetVersions(ctx context.Context, c client.Client, fleets []fleetNamespace) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range fleets {
		v, err := objectVersions(ctx, c, f.ns)
		if err != nil {
			return nil, err
		}
		for k, rv := range v {
			kind, name, _ := strings.Cut(k, "/")
			out[kind+"/"+f.ns+"/"+name] = rv
		}
	}
	return out, nil
}

// fleetIntents is serverIntents over every fleet namespace, by "ns/name".
func fleetIntents(ctx context.Context, r client.Reader, fleets []fleetNamespace) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range fleets {
		v, err := serverIntents(ctx, r, f.ns)
		if err != nil {
			return nil, err
		}
		for name, intent := range v {
			out[f.ns+"/"+name] = intent
		}
	}
	return out, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
