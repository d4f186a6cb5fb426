package fleetmetrics

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// DefaultMinInterval is how long the series of one read of the fleet answer the scrapes that
// follow it: a read builds some ten series per instance (at a thousand instances, megabytes of
// garbage), while a Prometheus scrapes every 15 s or more; a scraper that polls faster (a
// benchmark's, twice a second) gets series at most this old instead of a new read each time.
const DefaultMinInterval = 5 * time.Second

// DefaultReadTimeout bounds the cache reads of one scrape: well under Prometheus's default scrape
// timeout (10s), so that a slow read loses the fleet's series of that scrape, not the whole scrape.
const DefaultReadTimeout = 3 * time.Second

// Instance states of tiled_operator_cluster_instances, always all emitted.
const (
	StateReady          = "ready"
	StateUnready        = "unready"
	StateHeld           = "held"
	StateRolloutPending = "rollout_pending"
	StateStalled        = "stalled"
)

// States are the values of tiled_operator_cluster_instances' state label, in order.
var States = []string{StateReady, StateUnready, StateHeld, StateRolloutPending, StateStalled}

// helps are the metrics' help texts by name (the tests' expected expositions quote them).
var helps = map[string]string{}

// newDesc is the descriptor of a metric without constant labels, its help kept in helps.
func newDesc(name, help string, labels []string) *prometheus.Desc {
	helps[name] = help
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	instanceLabels = []string{"namespace", "tiled_cluster", "instance"}
	clusterLabels  = []string{"namespace", "tiled_cluster"}

	descLeader = newDesc("tiled_operator_leader",
		"1 on the replica that leads (and reports the fleet), 0 on a standby.", nil)
	descCollectErrors = newDesc("tiled_operator_fleet_collect_errors_total",
		"Scrapes whose read of the TiledClusters and TiledInstances from the cache failed; their fleet series were left out.", nil)

	descInstanceInfo = newDesc("tiled_operator_instance_info",
		"1 for every TiledInstance, with the Tiled version and image it runs (status.version, status.image) and its database mode (Managed, External).",
		append(instanceLabels, "version", "image", "database_mode"))
	descInstanceReady = newDesc("tiled_operator_instance_ready",
		"1 while the instance's Ready condition is True, else 0.", instanceLabels)
	descInstanceReadyReplicas = newDesc("tiled_operator_instance_ready_replicas",
		"Tiled pods of the instance that are ready (status.readyReplicas).", instanceLabels)
	descInstanceStalled = newDesc("tiled_operator_instance_stalled",
		"1 with the Stalled condition's reason while it is True (the instance needs a person), else 0 with reason=\"\": one series per instance.",
		append(instanceLabels, "reason"))
	descInstanceRolloutPending = newDesc("tiled_operator_instance_rollout_pending",
		"1 while a change the operator renders without a change of the spec waits for the cluster's rollout (status.pendingRollout), else 0.", instanceLabels)
	descInstanceChangePending = newDesc("tiled_operator_instance_change_pending_since_timestamp_seconds",
		"Unix time the operator first found the instance's waiting change (status.pendingRollout.since), by what kind of change it is (change: Render, Spec, Upgrade; status.pendingRollout.change) and what it waits for (waiting_for: approval while status.pendingRollout.approval is Required, maintenance while status.pendingRollout.window says the calendar is closed, else rollout); absent when no change waits.",
		append(instanceLabels, "change", "waiting_for"))
	descInstanceHeld = newDesc("tiled_operator_instance_held",
		"1 while the instance's TiledCluster holds it: spec.instances[].hold is set for it, or the cluster is paused; else 0 (always 0 for a standalone instance).", instanceLabels)
	descInstanceUpgrade = newDesc("tiled_operator_instance_upgrade_in_progress",
		"1 while status.upgrade is present and its phase is not Failed, else 0.", instanceLabels)
	descInstanceMigrationFailed = newDesc("tiled_operator_instance_migration_failed",
		"1 while the upgrade's migration has failed: status.upgrade.phase is Restoring or Failed (the instance is Stalled until spec.tiled.image changes), else 0.", instanceLabels)
	descInstanceCatalogLost = newDesc("tiled_operator_instance_catalog_lost",
		"1 while the instance's catalog is lost and not yet back (status.catalogLost, phase Stalled or Restoring: Tiled is stopped), else 0.", instanceLabels)
	descInstanceLastMigration = newDesc("tiled_operator_instance_last_migration_timestamp_seconds",
		"Unix time the last migration of the instance's databases ended (status.lastMigration.completionTime), by its result (Succeeded, RolledBack); absent when none.",
		append(instanceLabels, "result"))
	descInstanceBackupLast = newDesc("tiled_operator_instance_backup_last_success_timestamp_seconds",
		"Unix time the instance's last whole backup ended (status.backup.lastSuccessful.completionTime); absent when none.", instanceLabels)
	descInstanceBackupInterval = newDesc("tiled_operator_instance_backup_interval_seconds",
		"The longest time between two consecutive firings of the instance's backup schedule (spec.backup.schedule, in spec.backup.timeZone) over the next 8 days; absent when backups are not scheduled (no target, no schedule, or suspended).",
		instanceLabels)

	descClusterInstances = newDesc("tiled_operator_cluster_instances",
		"Instances the TiledCluster lists (spec.instances), by state: ready, unready (not ready, or not yet created), held, rollout_pending, stalled (the last three count only instances that exist). ready + unready is every listed instance; the other states overlap them.",
		append(clusterLabels, "state"))
	descClusterReady = newDesc("tiled_operator_cluster_ready",
		"1 while the TiledCluster's Ready condition is True, else 0.", clusterLabels)
	descClusterRollout = newDesc("tiled_operator_cluster_rollout_in_progress",
		"1 while the TiledCluster rolls a change out: its Reconciling condition is True with reason RollingOut, or instances wait for the rollout budget (status.pendingInstances > 0); else 0.",
		clusterLabels)
	descClusterPaused = newDesc("tiled_operator_cluster_paused",
		"1 while the TiledCluster is paused (spec.paused: the operator writes nothing for it), else 0.", clusterLabels)
	descClusterChangesHeld = newDesc("tiled_operator_cluster_changes_held",
		"Instances whose change spec.instances[].hold holds back (status.heldInstances).", clusterLabels)

	allDescs = []*prometheus.Desc{
		descLeader, descCollectErrors,
		descInstanceInfo, descInstanceReady, descInstanceReadyReplicas, descInstanceStalled, descInstanceRolloutPending, descInstanceChangePending,
		descInstanceHeld, descInstanceUpgrade, descInstanceMigrationFailed, descInstanceCatalogLost, descInstanceLastMigration,
		descInstanceBackupLast, descInstanceBackupInterval,
		descClusterInstances, descClusterReady, descClusterRollout, descClusterPaused, descClusterChangesHeld,
	}
)

