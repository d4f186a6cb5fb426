package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// floorResult is what the plain-apply floor cost.
type floorResult struct {
	Seconds  float64
	Requests traffic.Snapshot
	Objects  int
	// CPU is the CPU time each process used during the run (runFreshFloor's control plane and the
	// harness, which runs the floor's client).
	CPU map[string]float64
}

// runFloor applies the very objects the operator creates — each expanded TiledInstance and the
// objects rendered from it — with server-side apply, through a client of its own against the same
// apiserver, with `concurrency` instances in flight at once (the operator reconciles
// controllers.DefaultInstanceConcurrency instances at once). Each fleet cluster goes to a new
// namespace. Nothing is read, nothing is compared, nothing is skipped: the least a writer can send.
// The client-side rate limit is off, as in the manager (controller-runtime's default).
func runFloor(ctx context.Context, cfg *rest.Config, hc client.Client, fleets []fleetNamespace, concurrency int) (*floorResult, error) {
	type job struct {
		ns   string
		inst *tiledv1alpha1.TiledInstance
	}
	var jobs []job
	for _, f := range fleets {
		ns, err := fleet.NewNamespace(ctx, hc, "bench-floor")
		if err != nil {
			return nil, err
		}
		res, err := expansion.Expand(fleet.Cluster(ns, "nsls2", f.names), profileValues(fleet.Profiles(ns)), expansion.DefaultBuiltins())
		if err != nil {
			return nil, err
		}
		for _, inst := range res.Instances {
			jobs = append(jobs, job{ns: ns, inst: inst.Object})
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "tiled-bench/floor"
	counter := traffic.New(nil)
	counter.Instrument(cfg)
	c, err := client.New(cfg, client.Options{Scheme: testenv.NewScheme()})
	if err != nil {
		return nil, err
	}
	// apply sends one server-side apply; u is replaced by the stored object.
	apply := func(u *unstructured.Unstructured) error {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("bench-floor"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return nil
	}
	one := func(j job) (int, error) {
		u, err := instanceObject(j.inst, j.ns, nil)
		if err != nil {
			return 0, err
		}
		if err := apply(u); err != nil {
			return 0, err
		}
		// The apply answered with the stored object: its UID owns the children.
		j.inst.UID = u.GetUID()
		j.inst.Namespace = j.ns
		data, err := render.GenerateSecretData(j.inst, nil, rand.Reader)
		if err != nil {
			return 0, err
		}
		children, err := childObjects(j.inst, data)
		if err != nil {
			return 0, err
		}
		for _, ch := range children {
			if err := apply(ch); err != nil {
				return 0, err
			}
		}
		return 1 + len(children), nil
	}
	work := make(chan job)
	var (
		mu      sync.Mutex
		objects int
		firstEr error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				k, err := one(j)
				mu.Lock()
				objects += k
				if err != nil && firstEr == nil {
					firstEr = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	if firstEr != nil {
		return nil, firstEr
	}
	return &floorResult{Seconds: time.Since(start).Seconds(), Requests: counter.Snapshot(), Objects: objects}, nil
}

// runFreshFloor runs the floor on a control plane of its own, started as the operator's was (the
// same apiserver flags and audit log, kube-controller-manager with the same controllers, the
// harness's static provisioner binding the claims) and stopped after: the floor then starts from
// an empty etcd as the operator's stamp-out did, not on top of the operator's fleet.
//
// With a profile path, a CPU profile of kube-apiserver over the first cpuWindow of the floor is
// written to PROFILE.apiserver.
func runFreshFloor(ctx context.Context, fleets []fleetNamespace, concurrency int, profile string, cpuWindow time.Duration) (*floorResult, error) {
	env, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			log.Printf("stopping the floor's control plane: %v", err)
		}
	}()
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	hc, _, err := startHarness(pctx, env)
	if err != nil {
		return nil, err
	}
	waitProfile := func() error { return nil }
	if profile != "" {
		waitProfile = cpuProfiles(ctx, env.Config, nil, cpuWindow, profile)
	}
	settle(ctx, fmt.Sprintf("the floor at concurrency %d", concurrency))
	cpu0 := readProcessCPU()
	fl, err := runFloor(ctx, env.Config, hc, fleets, concurrency)
	if err != nil {
		return nil, err
	}
	fl.CPU = readProcessCPU().since(cpu0)
	if err := waitProfile(); err != nil {
		return nil, fmt.Errorf("CPU profile of the floor: %w", err)
	}
	return fl, nil
}
