package controllers

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/render"
)

// TestDecideDependencies: a change of the Tiled pod template waits while a managed dependency is
// not ready at its rendered template, and only then.
func TestDecideDependencies(t *testing.T) {
	// rolledOut is a dependency's StatefulSet at generation 2, its one pod ready on revision r2.
	rolledOut := func() *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{}
		s.Generation = 2
		s.Spec.Replicas = ptr.To[int32](1)
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1,
			CurrentReplicas: 1, CurrentRevision: "fleet-a-cache-r2", UpdateRevision: "fleet-a-cache-r2"}
		return s
	}
	with := func(f func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
		s := rolledOut()
		f(s)
		return s
	}
	cache := func(live *appsv1.StatefulSet, problem *podstatus.Problem) dependencyState {
		d := dependencyState{name: "fleet-a-cache", what: "the managed streaming cache", live: live, intent: "c2", problem: problem}
		if live != nil {
			d.liveIntent = "c2"
		}
		return d
	}
	postgres := dependencyState{name: "fleet-a-postgres", what: "the managed PostgreSQL database", live: rolledOut(), liveIntent: "p1", intent: "p1"}
	changing := tiledChange{name: "fleet-a", exists: true, liveIntent: "t1", intent: "t2"}
	imagePull := &podstatus.Problem{Pod: "fleet-a-cache-0", Container: "cache", Reason: podstatus.ReasonImagePull, Stalled: true,
		Message: `container cache of pod fleet-a-cache-0 cannot pull image "valkey/valkey:8.1" (ImagePullBackOff: Back-off pulling image)`}
	template := []string{"spec.template.metadata.annotations[tiled.blueskyproject.io/config-hash]", "spec.template.spec.containers[tiled].env[STREAMING_CACHE_PASSWORD]"}
	many := make([]string, 25)
	for i := range many {
		many[i] = fmt.Sprintf("spec.template.spec.containers[tiled].env[X%02d]", i)
	}

	for _, tc := range []struct {
		name    string
		tiled   tiledChange
		deps    []dependencyState
		differs []string
		err     error
		// hold is the decision; message the substrings its message has; read whether the Tiled
		// StatefulSet's template was compared (a read past the cache).
		hold    bool
		message []string
		absent  []string
		read    bool
		wantErr bool
	}{
		{name: "streaming turned on: the cache is new and does not exist yet: held",
			tiled: changing, deps: []dependencyState{postgres, cache(nil, nil)}, differs: template,
			hold: true, read: true, message: []string{
				"StatefulSet fleet-a: the change of its pod template waits for StatefulSet fleet-a-cache (the managed streaming cache) to be ready (it does not exist yet",
				"spec.template.spec.containers[tiled].env[STREAMING_CACHE_PASSWORD]"},
			absent: []string{"fleet-a-postgres"}},
		{name: "the cache is new and its pod cannot pull its image: held, naming the image and ImagePullBackOff",
			tiled: changing, deps: []dependencyState{postgres, cache(with(func(s *appsv1.StatefulSet) {
				s.Generation, s.Status.ObservedGeneration = 1, 1
				s.Status.ReadyReplicas = 0
				s.Status.CurrentRevision, s.Status.UpdateRevision = "fleet-a-cache-r1", "fleet-a-cache-r1"
			}), imagePull)}, differs: template,
			hold: true, read: true, message: []string{"StatefulSet fleet-a-cache (the managed streaming cache) to be ready (0 of 1 pods ready",
				`cannot pull image "valkey/valkey:8.1" (ImagePullBackOff`}},
		{name: "the cache ready at its template: applied",
			tiled: changing, deps: []dependencyState{postgres, cache(rolledOut(), nil)}, differs: template},
		{name: "the cache's new version is applied in this reconcile: held",
			tiled: changing, deps: []dependencyState{func() dependencyState { d := cache(rolledOut(), nil); d.liveIntent = "c1"; return d }()},
			differs: template, hold: true, read: true, message: []string{"its new version is applied now"}},
		{name: "the StatefulSet controller has not seen the cache's generation: held",
			tiled: changing, deps: []dependencyState{cache(with(func(s *appsv1.StatefulSet) { s.Generation = 3 }), nil)},
			differs: template, hold: true, read: true, message: []string{"has not rolled out generation 3 yet"}},
		{name: "PostgreSQL's template changed and its pod rolls: held until its current revision is the update revision",
			tiled: changing, deps: []dependencyState{{name: "fleet-a-postgres", what: "the managed PostgreSQL database", liveIntent: "p2", intent: "p2",
				live: with(func(s *appsv1.StatefulSet) { s.Status.CurrentRevision = "fleet-a-postgres-r1" })}},
			differs: template, hold: true, read: true, message: []string{"StatefulSet fleet-a-postgres (the managed PostgreSQL database) to be ready (1 of 1 pods ready, 1 on its update revision"}},
		{name: "both dependencies not ready: both named",
			tiled: changing, deps: []dependencyState{{name: "fleet-a-postgres", what: "the managed PostgreSQL database", intent: "p1"}, cache(nil, nil)},
			differs: template, hold: true, read: true, message: []string{"StatefulSet fleet-a-postgres", ", and for StatefulSet fleet-a-cache"}},
		{name: "no live Tiled StatefulSet (the instance is created): applied",
			tiled: tiledChange{name: "fleet-a", intent: "t2"}, deps: []dependencyState{cache(nil, nil)}, differs: template},
		{name: "the Tiled StatefulSet's intent unchanged: nothing to hold",
			tiled: tiledChange{name: "fleet-a", exists: true, liveIntent: "t2", intent: "t2"}, deps: []dependencyState{cache(nil, nil)}, differs: template},
		{name: "the Tiled StatefulSet's intent unknown (not applied by the operator): applied",
			tiled: tiledChange{name: "fleet-a", exists: true, intent: "t2"}, deps: []dependencyState{cache(nil, nil)}, differs: template},
		{name: "the Tiled pod template unchanged (scaling): applied",
			tiled: changing, deps: []dependencyState{cache(nil, nil)}, differs: nil, read: true},
		{name: "an upgrade (or a restore, a lost catalog, another gate) under way: not held",
			tiled: tiledChange{name: "fleet-a", exists: true, liveIntent: "t1", intent: "t2", busy: true}, deps: []dependencyState{cache(nil, nil)}, differs: template},
		{name: "no managed dependency (an external database and cache): applied",
			tiled: changing, differs: template},
		{name: "many paths: the first 20 named, the others counted",
			tiled: changing, deps: []dependencyState{cache(nil, nil)}, differs: many, hold: true, read: true,
			message: []string{"env[X19] and 5 more"}},
		{name: "the comparison fails: the error",
			tiled: changing, deps: []dependencyState{cache(nil, nil)}, err: errors.New("boom"), read: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			read := false
			v, err := decideDependencies(dependencyInput{tiled: tc.tiled, deps: tc.deps, differs: func() ([]string, error) {
				read = true
				return tc.differs, tc.err
			}})
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v.hold).To(Equal(tc.hold))
			g.Expect(read).To(Equal(tc.read), "the live Tiled StatefulSet is read past the cache only when a dependency is not ready")
			if !tc.hold {
				g.Expect(v.message).To(BeEmpty())
			}
			for _, m := range tc.message {
				g.Expect(v.message).To(ContainSubstring(m))
			}
			for _, m := range tc.absent {
				g.Expect(v.message).NotTo(ContainSubstring(m))
			}
		})
	}
}

