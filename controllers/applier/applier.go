package applier

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/intern"
)

// Key identifies an object.
type Key struct {
	APIVersion, Kind, Namespace, Name string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// AnnotationIntent records, on every object the applier writes, a hash of the intent it applied.
// After a restart or a change of leader the applier has no memory of its writes; an object in the
// cache that carries the hash of today's intent, and that no other writer has edited, already holds
// it, so nothing is sent.
const AnnotationIntent = "tiled.blueskyproject.io/intent"

// unseenGrace bounds how long a missing object is taken for a cache that has not caught up with the
// applier's own create. Deletions normally arrive as informer events (Deleted); this bound covers an
// informer that relisted and never showed the object at all.
const unseenGrace = 30 * time.Second

// record is what the applier remembers of an object it applied, or found applied: 22,000 of them
// at a thousand instances, so it is kept to 88 bytes (a 96-byte allocation): half the intent's
// SHA-256 (what the annotation carries too), the time as a number.
type record struct {
	intent [intentBytes]byte // the intent applied: the first half of its SHA-256 (shortIntent)
	at     int64             // when the apply was sent, in Unix nanoseconds (0 when found applied)
	preRV  string            // the resourceVersion the cache showed when the apply was sent ("" if none)
	post   string            // the object's version token after the apply
	gen    int64             // the object's generation after the apply (0 for kinds without one)
	group  string            // the owner the caller applied it for (see Group)
	seen   bool              // the cache has shown the object at (or after) post
}

// statusRecord is what the applier remembers of a status it applied.
type statusRecord struct {
	intent [intentBytes]byte
	uid    types.UID // the object whose status it is
	group  string
}

// shortIntent is the part of an intent's hash a record keeps.
func shortIntent(intent [32]byte) (s [intentBytes]byte) {
	copy(s[:], intent[:intentBytes])
	return s
}

// Option adjusts one Apply.
type Option func(*options)

type options struct{ group string }

// Group files the object under an owner (e.g. "namespace/instance"), so that ForgetGroup drops what
// the applier remembers of all its objects when the owner goes.
func Group(g string) Option { return func(o *options) { o.group = g } }

// Applier applies objects with server-side apply and skips unchanged intents. It is safe for
// concurrent use.
type Applier struct {
	c       client.Client
	owner   string
	trusted map[string]bool

	mu      sync.Mutex
	records map[Key]*record
	status  map[Key]*statusRecord

	applies *prometheus.CounterVec
}

// New returns an Applier writing through c as field owner owner. When reg is not nil it exports
// tiled_operator_applies_total{kind,result} (result: sent, skipped).
func New(c client.Client, owner string, reg prometheus.Registerer) *Applier {
	a := &Applier{c: c, owner: owner, trusted: map[string]bool{owner: true}, records: map[Key]*record{}, status: map[Key]*statusRecord{}}
	a.applies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tiled_operator_applies_total",
		Help: "Server-side applies the operator sent, or skipped because the intent was already applied, by kind.",
	}, []string{"kind", "result"})
	if reg != nil {
		if err := reg.Register(a.applies); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok { //nolint:errorlint // prometheus returns the value type
				a.applies = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return a
}

// Result says what Apply did.
type Result struct {
	// Key is the object applied.
	Key Key
	// Sent is true when a request went to the API server, false when the intent was already applied.
	Sent bool
	// Generation is the object's generation after the operator's last apply of this intent (0 when
	// the kind has none). A cache that shows an older generation has not caught up yet: status read
	// from it (e.g. a StatefulSet's ready replicas) describes the previous spec.
	Generation int64
	// Recheck, when not zero, says the object is missing from the cache but was created so recently
	// that the cache may not have caught up: nothing was sent, and the caller should look again after
	// this long, in case the object was deleted before the cache ever showed it.
	Recheck time.Duration
	// ResourceVersion is the object's resourceVersion after a status apply that was sent (""
	// otherwise): a cache that shows an older one has not caught up with the write yet.
	ResourceVersion string
}

// Apply applies ac (a typed apply configuration, or client.ApplyConfigurationFromUnstructured)
// unless its intent was already applied to the object as current shows it. current is the object as
// the informer cache holds it now, or nil when the cache has no such object. ac is not modified:
// what is sent is a copy carrying the intent annotation.
func (a *Applier) Apply(ctx context.Context, ac runtime.ApplyConfiguration, current client.Object, opts ...Option) (Result, error) {
	p, err := Prepare(ac)
	if err != nil {
		return Result{}, err
	}
	return a.ApplyPrepared(ctx, p, func() (runtime.ApplyConfiguration, error) { return ac, nil }, current, opts...)
}

// ApplyPrepared is Apply of the apply configuration p was prepared from, which build returns again
// (with the same content: the intent is p's) only when it must be sent.
func (a *Applier) ApplyPrepared(ctx context.Context, p Prepared, build func() (runtime.ApplyConfiguration, error), current client.Object, opts ...Option) (Result, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	intent, key := p.intent, p.Key
	kind := key.Kind

	a.mu.Lock()
	rec := a.records[key]
	skip := false
	var gen int64
	var recheck time.Duration
	switch {
	case rec != nil && rec.intent == shortIntent(intent):
		switch {
		case current == nil:
			// Not in the cache: not seen yet after our apply (skip), or deleted since (apply again).
			// A deletion makes the controller call Deleted, which drops the record.
			if age := time.Duration(time.Now().UnixNano() - rec.at); !rec.seen && age < unseenGrace {
				skip = true
				recheck = unseenGrace - age
			}
		case a.token(current.GetManagedFields()) == rec.post:
			rec.seen = true
			skip = true
		case !rec.seen && current.GetResourceVersion() == rec.preRV:
			// The cache still shows the object as it was before our apply.
			skip = true
		}
		gen = rec.gen
	case rec == nil && current != nil && IntentOf(current) == encodeIntent(intent):
		// No memory of this object (a restart, a new leader): the object says it holds this intent.
		// Unless someone else has edited it since, nothing needs sending.
		if len(a.foreignManagersLocked(current)) == 0 {
			gen = current.GetGeneration()
			a.records[key] = &record{intent: shortIntent(intent), post: a.token(current.GetManagedFields()), seen: true, gen: gen, preRV: current.GetResourceVersion(), group: intern.String(o.group)}
			skip = true
		}
	}
	a.mu.Unlock()
	if skip {
		a.applies.WithLabelValues(kind, "skipped").Inc()
		return Result{Key: key, Generation: gen, Recheck: recheck}, nil
	}

	preRV := ""
	if current != nil {
		preRV = current.GetResourceVersion()
	}
	ac, err := build()
	if err != nil {
		return Result{Key: key}, err
	}
	u, err := withIntent(ac, intent)
	if err != nil {
		return Result{Key: key}, err
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return Result{Key: key}, fmt.Errorf("encoding %s: %w", key, err)
	}
	stored := metadataOf(key)
	if err := a.c.Patch(ctx, stored, applyPatch(data), client.FieldOwner(a.owner), client.ForceOwnership); err != nil {
		a.forget(key)
		return Result{Key: key}, fmt.Errorf("applying %s: %w", key, err)
	}
	a.applies.WithLabelValues(kind, "sent").Inc()
	post, gen := a.token(stored.GetManagedFields()), stored.GetGeneration()
	a.mu.Lock()
	a.records[key] = &record{
		intent: shortIntent(intent),
		at:     time.Now().UnixNano(),
		group:  intern.String(o.group),
		preRV:  preRV,
		post:   post,
		gen:    gen,
	}
	a.mu.Unlock()
	return Result{Key: key, Sent: true, Generation: gen}, nil
}

// ApplyStatus applies ac to the status subresource unless the same status intent was already applied
// to the object with this UID. The status belongs to the operator alone, so no other writer can
// have changed it.
func (a *Applier) ApplyStatus(ctx context.Context, ac runtime.ApplyConfiguration, current client.Object, opts ...Option) (Result, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	intent, m, err := intentOf(ac)
	if err != nil {
		return Result{}, err
	}
	key := m.key()
	uid := types.UID("")
	if current != nil {
		uid = current.GetUID()
	}
	a.mu.Lock()
	rec := a.status[key]
	skip := rec != nil && rec.intent == shortIntent(intent) && rec.uid == uid && uid != ""
	a.mu.Unlock()
	if skip {
		a.applies.WithLabelValues(m.Kind+"/status", "skipped").Inc()
		return Result{Key: key}, nil
	}
	data, err := json.Marshal(ac)
	if err != nil {
		return Result{Key: key}, fmt.Errorf("encoding the status of %s: %w", key, err)
	}
	stored := metadataOf(key)
	if err := a.c.Status().Patch(ctx, stored, applyPatch(data), client.FieldOwner(a.owner), client.ForceOwnership); err != nil {
		return Result{Key: key}, fmt.Errorf("applying the status of %s: %w", key, err)
	}
	a.applies.WithLabelValues(m.Kind+"/status", "sent").Inc()
	a.mu.Lock()
	a.status[key] = &statusRecord{intent: shortIntent(intent), uid: uid, group: intern.String(o.group)}
	a.mu.Unlock()
	return Result{Key: key, Sent: true, ResourceVersion: stored.ResourceVersion}, nil
}

// applyPatch is a server-side apply of an encoded apply configuration. The applier sends it through
// the metadata client with a PartialObjectMetadata (metadataOf): the API server then answers with the
// stored object's metadata alone (as=PartialObjectMetadata, protobuf), which is all the applier reads
// of the answer (managed fields and generation), not with the whole object for the operator to
// decode and throw away.
type applyPatch []byte

func (p applyPatch) Type() types.PatchType              { return types.ApplyPatchType }
func (p applyPatch) Data(client.Object) ([]byte, error) { return p, nil }

// metadataOf is the PartialObjectMetadata naming the object k: the metadata client's object to send
// an applyPatch for k with, which the answer fills in.
func metadataOf(k Key) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.FromAPIVersionAndKind(k.APIVersion, k.Kind))
	m.SetNamespace(k.Namespace)
	m.SetName(k.Name)
	return m
}