// Collector reports the fleet's TiledClusters and TiledInstances, as a cache holds them, on each
// scrape of the leader.
type Collector struct {
	reader      client.Reader
	leader      atomic.Bool
	errors      atomic.Uint64
	readTimeout time.Duration
	log         logr.Logger
	intervals   *intervalCache
	minInterval time.Duration
	// recent are the fleet's series of the last read, and when it was (fleetMetrics).
	recent struct {
		sync.Mutex
		metrics []prometheus.Metric
		at      time.Time
		drop    *time.Timer
	}
}

// Option configures a Collector.
type Option func(*Collector)

// WithLogger logs the failed reads of the cache.
func WithLogger(l logr.Logger) Option { return func(c *Collector) { c.log = l } }

// WithMinInterval sets how long the series of one read answer the next scrapes (0: every scrape
// reads the fleet).
func WithMinInterval(d time.Duration) Option { return func(c *Collector) { c.minInterval = d } }

// WithClock sets the time the backup schedules are read from (tests).
func WithClock(now func() time.Time) Option { return func(c *Collector) { c.intervals.now = now } }

// New returns a Collector reading from reader (the manager's cache). It reports nothing but
// tiled_operator_leader 0 until SetLeader(true).
func New(reader client.Reader, opts ...Option) *Collector {
	c := &Collector{reader: reader, readTimeout: DefaultReadTimeout, log: logr.Discard(), intervals: newIntervalCache(time.Now), minInterval: DefaultMinInterval}
	for _, o := range opts {
		o(c)
	}
	return c
}

// SetLeader turns the fleet's metrics on (this replica leads and its cache is synced) or off.
func (c *Collector) SetLeader(leader bool) { c.leader.Store(leader) }

