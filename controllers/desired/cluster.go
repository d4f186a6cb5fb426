package desired

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/dedupe"
	"github.com/bluesky/tiled-operator/expansion"
)

// AnnotationExpansionHash is the hash of an instance's expanded content (spec, provenance, labels),
// which the cluster controller compares to tell up-to-date instances from those still to roll out.
const AnnotationExpansionHash = "tiled.blueskyproject.io/expansion-hash"

// Timer times one expansion: called as it starts, it returns the function to call with its error
// when it ends (controllers.Metrics). A nil Timer times nothing.
type Timer func() func(error)

func (t Timer) start() func(error) {
	if t == nil {
		return func(error) {}
	}
	return t()
}

// Expansions is the desired state of TiledClusters, and its cache: per cluster, its last expansion
// with the inputs it came from. Expand is pure, so a reconcile caused by an instance's status (the
// most common kind) need not run it again. Safe for concurrent use by reconciles of different
// clusters; the zero value is ready.
type Expansions struct {
	memos sync.Map // types.NamespacedName -> *memo
}

// memo is a cluster's last expansion.
type memo struct {
	// key identifies the expansion's inputs (expansionKey).
	key string
	// profiles are the profiles the expansion used, for the status.
	profiles []tiledv1alpha1.SelectedProfile
	err      error
	// intents are the expansion's instances as the applier needs them to decide whether an apply
	// must be sent — names and hashes, not objects: a reconcile that must send one, or compare a held
	// instance with its expansion, expands the cluster again (Instances.get), which is pure.
	intents []intent
	// changed remembers, by instance name, the fields a held change would change (ChangedFields is
	// not free, and a reconcile caused by an instance's status would compute it again).
	changed map[string]changedFields
	// pending keeps the expanded instances while a rollout waits or holds some of them: each step
	// of it sends a few, and would otherwise expand the whole cluster again. Nil once every instance
	// is applied.
	pending []*tiledv1alpha1.TiledInstance
}

// intent is the apply intent of one instance.
type intent struct {
	name string
	// instance is the instance's name in the cluster's spec.instances.
	instance string
	// prepared is the applier's view of the TiledInstance object built from the expanded instance.
	prepared applier.Prepared
	hash     string
}

// changedFields are the fields in which a stored instance (identified by storedKey) differs from
// its expansion.
type changedFields struct {
	storedKey string
	fields    []string
}

// Expand returns the desired TiledInstances of cluster, expanded from candidates (every profile of
// its namespace) and builtins — or, when those are the inputs of its last expansion, that
// expansion's, without running the engine. An expansion error is remembered as its result.
func (e *Expansions) Expand(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile, builtins expansion.Builtins, timer Timer) (*Instances, error) {
	key := expansionKey(cluster, candidates, builtins.Version)
	name := types.NamespacedName{Namespace: cluster.Namespace, Name: cluster.Name}
	expand := func() ([]expansion.Instance, []tiledv1alpha1.SelectedProfile, error) {
		done := timer.start()
		// The expanded instances stay for the whole reconcile (every one may be sent), and while a
		// rollout holds some of them (pending), for its whole length: their equal parts are kept
		// once, each instance's shared as soon as it is expanded (a thousand instances' own copies
		// were ~15 MB, at once, through every expansion and a profile change's rollout). They are
		// only read from here on (Object encodes them, ChangedFields compares).
		result, err := expansion.ExpandEach(cluster, candidates, builtins, func(ti *tiledv1alpha1.TiledInstance) *tiledv1alpha1.TiledInstance {
			expandedParts.Share(ti)
			return ti
		})
		done(err)
		if err != nil {
			return nil, nil, err
		}
		return result.Instances, result.Profiles, nil
	}
	var fresh []*tiledv1alpha1.TiledInstance
	m, ok := e.load(name)
	if !ok || m.key != key {
		instances, profiles, err := expand()
		m = &memo{key: key, err: err, changed: map[string]changedFields{}}
		if err == nil {
			m.profiles = profiles
			m.intents = make([]intent, 0, len(instances))
			for _, inst := range instances {
				obj, hash, ierr := instanceObject(cluster, inst.Object)
				if ierr != nil {
					return nil, ierr
				}
				prepared, ierr := applier.PrepareUnstructured(obj)
				if ierr != nil {
					return nil, ierr
				}
				m.intents = append(m.intents, intent{name: inst.Object.Name, instance: inst.Name, prepared: prepared, hash: hash})
				fresh = append(fresh, inst.Object)
			}
		}
		e.memos.Store(name, m)
	}
	if m.err != nil {
		return nil, m.err
	}
	if fresh == nil {
		fresh = m.pending
	}
	return &Instances{cluster: cluster, m: m, typed: fresh, expand: func() ([]*tiledv1alpha1.TiledInstance, error) {
		instances, _, err := expand()
		if err != nil {
			return nil, err
		}
		typed := make([]*tiledv1alpha1.TiledInstance, len(instances))
		for j, inst := range instances {
			typed[j] = inst.Object
		}
		return typed, nil
	}}, nil
}

// expandedParts holds the parts of the expanded instances the clusters' reconciles keep.
var expandedParts = dedupe.New()

// Forget drops what is remembered of the cluster: it is gone.
func (e *Expansions) Forget(cluster types.NamespacedName) { e.memos.Delete(cluster) }

// Len is how many clusters are remembered.
func (e *Expansions) Len() int {
	n := 0
	e.memos.Range(func(any, any) bool { n++; return true })
	return n
}

func (e *Expansions) load(cluster types.NamespacedName) (*memo, bool) {
	m, ok := e.memos.Load(cluster)
	if !ok {
		return nil, false
	}
	return m.(*memo), true
}

