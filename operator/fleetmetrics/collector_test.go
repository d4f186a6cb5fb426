package fleetmetrics

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
)

// now is the tests' clock: Thursday 3 December 2026, 12:00 UTC.
var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	NewWithT(t).Expect(tiledv1alpha1.AddToScheme(s)).To(Succeed())
	return s
}

// cluster is a TiledCluster in namespace "nsls2" listing the instances (hold for those in held).
func cluster(name string, mutate func(*tiledv1alpha1.TiledCluster), instances ...string) *tiledv1alpha1.TiledCluster {
	tc := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nsls2", UID: types.UID("uid-" + name)},
		Spec:       tiledv1alpha1.TiledClusterSpec{ProfileSelector: &metav1.LabelSelector{}},
	}
	for _, i := range instances {
		tc.Spec.Instances = append(tc.Spec.Instances, tiledv1alpha1.ClusterInstance{Name: i})
	}
	if mutate != nil {
		mutate(tc)
	}
	return tc
}

// member is the TiledInstance <cluster>-<name> that the cluster controls, Ready unless mutate
// says otherwise.
func member(cluster, name string, mutate func(*tiledv1alpha1.TiledInstance)) *tiledv1alpha1.TiledInstance {
	ti := standalone(cluster+"-"+name, mutate)
	ti.Labels = map[string]string{tiledv1alpha1.LabelCluster: cluster, tiledv1alpha1.LabelInstance: name}
	ti.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(
		&tiledv1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster, UID: types.UID("uid-" + cluster)}},
		tiledv1alpha1.GroupVersion.WithKind("TiledCluster"))}
	return ti
}

// standalone is a TiledInstance no cluster controls, Ready unless mutate says otherwise.
func standalone(name string, mutate func(*tiledv1alpha1.TiledInstance)) *tiledv1alpha1.TiledInstance {
	ti := &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nsls2"},
		Status: tiledv1alpha1.TiledInstanceStatus{
			ReadyReplicas: 1, Image: "ghcr.io/bluesky/tiled:0.1.0", Version: "0.1.0",
			Database:   &tiledv1alpha1.DatabaseStatus{Mode: "Managed", Ready: true},
			Conditions: []metav1.Condition{cond(controllers.ConditionReady, true, controllers.ReasonReady)},
		},
	}
	if mutate != nil {
		mutate(ti)
	}
	return ti
}

func cond(typ string, status bool, reason string) metav1.Condition {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: reason, LastTransitionTime: metav1.NewTime(now)}
}

func notReady(reason string) func(*tiledv1alpha1.TiledInstance) {
	return func(ti *tiledv1alpha1.TiledInstance) {
		ti.Status.ReadyReplicas = 0
		ti.Status.Conditions = []metav1.Condition{cond(controllers.ConditionReady, false, reason)}
	}
}

func stalled(reason string) func(*tiledv1alpha1.TiledInstance) {
	return func(ti *tiledv1alpha1.TiledInstance) {
		notReady(reason)(ti)
		ti.Status.Conditions = append(ti.Status.Conditions, cond(controllers.ConditionStalled, true, reason))
	}
}

func upgrading(phase tiledv1alpha1.UpgradePhase) func(*tiledv1alpha1.TiledInstance) {
	return func(ti *tiledv1alpha1.TiledInstance) {
		ti.Status.Upgrade = &tiledv1alpha1.UpgradeStatus{Phase: phase, FromImage: "a", ToImage: "b", StartTime: metav1.NewTime(now)}
	}
}

func backups(schedule string, suspend bool, last *time.Time) func(*tiledv1alpha1.TiledInstance) {
	return func(ti *tiledv1alpha1.TiledInstance) {
		ti.Spec.Backup = &tiledv1alpha1.BackupSpec{
			Schedule: schedule, Claim: &tiledv1alpha1.BackupClaimTarget{ClaimName: "backups"},
		}
		if suspend {
			ti.Spec.Backup.Suspend = ptr.To(true)
		}
		if last != nil {
			ti.Status.Backup = &tiledv1alpha1.BackupStatus{LastSuccessful: &tiledv1alpha1.BackupRecord{
				Job: "backup-1", Result: "Succeeded", CompletionTime: metav1.NewTime(*last),
			}}
		}
	}
}