// Leader reports whether the Collector reports the fleet.
func (c *Collector) Leader() bool { return c.leader.Load() }

// Describe sends every metric's descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads the fleet from the cache and sends its metrics; on a standby only
// tiled_operator_leader 0. The fleet's series of one read answer the scrapes of the next
// MinInterval too.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if !c.leader.Load() {
		ch <- gauge(descLeader, 0)
		return
	}
	ch <- gauge(descLeader, 1)
	fleet := c.fleetMetrics()
	ch <- prometheus.MustNewConstMetric(descCollectErrors, prometheus.CounterValue, float64(c.errors.Load()))
	for _, m := range fleet {
		ch <- m
	}
}

// fleetMetrics is the fleet's series: those of the last read while it is younger than
// minInterval, else those of a new read (none when it fails). One read at a time: concurrent
// scrapes share it.
func (c *Collector) fleetMetrics() []prometheus.Metric {
	c.recent.Lock()
	defer c.recent.Unlock()
	if c.recent.metrics != nil && time.Since(c.recent.at) < c.minInterval {
		return c.recent.metrics
	}
	c.recent.metrics = nil
	ctx, cancel := context.WithTimeout(context.Background(), c.readTimeout)
	defer cancel()
	clusters, instances, err := c.read(ctx)
	if err != nil {
		c.errors.Add(1)
		c.log.Error(err, "reading the fleet from the cache for its metrics; this scrape leaves them out")
		return nil
	}
	f := newFleet(clusters, instances)
	out := make([]prometheus.Metric, 0, 10*len(instances)+(len(States)+4)*len(clusters))
	emit := func(m prometheus.Metric) { out = append(out, m) }
	for i := range instances {
		c.instance(emit, f, &instances[i])
	}
	for i := range clusters {
		c.cluster(emit, f, &clusters[i])
	}
	if c.minInterval > 0 {
		// Kept for the scrapes of the next minInterval, and dropped after it: between scrapes
		// the Collector holds nothing (a Prometheus scrapes every 15 s or more).
		c.recent.metrics, c.recent.at = out, time.Now()
		if c.recent.drop == nil {
			c.recent.drop = time.AfterFunc(c.minInterval, c.forgetRecent)
		} else {
			c.recent.drop.Reset(c.minInterval)
		}
	}
	return out
}

// forgetRecent drops the series of the last read.
func (c *Collector) forgetRecent() {
	c.recent.Lock()
	defer c.recent.Unlock()
	if time.Since(c.recent.at) >= c.minInterval {
		c.recent.metrics = nil
	}
}

