package fleetmetrics

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// listReader answers List with fixed lists, as the cache does (no copy), so that the benchmark
// measures the Collector alone.
type listReader struct {
	client.Reader
	clusters  []tiledv1alpha1.TiledCluster
	instances []tiledv1alpha1.TiledInstance
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	switch l := list.(type) {
	case *tiledv1alpha1.TiledClusterList:
		l.Items = r.clusters
	case *tiledv1alpha1.TiledInstanceList:
		l.Items = r.instances
	}
	return nil
}

// BenchmarkGather3000 is one scrape of a fleet of 100 clusters of 30 beamlines (3,000 instances,
// each with a daily backup schedule) through a registry: the cost the leader pays per scrape.
func BenchmarkGather3000(b *testing.B) {
	r := &listReader{}
	for c := range 100 {
		beamlines := make([]string, 30)
		for i := range beamlines {
			beamlines[i] = fmt.Sprintf("bl%02d", i)
		}
		name := fmt.Sprintf("site%03d", c)
		r.clusters = append(r.clusters, *cluster(name, nil, beamlines...))
		for _, bl := range beamlines {
			r.instances = append(r.instances, *member(name, bl, backups("30 2 * * *", false, &now)))
		}
	}
	c := New(r, WithMinInterval(0)) // every scrape reads: the cost of one that does
	c.SetLeader(true)
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
