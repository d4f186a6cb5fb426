//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The annotated build (hack/images/build.sh's BUILD_ANNOTATION): this checkout's code built to add
// one annotation to every Tiled pod template it renders, a stand-in for a release that changes what
// it renders.
const buildAnnotationKey, buildAnnotationValue = "e2e.tiled.blueskyproject.io/build", "annotated"

// testOperatorUpgradeRendersMore upgrades to the annotated build: a change of what the operator
// renders, with no change of any spec, must roll like a change of the spec — one beamline at a time
// (the first fleet's cluster has maxUnavailable 1), each instance naming the difference in an
// Event — and touch nothing else (the PostgreSQL and cache pods stay).
func testOperatorUpgradeRendersMore(t *testing.T) {
	var tiledPods []string
	for _, b := range beamlines {
		tiledPods = append(tiledPods, instanceName(b)+"-0")
	}
	before := map[string]types.UID{}
	for _, p := range podsIn(t, tenantNS) {
		before[p.Name] = p.UID
	}
	s := startSamplerIn(t, tenantNS, tiledPods)
	upgradeOperator(t, "this build -> annotated build", installOverlay(t, "annotated", filepath.Join(e.repo, "config/default"), "annotated"), "annotated", false)
	eventually(t, 8*time.Minute, time.Second, "every Tiled pod of the fleet Ready with the build's annotation", func() (bool, string) {
		done := 0
		for _, name := range tiledPods {
			var p corev1.Pod
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: tenantNS, Name: name}, &p); err == nil &&
				podReady(&p) && p.Annotations[buildAnnotationKey] == buildAnnotationValue {
				done++
			}
		}
		return done == len(tiledPods), fmt.Sprintf("%d of %d", done, len(tiledPods))
	})
	rolled := time.Since(opup.from)
	maxUnready, samples := s.finish()
	figMu.Lock()
	fig.OperatorRenderRolloutSeconds, fig.OperatorRenderRolloutMaxUnready = rolled.Seconds(), maxUnready
	figMu.Unlock()
	t.Logf("the annotated build's change rolled over %d beamlines in %.1fs; unready Tiled pods sampled: %v", len(tiledPods), rolled.Seconds(), samples)
	if maxUnready > 1 {
		t.Errorf("up to %d Tiled pods unready at once; the cluster's rollout.maxUnavailable is 1 (samples %v)", maxUnready, samples)
	}
	for _, b := range beamlines {
		inst := instanceName(b)
		n, notes := instanceEvents(t, tenantNS, inst, "RenderChanged")
		named := false
		for _, note := range notes {
			named = named || strings.Contains(note, buildAnnotationKey)
		}
		if n == 0 || !named {
			t.Errorf("%s: %d RenderChanged Events, none naming %s: %v", inst, n, buildAnnotationKey, notes)
		}
		if ti := getInstanceIn(t, tenantNS, inst); ti.Status.PendingRollout != nil {
			t.Errorf("%s: status.pendingRollout still %+v after its pods rolled", inst, *ti.Status.PendingRollout)
		}
	}
	// Only the Tiled pods were replaced.
	for _, p := range podsIn(t, tenantNS) {
		if was, ok := before[p.Name]; ok && !slices.Contains(tiledPods, p.Name) && was != p.UID {
			t.Errorf("pod %s/%s was replaced too; only the Tiled pods' template changed", tenantNS, p.Name)
		}
	}
}
