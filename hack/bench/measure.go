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

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// phases are the steps of one fleet size's measurement, run in this order by measure. The floor
// comes first, each run on a control plane of its own that is stopped after it, so that the floor
// and the operator's stamp-out, which follows, are measured a minute apart on this shared machine
// rather than a quarter of an hour (the operator's other phases come between them otherwise). The
// convergence trials come last: they stop the shared control plane and start their own. A phase
// with skip set is left out when -skip names it.
var phases = []phase{
	{name: "plan", run: (*measurement).plan},
	{name: "floor", run: (*measurement).floors},
	{name: "control plane", run: (*measurement).controlPlane},
	{name: "manager binary", run: (*measurement).managerBinary},
	{name: "harness", run: (*measurement).harness},
	{name: "fleets", run: (*measurement).setUpFleets},
	{name: "first replica", run: (*measurement).firstReplica},
	{name: "stamp-out", run: (*measurement).stampOut},
	{name: "idle", skip: "idle", run: (*measurement).idle},
	{name: "profile change", run: (*measurement).profileChange},
	{name: "override change", run: (*measurement).overrideChange},
	{name: "first replica's counts", run: (*measurement).counts},
	{name: "first replica's memory", run: (*measurement).memory},
	{name: "restart", run: (*measurement).restart},
	{name: "failover", run: (*measurement).failover},
	{name: "naive baseline", skip: "naive", run: (*measurement).naive},
	{name: "converge ratio", run: (*measurement).convergeRatio},
	{name: "engine", run: (*measurement).engine},
	{name: "convergence trials", run: (*measurement).convergenceTrials},
}

// phase is one named step of a measurement.
type phase struct {
	name string
	// skip is the -skip word that leaves the phase out; empty for a phase that always runs.
	skip string
	run  func(m *measurement, ctx context.Context) error
}

// measurement is what the phases of one fleet size share: the figures they fill in (r) and what
// the earlier phases started for the later ones.
type measurement struct {
	n    int
	o    options
	logf func(format string, args ...any)
	r    *Result
	mem  containerMemory

	// clusterNames are the fleet's beamlines: clusters of at most clusterSize beamlines.
	clusterNames [][]string

	env     *testenv.Env
	stopEnv func() error // stops env once: before the convergence trials, or at the end
	audit   *auditLog
	bin     string // the manager binary

	hc            client.Client // the harness's client
	informers     cache.Cache   // the harness's informers
	stopInformers context.CancelFunc

	fleets      []fleetNamespace
	systemNS    string
	webhookPort int

	a, b      *managerProc   // the first replica, and the one started after a's restart
	replicas  []*managerProc // every replica started, killed at the end
	sampler   *rssSampler    // the first replica's memory
	mark0     int            // the audit log's mark before the first replica started
	afterSync traffic.Snapshot

	cleanups []func() // run last first when the measurement ends
}

// measure runs every phase for a fleet of n beamlines on one control plane and returns the figures.
func measure(ctx context.Context, n int, o options, logw io.Writer) (*Result, error) {
	m := &measurement{n: n, o: o, logf: func(format string, args ...any) {
		fmt.Fprintf(logw, "[n=%d %s] "+format+"\n", append([]any{n, time.Now().Format("15:04:05")}, args...)...)
	}}
	defer m.cleanUp()
	for _, p := range phases {
		if p.skip != "" && o.skip[p.skip] {
			continue
		}
		if err := p.run(m, ctx); err != nil {
			return nil, err
		}
	}
	m.logf("done")
	return m.r, nil
}

// onEnd runs f when the measurement ends, before what was registered earlier.
func (m *measurement) onEnd(f func()) { m.cleanups = append(m.cleanups, f) }

func (m *measurement) cleanUp() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
}

// plan reads the Deployment's memory settings and splits the fleet into clusters.
func (m *measurement) plan(context.Context) error {
	mem, err := shippedMemory()
	if err != nil {
		return err
	}
	m.mem = mem
	m.r = &Result{N: m.n, Setup: ptrTo(recordSetup(m.o.flags, mem))}
	for left := m.n; left > 0; left -= clusterSize {
		names, err := fleet.Beamlines(min(left, clusterSize))
		if err != nil {
			return err
		}
		m.clusterNames = append(m.clusterNames, names)
	}
	return nil
}

// floors runs the floor at each of its concurrencies, each on a control plane of its own.
func (m *measurement) floors(ctx context.Context) error {
	return measureFloors(ctx, m.n, m.clusterNames, m.o, m.r, m.logf)
}