// exposition is the expected text of the named metric: its HELP and TYPE lines, then the samples.
func exposition(name, typ string, samples ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, helps[name], name, typ)
	for _, s := range samples {
		b.WriteString(name + s + "\n")
	}
	return b.String()
}

func TestCollector(t *testing.T) {
	lastBackup := time.Date(2026, 12, 3, 2, 31, 40, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		leader  bool
		metrics map[string][]string // metric name -> expected samples (gauges)
	}{
		{
			name:   "a ready member, its info and replicas",
			leader: true,
			objs: []client.Object{
				cluster("nsls2", nil, "bmm"),
				member("nsls2", "bmm", func(ti *tiledv1alpha1.TiledInstance) { ti.Status.ReadyReplicas = 2 }),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_info":           {`{database_mode="Managed",image="ghcr.io/bluesky/tiled:0.1.0",instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2",version="0.1.0"} 1`},
				"tiled_operator_instance_ready":          {`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 1`},
				"tiled_operator_instance_ready_replicas": {`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 2`},
				"tiled_operator_instance_stalled":        {`{instance="nsls2-bmm",namespace="nsls2",reason="",tiled_cluster="nsls2"} 0`},
				"tiled_operator_leader":                  {` 1`},
			},
		},
		{
			name:   "a stalled instance, with its reason, and an unready one that is not stalled",
			leader: true,
			objs: []client.Object{
				cluster("nsls2", nil, "amx", "bmm"),
				member("nsls2", "amx", stalled(controllers.ReasonImagePull)),
				member("nsls2", "bmm", notReady(controllers.ReasonWaitingForPods)),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_ready": {
					`{instance="nsls2-amx",namespace="nsls2",tiled_cluster="nsls2"} 0`,
					`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 0`,
				},
				"tiled_operator_instance_stalled": {
					`{instance="nsls2-amx",namespace="nsls2",reason="ImagePullBackOff",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-bmm",namespace="nsls2",reason="",tiled_cluster="nsls2"} 0`,
				},
			},
		},
		{
			name:   "a pending rollout, and a cluster rolling out",
			leader: true,
			objs: []client.Object{
				cluster("nsls2", func(tc *tiledv1alpha1.TiledCluster) {
					tc.Status.PendingInstances = 1
					tc.Status.Conditions = []metav1.Condition{
						cond(controllers.ConditionReady, false, controllers.ReasonRollingOut),
						cond(controllers.ConditionReconciling, true, controllers.ReasonRollingOut),
					}
				}, "amx", "bmm", "csx"),
				member("nsls2", "amx", func(ti *tiledv1alpha1.TiledInstance) {
					ti.Status.PendingRollout = &tiledv1alpha1.PendingRollout{StatefulSet: "nsls2-amx", TemplateHash: "abc",
						Since: &metav1.Time{Time: time.Unix(1765000000, 0)}}
				}),
				member("nsls2", "bmm", func(ti *tiledv1alpha1.TiledInstance) {
					ti.Status.PendingRollout = &tiledv1alpha1.PendingRollout{StatefulSet: "nsls2-bmm", TemplateHash: "b", Change: "Spec", ChangeHash: "0a1b",
						Approval: tiledv1alpha1.ApprovalRequired, Window: "inside exclusion run-1", Since: &metav1.Time{Time: time.Unix(1765200000, 0)}}
				}),
				member("nsls2", "csx", func(ti *tiledv1alpha1.TiledInstance) {
					ti.Status.PendingRollout = &tiledv1alpha1.PendingRollout{StatefulSet: "nsls2-csx", TemplateHash: "def", Change: "Upgrade",
						Window: "outside every maintenance window; opens at 2026-12-08T13:00:00Z", Since: &metav1.Time{Time: time.Unix(1765100000, 0)}}
				}),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_rollout_pending": {
					`{instance="nsls2-amx",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-csx",namespace="nsls2",tiled_cluster="nsls2"} 1`,
				},
				"tiled_operator_instance_change_pending_since_timestamp_seconds": {
					`{change="Render",instance="nsls2-amx",namespace="nsls2",tiled_cluster="nsls2",waiting_for="rollout"} 1.765e+09`,
					`{change="Spec",instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2",waiting_for="approval"} 1.7652e+09`,
					`{change="Upgrade",instance="nsls2-csx",namespace="nsls2",tiled_cluster="nsls2",waiting_for="maintenance"} 1.7651e+09`,
				},
				"tiled_operator_cluster_rollout_in_progress": {`{namespace="nsls2",tiled_cluster="nsls2"} 1`},
				"tiled_operator_cluster_ready":               {`{namespace="nsls2",tiled_cluster="nsls2"} 0`},
			},
		},
		{
			name:   "held: by spec.instances[].hold, and every instance of a paused cluster",
			leader: true,
			objs: []client.Object{
				cluster("nsls2", func(tc *tiledv1alpha1.TiledCluster) {
					tc.Spec.Instances[0].Hold = true
					tc.Status.HeldInstances = 1
					tc.Status.Conditions = []metav1.Condition{cond(controllers.ConditionReady, true, controllers.ReasonInstancesHeld)}
				}, "amx", "bmm"),
				member("nsls2", "amx", nil),
				member("nsls2", "bmm", nil),
				cluster("lab", func(tc *tiledv1alpha1.TiledCluster) { tc.Spec.Paused = true }, "one"),
				member("lab", "one", nil),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_held": {
					`{instance="lab-one",namespace="nsls2",tiled_cluster="lab"} 1`,
					`{instance="nsls2-amx",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 0`,
				},
				"tiled_operator_cluster_paused": {
					`{namespace="nsls2",tiled_cluster="lab"} 1`,
					`{namespace="nsls2",tiled_cluster="nsls2"} 0`,
				},
				"tiled_operator_cluster_changes_held": {
					`{namespace="nsls2",tiled_cluster="lab"} 0`,
					`{namespace="nsls2",tiled_cluster="nsls2"} 1`,
				},
				"tiled_operator_cluster_ready": {
					`{namespace="nsls2",tiled_cluster="lab"} 0`,
					`{namespace="nsls2",tiled_cluster="nsls2"} 1`,
				},
			},
		},
		{
			name:   "upgrades: one migrating, one failed and rolled back, one restoring",
			leader: true,
			objs: []client.Object{
				cluster("nsls2", nil, "amx", "bmm", "chx", "dss"),
				member("nsls2", "amx", upgrading(tiledv1alpha1.UpgradeMigrating)),
				member("nsls2", "bmm", func(ti *tiledv1alpha1.TiledInstance) {
					stalled("MigrationFailed")(ti)
					upgrading(tiledv1alpha1.UpgradeFailed)(ti)
					ti.Status.LastMigration = &tiledv1alpha1.MigrationRecord{
						FromVersion: "0.1.0", ToVersion: "0.2.0", Result: "RolledBack",
						StartTime: metav1.NewTime(now.Add(-time.Hour)), CompletionTime: metav1.NewTime(now.Add(-30 * time.Minute)),
					}
				}),
				member("nsls2", "chx", upgrading(tiledv1alpha1.UpgradeRestoring)),
				member("nsls2", "dss", nil),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_upgrade_in_progress": {
					`{instance="nsls2-amx",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 0`,
					`{instance="nsls2-chx",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-dss",namespace="nsls2",tiled_cluster="nsls2"} 0`,
				},
				"tiled_operator_instance_migration_failed": {
					`{instance="nsls2-amx",namespace="nsls2",tiled_cluster="nsls2"} 0`,
					`{instance="nsls2-bmm",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-chx",namespace="nsls2",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-dss",namespace="nsls2",tiled_cluster="nsls2"} 0`,
				},
				"tiled_operator_instance_stalled": {
					`{instance="nsls2-amx",namespace="nsls2",reason="",tiled_cluster="nsls2"} 0`,
					`{instance="nsls2-bmm",namespace="nsls2",reason="MigrationFailed",tiled_cluster="nsls2"} 1`,
					`{instance="nsls2-chx",namespace="nsls2",reason="",tiled_cluster="nsls2"} 0`,
					`{instance="nsls2-dss",namespace="nsls2",reason="",tiled_cluster="nsls2"} 0`,
				},
				"tiled_operator_instance_last_migration_timestamp_seconds": {
					fmt.Sprintf(`{instance="nsls2-bmm",namespace="nsls2",result="RolledBack",tiled_cluster="nsls2"} %d`, now.Add(-30*time.Minute).Unix()),
				},
			},
		},
		{
			name:   "lost catalogs: stalled and restoring count, restored (Tiled starting on it) does not",
			leader: true,
			objs: []client.Object{
				standalone("stalled", lostCatalog(tiledv1alpha1.CatalogLostStalled)),
				standalone("restoring", lostCatalog(tiledv1alpha1.CatalogLostRestoring)),
				standalone("restored", lostCatalog(tiledv1alpha1.CatalogLostRestored)),
				standalone("whole", nil),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_catalog_lost": {
					`{instance="restored",namespace="nsls2",tiled_cluster=""} 0`,
					`{instance="restoring",namespace="nsls2",tiled_cluster=""} 1`,
					`{instance="stalled",namespace="nsls2",tiled_cluster=""} 1`,
					`{instance="whole",namespace="nsls2",tiled_cluster=""} 0`,
				},
			},
		},
		{
			name:   "backups: the last success, and the schedule's longest interval",
			leader: true,
			objs: []client.Object{
				standalone("daily", backups("30 2 * * *", false, &lastBackup)),
				standalone("weekdays", backups("0 3 * * 1-5", false, nil)), // Friday to Monday: 72 h
				standalone("suspended", backups("@hourly", true, &lastBackup)),
				standalone("unscheduled", backups("", false, nil)),
				standalone("none", nil),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_backup_last_success_timestamp_seconds": {
					fmt.Sprintf(`{instance="daily",namespace="nsls2",tiled_cluster=""} %d`, lastBackup.Unix()),
					fmt.Sprintf(`{instance="suspended",namespace="nsls2",tiled_cluster=""} %d`, lastBackup.Unix()),
				},
				"tiled_operator_instance_backup_interval_seconds": {
					`{instance="daily",namespace="nsls2",tiled_cluster=""} 86400`,
					`{instance="weekdays",namespace="nsls2",tiled_cluster=""} 259200`,
				},
			},
		},
		{
			name:   "a standalone instance has cluster=\"\" and is never held",
			leader: true,
			objs: []client.Object{
				standalone("lab-tiled", func(ti *tiledv1alpha1.TiledInstance) { ti.Status.Database.Mode = "External" }),
			},
			metrics: map[string][]string{
				"tiled_operator_instance_info":     {`{database_mode="External",image="ghcr.io/bluesky/tiled:0.1.0",instance="lab-tiled",namespace="nsls2",tiled_cluster="",version="0.1.0"} 1`},
				"tiled_operator_instance_held":     {`{instance="lab-tiled",namespace="nsls2",tiled_cluster=""} 0`},
				"tiled_operator_cluster_instances": nil,
			},
		},
		{
			name:   "a cluster's instances by state, all five always, a missing instance unready",
			leader: true,
			objs: []client.Object{
				cluster("nsls2", func(tc *tiledv1alpha1.TiledCluster) {
					tc.Spec.Instances[1].Hold = true
					tc.Spec.Instances[3].Hold = true // not created yet: nothing is held
				}, "amx", "bmm", "chx", "new"),
				member("nsls2", "amx", nil),
				member("nsls2", "bmm", func(ti *tiledv1alpha1.TiledInstance) {
					ti.Status.PendingRollout = &tiledv1alpha1.PendingRollout{StatefulSet: "nsls2-bmm", TemplateHash: "abc"}
				}),
				member("nsls2", "chx", stalled(controllers.ReasonCrashLoop)),
				cluster("empty", nil),
			},
			metrics: map[string][]string{
				"tiled_operator_cluster_instances": {
					`{namespace="nsls2",state="held",tiled_cluster="empty"} 0`,
					`{namespace="nsls2",state="ready",tiled_cluster="empty"} 0`,
					`{namespace="nsls2",state="rollout_pending",tiled_cluster="empty"} 0`,
					`{namespace="nsls2",state="stalled",tiled_cluster="empty"} 0`,
					`{namespace="nsls2",state="unready",tiled_cluster="empty"} 0`,
					`{namespace="nsls2",state="held",tiled_cluster="nsls2"} 1`,
					`{namespace="nsls2",state="ready",tiled_cluster="nsls2"} 2`,
					`{namespace="nsls2",state="rollout_pending",tiled_cluster="nsls2"} 1`,
					`{namespace="nsls2",state="stalled",tiled_cluster="nsls2"} 1`,
					`{namespace="nsls2",state="unready",tiled_cluster="nsls2"} 2`,
				},
				"tiled_operator_cluster_rollout_in_progress": {
					`{namespace="nsls2",tiled_cluster="empty"} 0`,
					`{namespace="nsls2",tiled_cluster="nsls2"} 0`,
				},
			},
		},
		{
			name:   "a standby emits tiled_operator_leader 0 and nothing else",
			leader: false,
			objs: []client.Object{
				cluster("nsls2", nil, "bmm"),
				member("nsls2", "bmm", nil),
			},
			metrics: func() map[string][]string {
				m := map[string][]string{"tiled_operator_leader": {` 0`}}
				for name := range helps {
					if _, ok := m[name]; !ok {
						m[name] = nil
					}
				}
				return m
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := New(fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tc.objs...).Build(), WithClock(func() time.Time { return now }))
			c.SetLeader(tc.leader)
			names := make([]string, 0, len(tc.metrics))
			for name := range tc.metrics {
				names = append(names, name)
			}
			sort.Strings(names)
			var want strings.Builder
			for _, name := range names {
				if len(tc.metrics[name]) == 0 {
					continue // expected absent
				}
				typ := "gauge"
				if strings.HasSuffix(name, "_total") {
					typ = "counter"
				}
				want.WriteString(exposition(name, typ, tc.metrics[name]...))
			}
			g.Expect(testutil.CollectAndCompare(c, strings.NewReader(want.String()), names...)).To(Succeed())
		})
	}
}

