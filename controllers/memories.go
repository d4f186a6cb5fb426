package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/desired"
)

// The memories: everything the operator keeps about an object from one reconcile to the next, named
// here with what each is for and the one path that forgets it. Nothing else a reconcile computes
// outlives it, so the manager's memory follows the fleet: a memory with no forget path would grow
// with every cluster, instance or profile ever reconciled. forget_test.go tests every path.
//
//	memory          held by                  per        forgotten
//	expansions      clusterMemories          cluster    the cluster is gone (clusterMemories.forget);
//	                (desired.Expansions)                replaced when its expansion's inputs change
//	took            clusterMemories          cluster    the cluster is gone (clusterMemories.forget)
//	secrets         instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                                                    ignored for another UID of the same name
//	rendered        instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                (desired.Renders)                   replaced when its render's inputs change
//	upgrades        instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	(and catalog                                        ignored for another UID, or once the cache
//	losses, restores                                    has caught up (instanceMemories.shows)
//	in place)
//	replaced        instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                                                    ignored for another UID, or once the cache
//	                                                    has caught up (instanceMemories.shows)
//	pending         instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                                                    ignored for another UID, or once the cache
//	                                                    has caught up (instanceMemories.shows)
//	approvals       instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                                                    ignored for another UID, or once the cache
//	                                                    has caught up (instanceMemories.shows)
//	notifications   instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                                                    ignored for another UID, or once the cache
//	                                                    has caught up (instanceMemories.shows)
//	statusWrite     instanceMemories         instance   the instance is gone (instanceMemories.forget);
//	                                                    replaced by the next status write
//	verdicts        profileMemories          profile    the profile is gone (profileMemories.forget);
//	                                                    ignored for another UID or generation
//	records         applier.Applier          object     pruned (childset.Prune: Forget), seen deleted by
//	                                                    a watch (forgetDeleted: Deleted), or its owner is
//	                                                    gone (the forgets above: ForgetGroup)
//	status records  applier.Applier          object     its object is gone (the forgets above:
//	                                                    ForgetGroup for a cluster or an instance, Forget
//	                                                    for a profile)
//	fingerprints    applier (process-wide)   field set  bounded: all dropped once it holds 4096
//	                                                    (applier.Fingerprint)

// clusterMemories are what the TiledCluster controller remembers per cluster.
type clusterMemories struct {
	// expansions is the desired state's cache: the cluster's last expansion with the inputs it came
	// from, so that a reconcile caused by an instance's status runs no expansion.
	expansions desired.Expansions
	// took is how long the cluster's last reconcile took, to pace the reconciles its members'
	// changes cause (memberHandler).
	took keyed[time.Duration]
}

// forget drops what the controller and the applier remember of a cluster that is gone: its
// expansion, its pace, and the records of its status and of its instances' applies (group
// "namespace/name").
func (m *clusterMemories) forget(a *applier.Applier, cluster types.NamespacedName) {
	m.expansions.Forget(cluster)
	m.took.forget(cluster)
	a.ForgetGroup(cluster.String())
}