// controlPlane starts the control plane the operator's phases share, and opens its audit log.
func (m *measurement) controlPlane(context.Context) error {
	env, err := startControlPlane()
	if err != nil {
		return err
	}
	m.env = env
	// Stopped before the convergence trials, which start control planes of their own.
	m.stopEnv = sync.OnceValue(env.Stop)
	m.onEnd(func() {
		if err := m.stopEnv(); err != nil {
			log.Printf("stopping the control plane: %v", err)
		}
	})
	audit, err := openAuditLog(env.AuditLogPath)
	if err != nil {
		return err
	}
	m.audit = audit
	m.onEnd(func() { _ = audit.close() })
	return nil
}

// managerBinary builds the manager into a folder of its own.
func (m *measurement) managerBinary(ctx context.Context) error {
	binDir, err := os.MkdirTemp("", "tiled-bench-bin-")
	if err != nil {
		return err
	}
	m.onEnd(func() { _ = os.RemoveAll(binDir) })
	m.bin, err = buildManager(ctx, binDir)
	return err
}

// harness starts the harness's client and informers.
func (m *measurement) harness(ctx context.Context) error {
	hctx, stopInformers := context.WithCancel(ctx)
	m.stopInformers = stopInformers
	m.onEnd(stopInformers)
	var err error
	m.hc, m.informers, err = startHarness(hctx, m.env)
	return err
}

// setUpFleets creates the clusters' namespaces with their profiles, and the operator's namespace.
func (m *measurement) setUpFleets(ctx context.Context) error {
	var err error
	if m.fleets, m.systemNS, err = setUpFleets(ctx, m.hc, m.clusterNames); err != nil {
		return err
	}
	m.r.Clusters = len(m.fleets)
	return nil
}

// firstReplica starts the operator's first replica and waits until it leads, has published the
// webhook configurations and is quiet; it records the requests of its start.
func (m *measurement) firstReplica(ctx context.Context) error {
	var err error
	if m.webhookPort, err = testenv.FreePort(); err != nil {
		return err
	}
	if m.mark0, err = m.audit.mark(); err != nil {
		return err
	}
	if m.a, err = startManager(m.bin, "a", m.env, m.systemNS, m.mem, m.webhookPort, m.webhookPort); err != nil {
		return err
	}
	m.replicas = []*managerProc{m.a}
	m.onEnd(func() {
		for _, p := range m.replicas {
			_ = p.stop(syscall.SIGKILL)
		}
	})
	m.sampler = startRSSSampler(ctx, m.a, m.o.heapProfile != "")
	if err := waitStarted(ctx, m.hc, m.a, m.o); err != nil {
		return err
	}
	startup, err := m.audit.since(m.mark0, actorOperator)
	if err != nil {
		return err
	}
	m.r.StartupRequests = int64(len(startup))
	m.afterSync, err = m.a.traffic(ctx)
	return err
}