// TestProcedureUnderWay: the procedures that change the Tiled StatefulSet themselves are never held
// by a dependency.
func TestProcedureUnderWay(t *testing.T) {
	for _, tc := range []struct {
		name string
		ti   func(*tiledv1alpha1.TiledInstance)
		in   func(*instanceInputs)
		want bool
	}{
		{name: "nothing under way", want: false},
		{name: "an upgrade recorded in the status", ti: func(ti *tiledv1alpha1.TiledInstance) { ti.Status.Upgrade = &tiledv1alpha1.UpgradeStatus{} }, want: true},
		{name: "an upgrade starting now", in: func(in *instanceInputs) { in.upgrade = upgrade.Decision{Changed: true} }, want: true},
		{name: "an upgrade waiting for the maintenance window", in: func(in *instanceInputs) { in.heldUpgrade = "a to b" }, want: true},
		{name: "a restore (new instance, in place, lost catalog)", in: func(in *instanceInputs) { in.restoring = true }, want: true},
		{name: "Tiled stopped by a step", in: func(in *instanceInputs) { in.render.Lifecycle = &render.Lifecycle{Stopped: true} }, want: true},
		{name: "a step's Job", in: func(in *instanceInputs) { in.render.Lifecycle = &render.Lifecycle{Step: &render.Step{}} }, want: true},
		{name: "the old version serving", in: func(in *instanceInputs) { in.render.Lifecycle = &render.Lifecycle{ServingImage: "tiled:old"} }, want: true},
		{name: "backups only", in: func(in *instanceInputs) { in.render.Lifecycle = &render.Lifecycle{BackupClaim: true} }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := &tiledv1alpha1.TiledInstance{}
			var in instanceInputs
			if tc.ti != nil {
				tc.ti(ti)
			}
			if tc.in != nil {
				tc.in(&in)
			}
			g.Expect(procedureUnderWay(ti, in)).To(Equal(tc.want))
		})
	}
}

// TestInstanceStatusDependencyWait: a change held for a dependency is RolloutPending, reason
// WaitingForDependency, with the gate's message and no status.pendingRollout (the cluster has
// nothing to approve); the condition goes with the hold.
func TestInstanceStatusDependencyWait(t *testing.T) {
	g := NewWithT(t)
	o := observedInstance{Generation: 1, Namespace: "ns", TiledName: "x", Replicas: 1, Tiled: sts(1, 1, 1), External: true,
		DependencyWait: "StatefulSet x: the change of its pod template waits for StatefulSet x-cache"}
	st := instanceStatus(&tiledv1alpha1.TiledInstanceStatus{}, o)
	c := meta.FindStatusCondition(st.Conditions, ConditionRolloutPending)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(ReasonWaitingForDependency))
	g.Expect(c.Message).To(Equal(o.DependencyWait))
	g.Expect(st.PendingRollout).To(BeNil())

	o.DependencyWait = ""
	st = instanceStatus(st, o)
	g.Expect(meta.FindStatusCondition(st.Conditions, ConditionRolloutPending)).To(BeNil())
}