// expansionKey identifies the inputs of an expansion: the cluster's generation, every profile of the
// namespace (uid, generation, labels) and the built-in defaults' version.
func expansionKey(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile, builtins string) string {
	parts := make([]string, 0, len(candidates)+2)
	parts = append(parts, fmt.Sprintf("%s@%d", cluster.UID, cluster.Generation), builtins)
	for i := range candidates {
		p := &candidates[i]
		parts = append(parts, fmt.Sprintf("%s@%d%v", p.UID, p.Generation, labelsString(p.Labels)))
	}
	sort.Strings(parts[2:])
	return strings.Join(parts, "|")
}

func labelsString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k+"="+l[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// Instances is the desired TiledInstances of one cluster for one reconcile: the intents of its
// expansion, in the cluster's order, and the expanded instances behind them — those the engine just
// returned, those the cache keeps while a rollout is under way, or the engine's output for the same
// inputs, computed at most once and only when the reconcile needs one (an instance to send, a held
// instance to compare). Build may be called from several goroutines; the other methods from the
// reconcile's own.
type Instances struct {
	cluster *tiledv1alpha1.TiledCluster
	m       *memo
	// mu guards typed: the instances of one reconcile are applied concurrently.
	mu    sync.Mutex
	typed []*tiledv1alpha1.TiledInstance
	// expand runs the engine again on the memo's inputs.
	expand func() ([]*tiledv1alpha1.TiledInstance, error)
}

// Len is the number of desired instances.
func (d *Instances) Len() int { return len(d.m.intents) }

// Name is the TiledInstance name of desired instance i.
func (d *Instances) Name(i int) string { return d.m.intents[i].name }

// Instance is desired instance i's name in the cluster's spec.instances.
func (d *Instances) Instance(i int) string { return d.m.intents[i].instance }

// Hash is desired instance i's expansion hash (AnnotationExpansionHash).
func (d *Instances) Hash(i int) string { return d.m.intents[i].hash }

// Prepared is the applier's prepared form of desired instance i's TiledInstance object.
func (d *Instances) Prepared(i int) applier.Prepared { return d.m.intents[i].prepared }

// Profiles are the profiles the expansion selected, in order.
func (d *Instances) Profiles() []tiledv1alpha1.SelectedProfile { return d.m.profiles }

// Object builds the TiledInstance object of desired instance i (InstanceObject), expanding the
// cluster again if this reconcile has no expanded instances yet.
func (d *Instances) Object(i int) (*unstructured.Unstructured, error) {
	typed, err := d.get(i)
	if err != nil {
		return nil, err
	}
	obj, _, err := instanceObject(d.cluster, typed)
	return obj, err
}

// ChangedFields returns the fields in which the stored instance cur differs from desired instance
// i (expansion.ChangedFields), from the cache when cur has not changed since they were computed.
func (d *Instances) ChangedFields(cur *tiledv1alpha1.TiledInstance, i int) ([]string, error) {
	in := d.m.intents[i]
	key := fmt.Sprintf("%s@%d|%s", cur.UID, cur.Generation, labelsString(cur.Labels))
	if c, ok := d.m.changed[in.name]; ok && c.storedKey == key {
		return c.fields, nil
	}
	desired, err := d.get(i)
	if err != nil {
		return nil, err
	}
	fields, err := expansion.ChangedFields(cur, desired)
	if err != nil {
		return nil, err
	}
	d.m.changed[in.name] = changedFields{storedKey: key, fields: fields}
	return fields, nil
}

// KeepWhilePending keeps this reconcile's expanded instances in the cache while the rollout still
// has instances to apply later (pending: waiting or held), and lets them go once it has none.
func (d *Instances) KeepWhilePending(pending bool) {
	if pending {
		if d.typed != nil {
			d.m.pending = d.typed
		}
		return
	}
	d.m.pending = nil
}

// get returns the expanded instance of intent i.
func (d *Instances) get(i int) (*tiledv1alpha1.TiledInstance, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.typed == nil {
		typed, err := d.expand()
		if err != nil {
			return nil, err
		}
		d.typed = typed
	}
	if len(d.typed) != len(d.m.intents) || d.typed[i].Name != d.m.intents[i].name {
		return nil, fmt.Errorf("the expansion of %s/%s changed under the same inputs (instance %d: %s)", d.cluster.Namespace, d.cluster.Name, i, d.m.intents[i].name)
	}
	return d.typed[i], nil
}

// instanceObject builds the apply intent of one instance: the engine's object (labels, spec,
// provenance) with the cluster's controller reference and the expansion hash, trimmed to the fields
// the cluster controller owns (no status, no creation timestamp).
func instanceObject(cluster *tiledv1alpha1.TiledCluster, ti *tiledv1alpha1.TiledInstance) (*unstructured.Unstructured, string, error) {
	content, err := json.Marshal(struct {
		Spec       any
		Provenance map[string]string
		Labels     map[string]string
	}{ti.Spec, ti.Provenance, ti.Labels})
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(content)
	hash := hex.EncodeToString(sum[:])[:16]
	intent := &tiledv1alpha1.TiledInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: tiledv1alpha1.GroupVersion.String(), Kind: "TiledInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ti.Name, Namespace: cluster.Namespace, Labels: ti.Labels,
			Annotations:     map[string]string{AnnotationExpansionHash: hash},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cluster, tiledv1alpha1.GroupVersion.WithKind("TiledCluster"))},
		},
		Spec:       ti.Spec,
		Provenance: ti.Provenance,
	}
	u, err := toUnstructured(intent)
	if err != nil {
		return nil, "", err
	}
	trimIntent(u)
	return u, hash, nil
}