// stampOut creates every cluster at once, through the webhooks, and records the stamp-out's time,
// CPU and requests; the later phases then wait on the harness's caches of the instances and
// StatefulSets.
func (m *measurement) stampOut(ctx context.Context) error {
	r, a := m.r, m.a
	settle(ctx, "the stamp-out")
	m.logf("stamp-out (%d clusters)", len(m.fleets))
	mark, err := m.audit.mark()
	if err != nil {
		return err
	}
	cpu0 := readProcessCPU()
	waitProfiles := func() error { return nil }
	if m.o.cpuProfile != "" {
		waitProfiles = cpuProfiles(ctx, m.env.Config, a, m.o.cpuWindow, m.o.cpuProfile+".stampout")
	}
	start, err := stampOut(ctx, m.hc, a, m.fleets, m.o)
	if err != nil {
		return err
	}
	r.StampoutCPU = readProcessCPU().since(cpu0)
	if err := waitProfiles(); err != nil {
		return fmt.Errorf("CPU profiles of the stamp-out: %w", err)
	}
	stampAudit, err := phaseAudit(m.audit, mark)
	if err != nil {
		return err
	}
	r.ConvergeSeconds = stampAudit.Last.Sub(start).Seconds()
	r.StampoutLastWrite = stampAudit.lastWriteSeconds(start)
	now, err := a.traffic(ctx)
	if err != nil {
		return err
	}
	stamp := now.Sub(m.afterSync)
	versions, err := fleetVersions(ctx, m.hc, m.fleets)
	if err != nil {
		return err
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
	if r.StampoutKCMWrites, err = kcmWrites(m.audit, mark); err != nil {
		return err
	}
	m.logf("stamp-out: %d objects, %d writes (apiserver: %d requests, %d writes), %.1fs", r.ObjectsCreated, r.StampoutWrites, stampAudit.Total, stampAudit.Writes, r.ConvergeSeconds)

	// The later phases wait on the harness's caches of the instances and StatefulSets.
	return watchKinds(ctx, m.informers, &tiledv1alpha1.TiledInstance{}, &appsv1.StatefulSet{})
}

// idle: nothing changes; kube-controller-manager and the Lease go on.
func (m *measurement) idle(ctx context.Context) error {
	r, a := m.r, m.a
	m.logf("idle for %s", m.o.idle)
	before, err := a.traffic(ctx)
	if err != nil {
		return err
	}
	mark, err := m.audit.mark()
	if err != nil {
		return err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(m.o.idle):
	}
	idle, err := phaseAudit(m.audit, mark)
	if err != nil {
		return err
	}
	after, err := a.traffic(ctx)
	if err != nil {
		return err
	}
	r.IdleSeconds = time.Since(t0).Seconds()
	r.IdleRequests = idle.Total
	r.IdleLease = idle.Leases
	r.IdleWatches = idle.Watches
	r.IdleOther = idle.Total - idle.Leases - idle.Watches
	r.IdleRequestDetail = idle.String()
	r.IdleOperatorRequests = after.Sub(before).Total()
	return nil
}

// profileChange changes one profile field: the operations team's pod annotation, on every beamline.
func (m *measurement) profileChange(ctx context.Context) error {
	c, err := m.change(ctx, "profile change", time.Second, func(ctx context.Context) error {
		for _, f := range m.fleets {
			if err := setProfileAnnotation(ctx, m.hc, f.ns, "controls"); err != nil {
				return err
			}
		}
		return nil
	}, func(before, now map[string]string) bool {
		if len(now) != m.n {
			return false
		}
		for name, intent := range now {
			if intent == before[name] {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	r := m.r
	r.ProfileChangeSeconds = c.audit.Last.Sub(c.start).Seconds()
	r.ProfileChangeWrites = c.writes
	r.ProfileChangeAuditRequests = c.audit.Total - c.audit.Leases - c.audit.Watches
	r.ProfileChangeObjectsChanged = len(c.audit.Written)
	r.ProfileChangeChangedByKind = c.audit.writtenByResource()
	r.RequestsPerChangedObject = float64(r.ProfileChangeAuditRequests) / float64(max(1, len(c.audit.Written)))
	return nil
}

// overrideChange changes one instance's override.
func (m *measurement) overrideChange(ctx context.Context) error {
	first := m.fleets[0]
	key := first.ns + "/nsls2-" + first.names[1]
	c, err := m.change(ctx, "override change", 200*time.Millisecond, func(ctx context.Context) error {
		return setOverride(ctx, m.hc, first.ns, "nsls2", first.names[1])
	}, func(before, now map[string]string) bool {
		return now[key] != before[key]
	})
	if err != nil {
		return err
	}
	r := m.r
	r.OverrideWrites = c.writes
	r.OverrideAuditRequests = c.audit.Total - c.audit.Leases - c.audit.Watches
	for k := range c.audit.Written {
		r.OverrideObjectsChanged = append(r.OverrideObjectsChanged, k)
	}
	sort.Strings(r.OverrideObjectsChanged)
	return nil
}

// changed is what a change of the fleet cost the first replica.
type changed struct {
	start  time.Time   // when the change was sent
	audit  auditCounts // the replica's requests from then on, as the apiserver saw them
	writes int64       // its writes by its own count, Lease renewals left out
}

// change sends a change of the fleet (apply) and measures the first replica's answer: from the
// instances' intents before, it polls them every interval until done says they moved, then waits
// until the replica is quiet.
func (m *measurement) change(ctx context.Context, what string, interval time.Duration, apply func(context.Context) error, done func(before, now map[string]string) bool) (changed, error) {
	a := m.a
	m.logf(what)
	intentsBefore, err := fleetIntents(ctx, m.informers, m.fleets)
	if err != nil {
		return changed{}, err
	}
	before, err := a.traffic(ctx)
	if err != nil {
		return changed{}, err
	}
	mark, err := m.audit.mark()
	if err != nil {
		return changed{}, err
	}
	c := changed{start: time.Now()}
	if err := apply(ctx); err != nil {
		return changed{}, err
	}
	if err := fleet.Poll(ctx, interval, m.o.timeout, what, func(ctx context.Context) (bool, error) {
		now, err := fleetIntents(ctx, m.informers, m.fleets)
		if err != nil {
			return false, err
		}
		return done(intentsBefore, now), nil
	}); err != nil {
		return changed{}, err
	}
	if err := waitQuiet(ctx, a, m.o.quiet, m.o.timeout); err != nil {
		return changed{}, err
	}
	if c.audit, err = phaseAudit(m.audit, mark); err != nil {
		return changed{}, err
	}
	now, err := a.traffic(ctx)
	if err != nil {
		return changed{}, err
	}
	c.writes = now.Sub(before).Sum(func(k traffic.Key) bool { return k.IsWrite() && k.Resource != "leases" })
	return c, nil
}

// counts records the two counts of the first replica's whole run, side by side.
func (m *measurement) counts(ctx context.Context) error {
	all, err := m.a.traffic(ctx)
	if err != nil {
		return err
	}
	allAudit, err := phaseAudit(m.audit, m.mark0)
	if err != nil {
		return err
	}
	m.r.OperatorCountTotal = all.Total()
	m.r.AuditCountTotal = allAudit.Total
	m.r.ReadsAfterSync = all.Sub(m.afterSync).Reads()
	return nil
}

// memory records the first replica's memory: the kernel's high-water mark of its resident set, and
// with -heap-profile its heap profiles.
func (m *measurement) memory(ctx context.Context) error {
	r, a, o := m.r, m.a, m.o
	peakProfile := m.sampler.stop()
	r.RSSMiB = float64(a.statusKiB("VmHWM")) / 1024
	r.RSSAnonPeakMiB = float64(m.sampler.peakAnonKiB()) / 1024
	r.RSSFileMiB = float64(a.statusKiB("RssFile")) / 1024
	r.MemoryLimitMiB, r.MemoryRequestMiB = memMiB(m.mem.limit), memMiB(m.mem.request)
	if o.heapProfile != "" {
		end, err := a.heapProfile(ctx)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.heapProfile, end, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(o.heapProfile+".peak", peakProfile, 0o644); err != nil {
			return err
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
	m.logf("first replica: rss peak %.0f MiB (anonymous peak %.0f MiB; now %d KiB anonymous, %d KiB of files)", r.RSSMiB, r.RSSAnonPeakMiB, a.statusKiB("RssAnon"), a.statusKiB("RssFile"))
	return nil
}

// restart: the replica stops as in a rolling update (the Lease released), a new one starts on the
// same webhook port, syncs, and must find nothing to write.
func (m *measurement) restart(ctx context.Context) error {
	r := m.r
	m.logf("restart")
	if err := m.a.stop(syscall.SIGTERM); err != nil {
		return err
	}
	mark, err := m.audit.mark()
	if err != nil {
		return err
	}
	start := time.Now()
	b, err := startManager(m.bin, "b", m.env, m.systemNS, m.mem, m.webhookPort, m.webhookPort)
	if err != nil {
		return err
	}
	m.b = b
	m.replicas = append(m.replicas, b)
	if err := waitLeading(ctx, b, 2*time.Minute); err != nil {
		return err
	}
	if err := waitQuiet(ctx, b, m.o.quiet, m.o.timeout); err != nil {
		return err
	}
	restart, err := phaseAudit(m.audit, mark)
	if err != nil {
		return err
	}
	r.RestartSeconds = restart.Last.Sub(start).Seconds()
	r.RestartObjectWrites = restart.objectWrites()
	r.RestartRequests = restart.Total
	r.RestartRequestDetail = restart.String()
	r.RestartRSSMiB = float64(b.statusKiB("VmHWM")) / 1024
	r.RestartRSSFileMiB = float64(b.statusKiB("RssFile")) / 1024
	m.logf("restart: %d requests, %d object writes, %.1fs", restart.Total, r.RestartObjectWrites, r.RestartSeconds)
	return nil
}

// failover: a standby replica runs beside the leader; the leader is killed (no Lease release), the
// standby takes over once the Lease expires, and must find nothing to write.
func (m *measurement) failover(ctx context.Context) error {
	r := m.r
	m.logf("failover")
	standbyPort, err := testenv.FreePort()
	if err != nil {
		return err
	}
	c, err := startManager(m.bin, "c", m.env, m.systemNS, m.mem, standbyPort, m.webhookPort)
	if err != nil {
		return err
	}
	m.replicas = append(m.replicas, c)
	if err := fleet.Poll(ctx, 200*time.Millisecond, time.Minute, "standby ready", func(ctx context.Context) (bool, error) {
		return c.ready(ctx), nil
	}); err != nil {
		return err
	}
	if err := waitQuiet(ctx, c, m.o.quiet, m.o.timeout); err != nil { // the standby's certificate and webhook checks
		return err
	}
	mark, err := m.audit.mark()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := m.b.stop(syscall.SIGKILL); err != nil {
		return err
	}
	if err := waitLeading(ctx, c, 2*time.Minute); err != nil {
		return err
	}
	r.FailoverSeconds = time.Since(start).Seconds()
	if err := waitQuiet(ctx, c, m.o.quiet, m.o.timeout); err != nil {
		return err
	}
	failover, err := phaseAudit(m.audit, mark)
	if err != nil {
		return err
	}
	r.FailoverObjectWrites = failover.objectWrites()
	r.FailoverRequests = failover.Total
	r.FailoverRequestDetail = failover.String()
	m.logf("failover: new leader after %.1fs, %d requests, %d object writes", r.FailoverSeconds, failover.Total, r.FailoverObjectWrites)
	return c.stop(syscall.SIGTERM)
}

// naive runs the naive baseline over the first cluster's beamlines, or every cluster's past one
// cluster.
func (m *measurement) naive(ctx context.Context) error {
	names := m.fleets[0].names
	if m.n > clusterSize {
		names = nil
		for _, f := range m.fleets {
			names = append(names, f.names...)
		}
	}
	m.logf("naive baseline")
	if err := runNaive(ctx, m.env, names, m.o, m.r); err != nil {
		return fmt.Errorf("naive baseline: %w", err)
	}
	return nil
}

// convergeRatio is the stamp-out's time over the floor's, at the operator's concurrency and at the
// fastest.
func (m *measurement) convergeRatio(context.Context) error {
	if r := m.r; r.FloorSeconds > 0 {
		r.ConvergeRatio = r.ConvergeSeconds / r.FloorSeconds
		r.ConvergeBestRatio = r.ConvergeSeconds / r.FloorBestSeconds
	}
	return nil
}

// engine measures the expansion engine alone over the first cluster's beamlines.
func (m *measurement) engine(context.Context) error {
	m.logf("engine")
	first := m.fleets[0]
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
		return benchErr
	}
	per := float64(len(first.names))
	m.r.ExpandNsPerInstance = float64(br.NsPerOp()) / per
	m.r.ExpandAllocsPerInst = float64(br.AllocsPerOp()) / per
	m.r.ExpandBytesPerInst = float64(br.AllocedBytesPerOp()) / per
	return nil
}

// convergenceTrials: one run's converge/floor is one sample of a ratio of two times on a shared
// machine: the pairs after the first are run again, each on control planes of their own, with
// nothing else running.
func (m *measurement) convergenceTrials(ctx context.Context) error {
	r, o := m.r, m.o
	if r.FloorSeconds <= 0 || m.n > clusterSize || o.trials <= 0 {
		return nil
	}
	m.stopInformers()
	if err := m.stopEnv(); err != nil {
		return err
	}
	r.ConvergeTrials = []ConvergeTrial{{
		FloorSeconds: r.FloorSeconds, ConvergeSeconds: r.ConvergeSeconds, Ratio: r.ConvergeRatio,
		FloorCPU: cpuTotal(r.FloorCPU), StampoutCPU: cpuTotal(r.StampoutCPU),
	}}
	for i := 2; i <= o.trials; i++ {
		m.logf("convergence trial %d of %d", i, o.trials)
		t, err := convergeTrial(ctx, m.clusterNames, m.bin, m.mem, o)
		if err != nil {
			return fmt.Errorf("convergence trial %d: %w", i, err)
		}
		m.logf("convergence trial %d: floor %.1fs, converge %.1fs, ratio %.2f", i, t.FloorSeconds, t.ConvergeSeconds, t.Ratio)
		r.ConvergeTrials = append(r.ConvergeTrials, t)
	}
	r.ConvergeRatioMedian = medianRatio(r.ConvergeTrials)
	return nil
}
