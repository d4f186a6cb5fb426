package fleetmetrics

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// LeaderRunnable returns the manager.Runnable that turns c on while this replica leads: the manager
// starts it once leader election is won (at once without leader election). It waits for the
// informers of TiledClusters and TiledInstances (the controllers' own: the same kinds, so none is
// added) to sync, so that the first scrape does not report an empty fleet, and turns c off when the
// manager stops.
func (c *Collector) LeaderRunnable(informers cache.Informers) manager.Runnable {
	return &leaderRunnable{c: c, informers: informers}
}

type leaderRunnable struct {
	c         *Collector
	informers cache.Informers
}

var _ manager.LeaderElectionRunnable = (*leaderRunnable)(nil)

// NeedLeaderElection is true: the runnable starts only on the leader.
func (*leaderRunnable) NeedLeaderElection() bool { return true }

// Start waits for the two kinds' informers to sync, turns the Collector on, and off again when ctx
// ends. An informer that cannot start leaves the Collector off (logged) rather than stopping the
// manager.
func (r *leaderRunnable) Start(ctx context.Context) error {
	defer r.c.SetLeader(false)
	for _, obj := range []client.Object{&tiledv1alpha1.TiledCluster{}, &tiledv1alpha1.TiledInstance{}} {
		if _, err := r.informers.GetInformer(ctx, obj, cache.BlockUntilSynced(true)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The fleet's metrics are not worth stopping the manager for: the controllers, which
			// read the same informers, report what is wrong.
			r.c.log.Error(fmt.Errorf("waiting for the cache of %T: %w", obj, err), "fleet metrics stay off")
			<-ctx.Done()
			return nil
		}
	}
	r.c.SetLeader(true)
	<-ctx.Done()
	return nil
}