// instanceMemories are what the TiledInstance controller remembers per instance.
type instanceMemories struct {
	// secrets is the Secret data last applied, so that a Secret the cache has not yet seen is never
	// regenerated.
	secrets keyed[instanceSecrets]
	// rendered is the desired state's cache: the prepared form of the instance's last render with
	// the hash of its inputs, so that a reconcile caused by a child's status renders nothing.
	rendered desired.Renders
	// upgrades is the upgrade status this controller last wrote and the version of the instance it
	// was written over: until the cache shows a newer instance, a reconcile decides from what was
	// written, so that a transition (a backup's name, an Event) is never made twice.
	upgrades keyed[writtenUpgrade]
	// replaced is the status.replacedPods this controller last wrote (or is about to write: the
	// pods are deleted first) and the version of the instance it was written over: until the cache
	// shows a newer instance, a reconcile decides from it, so that a pod is never deleted twice for
	// one revision because the cache has not yet caught up with the record.
	replaced keyed[writtenOver[[]tiledv1alpha1.ReplacedPod]]
	// pending is the status.pendingRollout the render gate last found and the version of the
	// instance it was found over: until the cache shows a newer instance, the gate decides from it,
	// so that what a render change adds, found before its objects are applied, is not found again
	// (and found empty) by a reconcile that starts before the cache shows the status that records
	// it (tiledinstance_rendergate.go).
	pending keyed[writtenOver[*tiledv1alpha1.PendingRollout]]
	// approvals is the status.lastApproval and status.refusedApproval this controller last
	// recorded and the version of the instance it recorded them over: until the cache shows the
	// status write that records them, the status is computed from them, so that a reconcile on a
	// cache that shows an earlier write (e.g. the upgrade's phase, written just before in the
	// reconcile that accepted the approval) does not drop the record, nor record it again with a
	// second Approved Event (tiledinstance_approval.go).
	approvals keyed[writtenOver[approvalRecords]]
	// notifications is the status.notifications this controller last recorded (the notifications
	// it delivered, its failures) and the version of the instance it recorded it over: until the
	// cache shows the status write that records it, a reconcile reads it, so that a notification
	// is not sent twice because the cache lags (tiledinstance_notify.go).
	notifications keyed[writtenOver[*tiledv1alpha1.NotificationStatus]]
	// statusWrite is the instance's last status write: the resourceVersion it went over (the
	// cache's) and the one it made. A reconcile can start on a cache that shows an earlier write
	// but not the last: newer than the version a memory was written over, older than the write
	// that recorded it (shows).
	statusWrite keyed[statusWrite]
}

// statusWrite is a status write over the instance with this UID at resourceVersion over, which
// made resourceVersion made.
type statusWrite struct {
	uid        types.UID
	over, made string
}

// wroteStatus remembers a status write over ti (as the cache showed it) that made resourceVersion
// made.
func (m *instanceMemories) wroteStatus(ti *tiledv1alpha1.TiledInstance, made string) {
	if made == "" {
		return
	}
	m.statusWrite.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}, statusWrite{uid: ti.UID, over: ti.ResourceVersion, made: made})
}

// shows says the cache's ti is older than what a memory written over the instance with this UID
// at resourceVersion over holds, so that the memory, not the cache, is to be read: the cache still
// shows that version, or a later one older than the status write made over it (the write that
// records what is remembered, or one after it over the same version). The resourceVersions of one
// object are compared as integers (k8s.io/apimachinery's resourceversion; comparable since
// Kubernetes 1.35); a version that is not one is compared for equality alone.
func (m *instanceMemories) shows(ti *tiledv1alpha1.TiledInstance, uid types.UID, over string) bool {
	if uid != ti.UID {
		return false
	}
	if over == ti.ResourceVersion {
		return true
	}
	w, ok := m.statusWrite.load(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name})
	if !ok || w.uid != uid || w.over != over {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(ti.ResourceVersion, w.made)
	return err == nil && c < 0
}

// writtenOver is a part of an instance's status written (or found) over the instance with this UID
// at this resourceVersion: the replaced pods' records, the pending rollout.
type writtenOver[T any] struct {
	uid             types.UID
	resourceVersion string
	value           T
}

// over remembers v as written over ti as the cache shows it now.
func over[T any](ti *tiledv1alpha1.TiledInstance, v T) writtenOver[T] {
	return writtenOver[T]{uid: ti.UID, resourceVersion: ti.ResourceVersion, value: v}
}

// of returns what was written when the cache has not caught up with the write (m.shows: the
// same UID, and the version it went over or one older than the status write), and cached (the
// cache's own) otherwise.
func (w writtenOver[T]) of(m *instanceMemories, ti *tiledv1alpha1.TiledInstance, cached T) T {
	if m.shows(ti, w.uid, w.resourceVersion) {
		return w.value
	}
	return cached
}