// The fleet's series hold nothing but the contract's metrics (and the documented additions): every
// metric collected is described, and none is emitted twice.
func TestCollectorPassesTheRegistrysChecks(t *testing.T) {
	g := NewWithT(t)
	lastBackup := now.Add(-time.Hour)
	c := New(fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		cluster("nsls2", nil, "amx", "bmm"),
		member("nsls2", "amx", backups("@daily", false, &lastBackup)),
		member("nsls2", "bmm", stalled(controllers.ReasonCrashLoop)),
		standalone("lab", nil),
	).Build(), WithClock(func() time.Time { return now }))
	c.SetLeader(true)
	reg := prometheus.NewPedanticRegistry()
	g.Expect(reg.Register(c)).To(Succeed())
	mfs, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	g.Expect(got).To(HaveKeyWithValue("tiled_operator_instance_info", 3))
	g.Expect(got).To(HaveKeyWithValue("tiled_operator_instance_stalled", 3))
	g.Expect(got).To(HaveKeyWithValue("tiled_operator_cluster_instances", len(States)))
	g.Expect(got).To(HaveKeyWithValue("tiled_operator_fleet_collect_errors_total", 1))
}

// A read that fails is counted, and the fleet's series are left out of that scrape (an error would
// fail the whole scrape).
func TestCollectorCountsFailedReads(t *testing.T) {
	g := NewWithT(t)
	c := New(fake.NewClientBuilder().WithScheme(runtime.NewScheme()).Build()) // knows no TiledCluster
	c.SetLeader(true)
	want := exposition("tiled_operator_fleet_collect_errors_total", "counter", " 1") + exposition("tiled_operator_leader", "gauge", " 1")
	g.Expect(testutil.CollectAndCompare(c, strings.NewReader(want))).To(Succeed())
}

