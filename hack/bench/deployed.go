package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/operator/traffic"
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
