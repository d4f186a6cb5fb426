package fleetmetrics_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/operator/fleetmetrics"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{}, &env))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// series gathers reg and returns the samples of the tiled_operator_* metrics whose namespace
// label is ns (and those without one), keyed as name{label="value",...} with the labels sorted.
func series(g Gomega, reg prometheus.Gatherer, ns string) map[string]float64 {
	mfs, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "tiled_operator_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			keep := true
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() != ns {
					keep = false
				}
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if keep {
				sort.Strings(labels)
				out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = value(mf.GetType(), m)
			}
		}
	}
	return out
}

func value(typ dto.MetricType, m *dto.Metric) float64 {
	if typ == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// leaderManager is a manager of the operator's scheme with leader election in ns under id,
// its cache restricted to ns, and the fleet's Collector registered with its own registry, as
// operator.NewManager wires it (addFleetMetrics).
func leaderManager(t *testing.T, ns, id string) (ctrl.Manager, *prometheus.Registry) {
	t.Helper()
	scheme, err := operator.NewScheme()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	lease, renew, retry := 15*time.Second, 10*time.Second, time.Second
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              id,
		LeaderElectionNamespace:       ns,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &lease, RenewDeadline: &renew, RetryPeriod: &retry,
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	c := fleetmetrics.New(mgr.GetCache())
	NewWithT(t).Expect(mgr.Add(c.LeaderRunnable(mgr.GetCache()))).To(Succeed())
	reg := prometheus.NewRegistry()
	NewWithT(t).Expect(fleetmetrics.Register(reg, c)).To(Succeed())
	return mgr, reg
}

func run(t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func condition(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason, LastTransitionTime: metav1.Now()}
}

// The statuses written through the status subresource reach the metrics through the manager's
// cache, on the manager that won the election; the other, a standby, reports only that it is one.
func TestFleetMetricsReadTheCacheOnTheLeader(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxT(t)
	ns := fixture.Namespace(ctx, t, env.Client, "fleetmetrics")

	leader, leaderReg := leaderManager(t, ns, "fleetmetrics-test")
	run(t, leader)
	select {
	case <-leader.Elected():
	case <-ctx.Done():
		t.Fatal("the first manager was not elected")
	}
	standby, standbyReg := leaderManager(t, ns, "fleetmetrics-test")
	run(t, standby)

	tc := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2"},
		Spec: tiledv1alpha1.TiledClusterSpec{
			ProfileSelector: &metav1.LabelSelector{},
			Instances: []tiledv1alpha1.ClusterInstance{
				{Name: "amx"}, {Name: "bmm", Hold: true}, {Name: "chx"}, {Name: "new"},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, tc)).To(Succeed())
	member := func(name string) *tiledv1alpha1.TiledInstance {
		return &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "nsls2-" + name,
			Labels: map[string]string{
				tiledv1alpha1.LabelCluster: "nsls2", tiledv1alpha1.LabelInstance: name,
				tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(tc, tiledv1alpha1.GroupVersion.WithKind("TiledCluster"))},
		}}
	}
	amx, bmm, chx := member("amx"), member("bmm"), member("chx")
	lab := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lab"}}
	lab.Spec.Backup = &tiledv1alpha1.BackupSpec{Schedule: "30 2 * * *", Claim: &tiledv1alpha1.BackupClaimTarget{ClaimName: "backups"}}
	for _, ti := range []*tiledv1alpha1.TiledInstance{amx, bmm, chx, lab} {
		g.Expect(env.Client.Create(ctx, ti)).To(Succeed())
	}

	// The statuses, as the controllers would write them (through the status subresource).
	lastBackup := metav1.NewTime(time.Date(2026, 12, 3, 2, 31, 40, 0, time.UTC))
	ready := condition(controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
	amx.Status = tiledv1alpha1.TiledInstanceStatus{
		ReadyReplicas: 1, Image: "ghcr.io/bluesky/tiled:0.1.0", Version: "0.1.0",
		Database:   &tiledv1alpha1.DatabaseStatus{Mode: "Managed"},
		Conditions: []metav1.Condition{ready},
	}
	bmm.Status = tiledv1alpha1.TiledInstanceStatus{
		ReadyReplicas: 1, Conditions: []metav1.Condition{ready},
		PendingRollout: &tiledv1alpha1.PendingRollout{StatefulSet: "nsls2-bmm", TemplateHash: "abc"},
	}
	chx.Status = tiledv1alpha1.TiledInstanceStatus{
		Conditions: []metav1.Condition{
			condition(controllers.ConditionReady, metav1.ConditionFalse, "MigrationFailed"),
			condition(controllers.ConditionStalled, metav1.ConditionTrue, "MigrationFailed"),
		},
		Upgrade: &tiledv1alpha1.UpgradeStatus{Phase: tiledv1alpha1.UpgradeFailed, FromImage: "a", ToImage: "b", StartTime: metav1.Now()},
	}
	lab.Status = tiledv1alpha1.TiledInstanceStatus{
		ReadyReplicas: 1, Conditions: []metav1.Condition{ready},
		Backup: &tiledv1alpha1.BackupStatus{LastSuccessful: &tiledv1alpha1.BackupRecord{Job: "b-1", Result: "Succeeded", CompletionTime: lastBackup}},
	}
	for _, ti := range []*tiledv1alpha1.TiledInstance{amx, bmm, chx, lab} {
		g.Expect(env.Client.Status().Update(ctx, ti)).To(Succeed())
	}
	tc.Status = tiledv1alpha1.TiledClusterStatus{
		Instances: 4, ReadyInstances: 2, PendingInstances: 1,
		Conditions: []metav1.Condition{
			condition(controllers.ConditionReady, metav1.ConditionFalse, controllers.ReasonInstancesStalled),
			condition(controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonInstancesStalled),
		},
	}
	g.Expect(env.Client.Status().Update(ctx, tc)).To(Succeed())

	inst := func(metric, name string, extra ...string) string {
		labels := append([]string{fmt.Sprintf("tiled_cluster=%q", "nsls2"), fmt.Sprintf("instance=%q", name), fmt.Sprintf("namespace=%q", ns)}, extra...)
		if name == "lab" {
			labels[0] = `tiled_cluster=""`
		}
		sort.Strings(labels)
		return metric + "{" + strings.Join(labels, ",") + "}"
	}
	state := func(s string) string {
		return fmt.Sprintf("tiled_operator_cluster_instances{namespace=%q,state=%q,tiled_cluster=%q}", ns, s, "nsls2")
	}
	cl := func(metric string) string {
		return fmt.Sprintf("%s{namespace=%q,tiled_cluster=%q}", metric, ns, "nsls2")
	}
	want := map[string]float64{
		"tiled_operator_leader{}": 1,
		inst("tiled_operator_instance_info", "nsls2-amx", `database_mode="Managed"`, `image="ghcr.io/bluesky/tiled:0.1.0"`, `version="0.1.0"`): 1,
		inst("tiled_operator_instance_ready", "nsls2-amx"):                               1,
		inst("tiled_operator_instance_ready", "nsls2-chx"):                               0,
		inst("tiled_operator_instance_ready_replicas", "nsls2-amx"):                      1,
		inst("tiled_operator_instance_stalled", "nsls2-amx", `reason=""`):                0,
		inst("tiled_operator_instance_stalled", "nsls2-chx", `reason="MigrationFailed"`): 1,
		inst("tiled_operator_instance_rollout_pending", "nsls2-bmm"):                     1,
		inst("tiled_operator_instance_held", "nsls2-amx"):                                0,
		inst("tiled_operator_instance_held", "nsls2-bmm"):                                1,
		inst("tiled_operator_instance_held", "lab"):                                      0,
		inst("tiled_operator_instance_upgrade_in_progress", "nsls2-chx"):                 0,
		inst("tiled_operator_instance_migration_failed", "nsls2-chx"):                    1,
		inst("tiled_operator_instance_migration_failed", "nsls2-amx"):                    0,
		inst("tiled_operator_instance_backup_last_success_timestamp_seconds", "lab"):     float64(lastBackup.Unix()),
		inst("tiled_operator_instance_backup_interval_seconds", "lab"):                   86400,
		state(fleetmetrics.StateReady):                                                   2,
		state(fleetmetrics.StateUnready):                                                 2, // chx, and new (not created)
		state(fleetmetrics.StateHeld):                                                    1,
		state(fleetmetrics.StateRolloutPending):                                          1,
		state(fleetmetrics.StateStalled):                                                 1,
		cl("tiled_operator_cluster_ready"):                                               0,
		cl("tiled_operator_cluster_rollout_in_progress"):                                 1,
	}
	g.Eventually(func(g Gomega) {
		got := series(g, leaderReg, ns)
		for k, v := range want {
			g.Expect(got).To(HaveKeyWithValue(k, v), "series %s", k)
		}
		g.Expect(got).NotTo(HaveKey(inst("tiled_operator_instance_backup_interval_seconds", "nsls2-amx")))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())

	// The standby reports nothing of the fleet.
	g.Consistently(func(g Gomega) {
		g.Expect(series(g, standbyReg, ns)).To(Equal(map[string]float64{"tiled_operator_leader{}": 0}))
	}).WithTimeout(2 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

	// A deleted instance's series go with it; pausing the cluster holds every instance.
	g.Expect(env.Client.Delete(ctx, lab)).To(Succeed())
	patch := client.MergeFrom(tc.DeepCopy())
	tc.Spec.Paused = true
	g.Expect(env.Client.Patch(ctx, tc, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := series(g, leaderReg, ns)
		g.Expect(got).NotTo(HaveKey(inst("tiled_operator_instance_info", "lab", `database_mode=""`, `image=""`, `version=""`)))
		g.Expect(got).To(HaveKeyWithValue(state(fleetmetrics.StateHeld), 3.0)) // "new" does not exist: nothing to hold
		g.Expect(got).To(HaveKeyWithValue(state(fleetmetrics.StateUnready), 2.0))
		g.Expect(got).To(HaveKeyWithValue(inst("tiled_operator_instance_held", "nsls2-amx"), 1.0))
		g.Expect(got).To(HaveKeyWithValue(cl("tiled_operator_cluster_paused"), 1.0))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// The operator as deployed (operator.NewManager) registers the fleet's metrics with
// controller-runtime's registry, which its metrics server serves: while its controllers stamp a
// cluster out, the registry reports each instance under its cluster, and a hold set in the spec.
func TestOperatorRegistersTheFleetMetrics(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxT(t)
	ns := fixture.NewFleet(ctx, t, env.Client, "fleetmetrics-op", nil) // the facility's five profiles
	fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: fixture.InProcess(ns), SyncTimeout: time.Minute})
	tc := fixture.Cluster(t, ns, 2)
	g.Expect(env.Client.Create(ctx, tc)).To(Succeed())
	fixture.WaitStampedOut(ctx, t, env.Client, ns, tc.Name, 2, 250*time.Millisecond, 2*time.Minute)

	first := tc.Name + "-" + tc.Spec.Instances[0].Name
	held := fmt.Sprintf("tiled_operator_instance_held{instance=%q,namespace=%q,tiled_cluster=%q}", first, ns, tc.Name)
	heldState := fmt.Sprintf("tiled_operator_cluster_instances{namespace=%q,state=%q,tiled_cluster=%q}", ns, fleetmetrics.StateHeld, tc.Name)
	g.Eventually(func(g Gomega) {
		got := series(g, crmetrics.Registry, ns)
		g.Expect(got).To(HaveKeyWithValue("tiled_operator_leader{}", 1.0))
		total := 0.0
		for _, s := range []string{fleetmetrics.StateReady, fleetmetrics.StateUnready} {
			k := fmt.Sprintf("tiled_operator_cluster_instances{namespace=%q,state=%q,tiled_cluster=%q}", ns, s, tc.Name)
			g.Expect(got).To(HaveKey(k))
			total += got[k]
		}
		g.Expect(total).To(Equal(2.0))
		infos := 0
		for k := range got {
			if strings.HasPrefix(k, "tiled_operator_instance_info{") && strings.Contains(k, fmt.Sprintf("tiled_cluster=%q", tc.Name)) {
				infos++
			}
		}
		g.Expect(infos).To(Equal(2))
		g.Expect(got).To(HaveKeyWithValue(held, 0.0))
		g.Expect(got).To(HaveKeyWithValue(heldState, 0.0))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())

	g.Eventually(func() error {
		cur := &tiledv1alpha1.TiledCluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tc), cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Instances[0].Hold = true
		return env.Client.Patch(ctx, cur, patch, &client.PatchOptions{FieldManager: "fleetmetrics-test"})
	}).WithTimeout(time.Minute).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := series(g, crmetrics.Registry, ns)
		g.Expect(got).To(HaveKeyWithValue(held, 1.0))
		g.Expect(got).To(HaveKeyWithValue(heldState, 1.0))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
}