// read lists the TiledClusters and TiledInstances; the cache's own objects, read only.
func (c *Collector) read(ctx context.Context) ([]tiledv1alpha1.TiledCluster, []tiledv1alpha1.TiledInstance, error) {
	var clusters tiledv1alpha1.TiledClusterList
	if err := c.reader.List(ctx, &clusters, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	var instances tiledv1alpha1.TiledInstanceList
	if err := c.reader.List(ctx, &instances, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	return clusters.Items, instances.Items, nil
}

// fleet indexes what one scrape read.
type fleet struct {
	// clusters by namespace/name.
	clusters map[string]*tiledv1alpha1.TiledCluster
	// instances by namespace/name.
	instances map[string]*tiledv1alpha1.TiledInstance
	// holds are, per cluster (namespace/name), spec.instances[].hold by TiledInstance name.
	holds map[string]map[string]bool
}

func key(namespace, name string) string { return namespace + "/" + name }

func newFleet(clusters []tiledv1alpha1.TiledCluster, instances []tiledv1alpha1.TiledInstance) *fleet {
	f := &fleet{
		clusters:  make(map[string]*tiledv1alpha1.TiledCluster, len(clusters)),
		instances: make(map[string]*tiledv1alpha1.TiledInstance, len(instances)),
		holds:     make(map[string]map[string]bool, len(clusters)),
	}
	for i := range clusters {
		tc := &clusters[i]
		k := key(tc.Namespace, tc.Name)
		f.clusters[k] = tc
		h := make(map[string]bool, len(tc.Spec.Instances))
		for _, ci := range tc.Spec.Instances {
			h[names.Instance(tc.Name, ci.Name)] = ci.Hold
		}
		f.holds[k] = h
	}
	for i := range instances {
		f.instances[key(instances[i].Namespace, instances[i].Name)] = &instances[i]
	}
	return f
}

// held reports whether the cluster named cluster holds the instance: spec.instances[].hold is set
// for it, or the cluster is paused. A hold keeps the instance's spec as it is while its beamline is
// in user operation (the cluster controller then lists any change it holds back in status.held); a
// paused cluster writes nothing at all. Either way, a change of the cluster's profiles or template
// does not reach the instance until a person releases it.
func (f *fleet) held(ti *tiledv1alpha1.TiledInstance, cluster string) bool {
	if cluster == "" {
		return false
	}
	k := key(ti.Namespace, cluster)
	tc := f.clusters[k]
	if tc == nil {
		return false
	}
	return tc.Spec.Paused || f.holds[k][ti.Name]
}

func (c *Collector) instance(emit func(prometheus.Metric), f *fleet, ti *tiledv1alpha1.TiledInstance) {
	cluster := controllers.ClusterOf(ti)
	lv := []string{ti.Namespace, cluster, ti.Name}
	st := &ti.Status
	mode := ""
	if st.Database != nil {
		mode = st.Database.Mode
	}
	emit(gauge(descInstanceInfo, 1, append(lv, st.Version, st.Image, mode)...))
	emit(gauge(descInstanceReady, b2f(isTrue(st.Conditions, controllers.ConditionReady)), lv...))
	emit(gauge(descInstanceReadyReplicas, float64(st.ReadyReplicas), lv...))
	reason, stalled := "", 0.0
	if s := meta.FindStatusCondition(st.Conditions, controllers.ConditionStalled); s != nil && s.Status == metav1.ConditionTrue {
		reason, stalled = s.Reason, 1
	}
	emit(gauge(descInstanceStalled, stalled, append(lv, reason)...))
	emit(gauge(descInstanceRolloutPending, b2f(st.PendingRollout != nil), lv...))
	if p := st.PendingRollout; p != nil && p.Since != nil {
		emit(gauge(descInstanceChangePending, unix(p.Since.Time), append(lv, pendingChange(p), pendingWaitsFor(p))...))
	}
	emit(gauge(descInstanceHeld, b2f(f.held(ti, cluster)), lv...))
	u := st.Upgrade
	emit(gauge(descInstanceUpgrade, b2f(u != nil && u.Phase != tiledv1alpha1.UpgradeFailed), lv...))
	emit(gauge(descInstanceMigrationFailed, b2f(migrationFailed(u)), lv...))
	emit(gauge(descInstanceCatalogLost, b2f(st.CatalogLost != nil && st.CatalogLost.Phase != tiledv1alpha1.CatalogLostRestored), lv...))
	if m := st.LastMigration; m != nil && !m.CompletionTime.IsZero() {
		emit(gauge(descInstanceLastMigration, unix(m.CompletionTime.Time), append(lv, m.Result)...))
	}
	if b := st.Backup; b != nil && b.LastSuccessful != nil && !b.LastSuccessful.CompletionTime.IsZero() {
		emit(gauge(descInstanceBackupLast, unix(b.LastSuccessful.CompletionTime.Time), lv...))
	}
	if schedule, zone, ok := backupSchedule(ti); ok {
		if d, ok := c.intervals.get(schedule, zone); ok {
			emit(gauge(descInstanceBackupInterval, d.Seconds(), lv...))
		}
	}
}

// migrationFailed: the upgrade's migration failed, and its backup is being restored (Restoring) or
// was (Failed: the old version serves again, and the instance is Stalled until spec.tiled.image
// changes). A new image starts a new upgrade, and the image set back drops it: either ends it.
func migrationFailed(u *tiledv1alpha1.UpgradeStatus) bool {
	return u != nil && (u.Phase == tiledv1alpha1.UpgradeFailed || u.Phase == tiledv1alpha1.UpgradeRestoring)
}

// backupSchedule is the instance's backup schedule and its time zone, when backups are scheduled:
// a target is set, a schedule is, and backups are not suspended.
func backupSchedule(ti *tiledv1alpha1.TiledInstance) (schedule, zone string, ok bool) {
	b := ti.Spec.Backup
	if !render.HasBackupTarget(ti) || b.Schedule == "" || (b.Suspend != nil && *b.Suspend) {
		return "", "", false
	}
	return b.Schedule, b.TimeZone, true
}

func (c *Collector) cluster(emit func(prometheus.Metric), f *fleet, tc *tiledv1alpha1.TiledCluster) {
	lv := []string{tc.Namespace, tc.Name}
	counts := map[string]int{}
	for _, ci := range tc.Spec.Instances {
		ti := f.instances[key(tc.Namespace, names.Instance(tc.Name, ci.Name))]
		if ti == nil || controllers.ClusterOf(ti) != tc.Name {
			counts[StateUnready]++ // not created yet (a hold does not keep it from being created), or another owner's
			continue
		}
		if ci.Hold || tc.Spec.Paused {
			counts[StateHeld]++
		}
		st := &ti.Status
		if isTrue(st.Conditions, controllers.ConditionReady) {
			counts[StateReady]++
		} else {
			counts[StateUnready]++
		}
		if st.PendingRollout != nil {
			counts[StateRolloutPending]++
		}
		if isTrue(st.Conditions, controllers.ConditionStalled) {
			counts[StateStalled]++
		}
	}
	for _, s := range States {
		emit(gauge(descClusterInstances, float64(counts[s]), append(lv, s)...))
	}
	st := &tc.Status
	emit(gauge(descClusterReady, b2f(isTrue(st.Conditions, controllers.ConditionReady)), lv...))
	rolling := st.PendingInstances > 0
	if r := meta.FindStatusCondition(st.Conditions, controllers.ConditionReconciling); r != nil &&
		r.Status == metav1.ConditionTrue && r.Reason == controllers.ReasonRollingOut {
		rolling = true
	}
	emit(gauge(descClusterRollout, b2f(rolling), lv...))
	emit(gauge(descClusterPaused, b2f(tc.Spec.Paused), lv...))
	emit(gauge(descClusterChangesHeld, float64(st.HeldInstances), lv...))
}

func isTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// gauge is a gauge series of the fleet. The series of a read are held for the scrapes of the next
// MinInterval, so a series holds only its descriptor, value and label values (some 100 bytes),
// and its label pairs are made when a scrape writes it: a const metric made at the read holds them
// encoded, some 440 bytes a series — at a thousand instances, ~5 MB for as long as a read is kept.
func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	// Its own copy of the label values: callers pass one instance's values to all its series, and
	// append to them for some.
	return &lazyGauge{desc: d, value: v, labels: slices.Clone(labels)}
}

// lazyGauge is a gauge series whose label pairs are made when it is written (gauge).
type lazyGauge struct {
	desc   *prometheus.Desc
	value  float64
	labels []string
}

func (g *lazyGauge) Desc() *prometheus.Desc { return g.desc }

func (g *lazyGauge) Write(out *dto.Metric) error {
	m, err := prometheus.NewConstMetric(g.desc, prometheus.GaugeValue, g.value, g.labels...)
	if err != nil {
		return err
	}
	return m.Write(out)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

var (
	registeredMu sync.Mutex
	registered   = map[prometheus.Registerer]*Collector{}
)

// Register registers c with reg in place of a Collector registered there before (a previous
// manager of the same process: tests and benchmarks build several, one after another, on
// controller-runtime's global registry).
func Register(reg prometheus.Registerer, c *Collector) error {
	registeredMu.Lock()
	defer registeredMu.Unlock()
	if old := registered[reg]; old != nil {
		reg.Unregister(old)
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
		// Registered by other means: replace it.
		reg.Unregister(are.ExistingCollector)
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	registered[reg] = c
	return nil
}

// pendingChange is the kind of the waiting change p (status.pendingRollout.change; Render when it is
// not set, as the API documents).
func pendingChange(p *tiledv1alpha1.PendingRollout) string {
	if p.Change == "" {
		return "Render"
	}
	return p.Change
}

// pendingWaitsFor is what the waiting change p waits for: approval while a person has to approve it
// (status.pendingRollout.approval Required), maintenance while the maintenance calendar is closed to
// it (status.pendingRollout.window), else rollout (the cluster's rollout budget, its holds or
// pause).
func pendingWaitsFor(p *tiledv1alpha1.PendingRollout) string {
	if p.Approval == tiledv1alpha1.ApprovalRequired {
		return "approval"
	}
	if p.Window != "" {
		return "maintenance"
	}
	return "rollout"
}
