package expansion

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// benchFleet is the NSLS-II sample scaled to n instances, with five profiles (three of them with
// expressions): every tenth instance takes the MX family profile, every seventh has an override.
func benchFleet(b *testing.B, n int) (*v1alpha1.TiledCluster, []v1alpha1.TiledProfile) {
	return benchFleetT(b, n)
}

func benchFleetT(b testing.TB, n int) (*v1alpha1.TiledCluster, []v1alpha1.TiledProfile) {
	cluster, profs := loadFleet(b)
	extra := []v1alpha1.TiledProfile{
		P(b, "nsls2-network", 3, `tiled:
  env:
  - {name: TILED_PUBLIC_URL, valueExpression: "'https://' + instance.name + '.tiled.nsls2.bnl.gov/api'"}
  podLabels: {network: science-dmz}
expose:
  service: {annotations: {nsls2.bnl.gov/zone: dmz}}`),
		P(b, "nsls2-detectors", 7, `storage:
  readOnlyMounts:
  - name: detectors
    mountPath: /nsls2/detectors
    nfs: {server: nfs-det.nsls2.bnl.gov, pathExpression: "'/nsls2/detectors/' + instance.name"}`),
	}
	for i := range extra {
		extra[i].Namespace, extra[i].Labels = cluster.Namespace, map[string]string{"facility": "nsls2"}
	}
	profs = append(profs, extra...)
	cluster.Spec.Instances = nil
	for i := 0; i < n; i++ {
		in := v1alpha1.ClusterInstance{Name: fmt.Sprintf("bl%04d", i)}
		if i%10 == 0 {
			in.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"family": "mx"}}
		}
		if i%7 == 0 {
			in.Overrides = T(b, "storage: {data: {size: 2Ti}}\ntiled: {env: [{name: BEAMLINE_OVERRIDE, value: 'yes'}]}")
		}
		cluster.Spec.Instances = append(cluster.Spec.Instances, in)
	}
	return cluster, profs
}

func BenchmarkExpand(b *testing.B) {
	for _, n := range []int{30, 300, 1000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			cluster, profs := benchFleet(b, n)
			builtins := DefaultBuiltins()
			if _, err := Expand(cluster, profs, builtins); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := Expand(cluster, profs, builtins); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/instance")
		})
	}
}

// Allocations per instance do not grow with the number of instances: the cost of an expansion is
// linear. (Allocations, unlike time, are deterministic enough to test.)
func TestExpandScalesLinearly(t *testing.T) {
	if testing.Short() {
		t.Skip("expands 1,300 instances")
	}
	perInstance := func(n int) float64 {
		cluster, profs := benchFleetT(t, n)
		builtins := DefaultBuiltins()
		return testing.AllocsPerRun(2, func() {
			if _, err := Expand(cluster, profs, builtins); err != nil {
				t.Fatal(err)
			}
		}) / float64(n)
	}
	small, large := perInstance(100), perInstance(1000)
	t.Logf("allocations per instance: %.0f at 100 instances, %.0f at 1000", small, large)
	if large > 1.1*small {
		t.Errorf("allocations per instance grow with the fleet: %.0f at 100 instances, %.0f at 1000", small, large)
	}
}
