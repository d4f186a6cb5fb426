package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/traffic"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/hack/fleet"
	"github.com/bluesky/tiled-operator/hack/testenv"
	"github.com/bluesky/tiled-operator/render"
)

// floorResult is what the plain-apply floor cost.
type floorResult struct {
	Seconds  float64
	Requests traffic.Snapshot
	Objects  int
}

// runFloor applies, in a plain sequential loop (the operator reconciles one object at a time too),
// the very objects the operator creates: each expanded TiledInstance and the objects rendered from
// it, with server-side apply, through a client built from the same rest config against the same
// apiserver. Nothing is read, nothing is compared, nothing is skipped: the least a writer can send.
func runFloor(ctx context.Context, cfg *rest.Config, ns string, names []string) (*floorResult, error) {
	profs := profileValues(fleet.Profiles(ns))
	cluster := fleet.Cluster(ns, "nsls2", names)
	res, err := expansion.Expand(cluster, profs, expansion.DefaultBuiltins())
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
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
	objects := 0
	start := time.Now()
	for _, inst := range res.Instances {
		u, err := instanceObject(inst.Object, ns, nil)
		if err != nil {
			return nil, err
		}
		if err := apply(u); err != nil {
			return nil, err
		}
		// The apply answered with the stored object: its UID owns the children.
		inst.Object.UID = u.GetUID()
		inst.Object.Namespace = ns
		objects++
		data, err := render.GenerateSecretData(inst.Object, nil, rand.Reader)
		if err != nil {
			return nil, err
		}
		children, err := childObjects(inst.Object, data)
		if err != nil {
			return nil, err
		}
		for _, ch := range children {
			if err := apply(ch); err != nil {
				return nil, err
			}
			objects++
		}
	}
	return &floorResult{Seconds: time.Since(start).Seconds(), Requests: counter.Snapshot(), Objects: objects}, nil
}