// A second manager of the process replaces the first's Collector in the registry.
func TestRegisterReplaces(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	first := New(fake.NewClientBuilder().WithScheme(scheme(t)).Build())
	first.SetLeader(true)
	g.Expect(Register(reg, first)).To(Succeed())
	second := New(fake.NewClientBuilder().WithScheme(scheme(t)).Build())
	g.Expect(Register(reg, second)).To(Succeed())
	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(exposition("tiled_operator_leader", "gauge", " 0")), "tiled_operator_leader")).To(Succeed())
}

func TestBackupInterval(t *testing.T) {
	for _, tc := range []struct {
		schedule, zone string
		want           time.Duration
		ok             bool
	}{
		{"30 2 * * *", "", 24 * time.Hour, true},
		{"@daily", "", 24 * time.Hour, true},
		{"*/15 * * * *", "", 15 * time.Minute, true},
		{"0 */6 * * *", "", 6 * time.Hour, true},
		{"0 3 * * 1-5", "", 72 * time.Hour, true},
		{"0 4 * * 0", "", 7 * 24 * time.Hour, true},
		{"0 0 1 * *", "", 31 * 24 * time.Hour, true}, // 1 January to 1 February
		{"@every 2h", "", 2 * time.Hour, true},
		// Daylight saving ends on 1 November 2026 in New York: that day is 25 hours long, but it is
		// before now, and the week ahead has none.
		{"30 2 * * *", "America/New_York", 24 * time.Hour, true},
		{"not a schedule", "", 0, false},
		{"30 2 * * *", "Mars/Olympus_Mons", 0, false},
		{"0 0 30 2 *", "", 0, false}, // never fires
	} {
		t.Run(tc.schedule+" "+tc.zone, func(t *testing.T) {
			g := NewWithT(t)
			d, ok := BackupInterval(tc.schedule, tc.zone, now)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(d).To(Equal(tc.want))
		})
	}
	// Across the change to daylight saving time (8 March 2026 in New York), a day is 23 hours.
	d, ok := BackupInterval("30 1 * * *", "America/New_York", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))
	NewWithT(t).Expect(ok).To(BeTrue())
	NewWithT(t).Expect(d).To(Equal(24 * time.Hour))
	// Ending it (1 November 2026), one day is 25 hours: the longest interval.
	d, ok = BackupInterval("30 3 * * *", "America/New_York", time.Date(2026, 10, 29, 0, 0, 0, 0, time.UTC))
	NewWithT(t).Expect(ok).To(BeTrue())
	NewWithT(t).Expect(d).To(Equal(25 * time.Hour))
}