// writtenUpgrade is the upgrade status written over the instance with this UID at this
// resourceVersion.
type writtenUpgrade struct {
	uid             types.UID
	resourceVersion string
	upgrade         *tiledv1alpha1.UpgradeStatus
	last            *tiledv1alpha1.MigrationRecord
	// restore is the status.backup.restore written (the bootstrap restore happens once).
	restore *tiledv1alpha1.RestoreRecord
	// lost and database are the status.catalogLost and status.database written (a loss is
	// recorded, and its Event sent, once; tiledinstance_lostcatalog.go).
	lost     *tiledv1alpha1.CatalogLost
	database *tiledv1alpha1.DatabaseStatus
	// backup is the status.backup written with the end of an upgrade's backup to the target, or of
	// a restore in place's backup (nil: none): its Job goes with the phase, and could not record it
	// again.
	backup *tiledv1alpha1.BackupStatus
	// inPlace is the status.inPlaceRestore written (a request is acted on, and its Events sent,
	// once; tiledinstance_inplace.go).
	inPlace *tiledv1alpha1.InPlaceRestoreStatus
}

// written is what a status write over ti recorded, to remember until the cache shows it.
func written(ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus) writtenUpgrade {
	w := writtenUpgrade{uid: ti.UID, resourceVersion: ti.ResourceVersion, upgrade: status.Upgrade, last: status.LastMigration,
		lost: status.CatalogLost, database: status.Database, inPlace: status.InPlaceRestore}
	if status.Backup != nil {
		w.restore = status.Backup.Restore
	}
	return w
}

// apply puts what was written into ti's status when the cache has not caught up with the write
// (m.shows); an instance the cache shows after the write, or another of the same name, is left as
// the cache shows it.
func (w writtenUpgrade) apply(m *instanceMemories, ti *tiledv1alpha1.TiledInstance) {
	if m.shows(ti, w.uid, w.resourceVersion) {
		ti.Status.Upgrade, ti.Status.LastMigration = w.upgrade, w.last
		ti.Status.CatalogLost, ti.Status.Database = w.lost, w.database
		ti.Status.InPlaceRestore = w.inPlace
		if w.backup != nil {
			ti.Status.Backup = w.backup.DeepCopy()
		}
		if w.restore != nil {
			if ti.Status.Backup == nil {
				ti.Status.Backup = &tiledv1alpha1.BackupStatus{}
			}
			ti.Status.Backup.Restore = w.restore
		}
	}
}

// instanceSecrets is the data of the Secret and of the metrics Secret last applied for the instance
// with this UID.
type instanceSecrets struct {
	uid     types.UID
	data    map[string][]byte
	metrics map[string][]byte
}

// forget drops what the controller and the applier remember of an instance that is gone: its
// Secret's data, its render, the upgrade status, replaced pods and approvals it wrote, and the records of its status and its children's applies (group
// "namespace/name").
func (m *instanceMemories) forget(a *applier.Applier, instance types.NamespacedName) {
	m.secrets.forget(instance)
	m.rendered.Forget(instance)
	m.upgrades.forget(instance)
	m.replaced.forget(instance)
	m.pending.forget(instance)
	m.approvals.forget(instance)
	m.notifications.forget(instance)
	m.statusWrite.forget(instance)
	a.ForgetGroup(instance.String())
}

// profileMemories are what the TiledProfile controller remembers per profile.
type profileMemories struct {
	// verdicts is the profile's validity at a generation: a recount, caused by a cluster or an
	// instance, need not check the profile again.
	verdicts keyed[*verdict]
}

// forget drops what the controller and the applier remember of a profile that is gone: its verdict
// and the record of its status — only that record: a cluster or instance of the same name has the
// same group, so ForgetGroup would take theirs too.
func (m *profileMemories) forget(a *applier.Applier, profile types.NamespacedName) {
	m.verdicts.forget(profile)
	a.Forget(applier.Key{APIVersion: tiledv1alpha1.GroupVersion.String(), Kind: "TiledProfile", Namespace: profile.Namespace, Name: profile.Name})
}

// keyed is one memory: a value per object, by namespace and name, safe for concurrent use (the
// reconciles of different objects run at once; those of one object never do). The zero value is
// ready.
type keyed[V any] struct {
	m sync.Map // types.NamespacedName -> V
}

func (k *keyed[V]) load(key types.NamespacedName) (V, bool) {
	v, ok := k.m.Load(key)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (k *keyed[V]) store(key types.NamespacedName, v V) { k.m.Store(key, v) }

func (k *keyed[V]) forget(key types.NamespacedName) { k.m.Delete(key) }

// len is how many objects are remembered.
func (k *keyed[V]) len() int {
	n := 0
	k.m.Range(func(any, any) bool { n++; return true })
	return n
}