// The series of one read answer the scrapes of the next MinInterval: an instance deleted in between
// is still reported until then; without a MinInterval every scrape reads the fleet.
func TestCollectorReusesARecentRead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []Option
		wantAfter int
	}{
		{"within MinInterval", nil, 2},
		{"MinInterval 0", []Option{WithMinInterval(0)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			amx := member("nsls2", "amx", nil)
			cl := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(cluster("nsls2", nil, "amx", "bmm"), amx, member("nsls2", "bmm", nil)).Build()
			c := New(cl, tc.opts...)
			c.SetLeader(true)
			g.Expect(testutil.CollectAndCount(c, "tiled_operator_instance_info")).To(Equal(2))
			g.Expect(cl.Delete(t.Context(), amx)).To(Succeed())
			g.Expect(testutil.CollectAndCount(c, "tiled_operator_instance_info")).To(Equal(tc.wantAfter))
		})
	}
}

// The series of a read, held for the scrapes of the next MinInterval, cost at most seriesBytes each
// (their label pairs are made when a scrape writes them), and write what a const metric writes.
func TestRecentReadIsCompact(t *testing.T) {
	const seriesBytes = 160
	g := NewWithT(t)
	r := &listReader{}
	beamlines := make([]string, 300)
	for i := range beamlines {
		beamlines[i] = fmt.Sprintf("bl%03d", i)
	}
	r.clusters = append(r.clusters, *cluster("nsls2", nil, beamlines...))
	for _, bl := range beamlines {
		r.instances = append(r.instances, *member("nsls2", bl, backups("30 2 * * *", false, &now)))
	}
	c := New(r)
	c.SetLeader(true)
	heap := func() uint64 {
		var m goruntime.MemStats
		goruntime.GC()
		goruntime.GC()
		goruntime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	series := c.fleetMetrics()
	after := heap()
	per := float64(after-before) / float64(len(series))
	t.Logf("%d series, %.0f bytes each", len(series), per)
	g.Expect(per).To(BeNumerically("<=", seriesBytes))

	for _, m := range series[:20] {
		var got, want dto.Metric
		g.Expect(m.Write(&got)).To(Succeed())
		lz := m.(*lazyGauge)
		g.Expect(prometheus.MustNewConstMetric(lz.desc, prometheus.GaugeValue, lz.value, lz.labels...).Write(&want)).To(Succeed())
		g.Expect(got.String()).To(Equal(want.String()))
	}
	goruntime.KeepAlive(series)
}

// lostCatalog records a lost catalog at phase p.
func lostCatalog(p tiledv1alpha1.CatalogLostPhase) func(*tiledv1alpha1.TiledInstance) {
	return func(ti *tiledv1alpha1.TiledInstance) {
		ti.Status.CatalogLost = &tiledv1alpha1.CatalogLost{Phase: p, Reason: "ClaimReplaced", Claim: ti.Name + "-postgres-data"}
	}
}
