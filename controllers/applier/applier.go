package applier

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

type record struct {
	intent   [32]byte
	preRV    string // the resourceVersion the cache showed when the apply was sent ("" if none)
	post     string // the object's version token after the apply
	seen     bool   // the cache has shown the object at (or after) post
	gen      int64  // the object's generation after the apply (0 for kinds without one)
	statusOf types.UID
}

// Applier applies objects with server-side apply and skips unchanged intents. It is safe for
// concurrent use.
type Applier struct {
	c     client.Client
	owner string

	mu      sync.Mutex
	records map[Key]*record
	status  map[Key]*record

	applies *prometheus.CounterVec
}

// New returns an Applier writing through c as field owner owner. When reg is not nil it exports
// tiled_operator_applies_total{kind,result} (result: sent, skipped).
func New(c client.Client, owner string, reg prometheus.Registerer) *Applier {
	a := &Applier{c: c, owner: owner, records: map[Key]*record{}, status: map[Key]*record{}}
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

// meta is the part of an object the applier reads.
type meta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		UID             types.UID         `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Generation      int64             `json:"generation"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

func (m *meta) key() Key {
	return Key{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}
}

// token is an object's version as far as the operator's intent is concerned: its generation (plus
// its labels and annotations, which do not bump it) where the kind has one, else its resourceVersion.
func token(generation int64, rv string, labels, annotations map[string]string) string {
	if generation == 0 {
		return "rv:" + rv
	}
	var b strings.Builder
	b.WriteString("g:" + strconv.FormatInt(generation, 10))
	for _, m := range []map[string]string{labels, annotations} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("|")
		for _, k := range keys {
			b.WriteString(k + "=" + m[k] + ";")
		}
	}
	return b.String()
}

func tokenOfObject(o client.Object) string {
	return token(o.GetGeneration(), o.GetResourceVersion(), o.GetLabels(), o.GetAnnotations())
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
}

// Apply applies ac (a typed apply configuration, or client.ApplyConfigurationFromUnstructured)
// unless its intent was already applied to the object as current shows it. current is the object as
// the informer cache holds it now, or nil when the cache has no such object. After a sent apply, ac
// holds the object the API server returned.
func (a *Applier) Apply(ctx context.Context, ac runtime.ApplyConfiguration, current client.Object) (Result, error) {
	intent, m, err := intentOf(ac)
	if err != nil {
		return Result{}, err
	}
	key := m.key()
	kind := m.Kind

	a.mu.Lock()
	rec := a.records[key]
	skip := false
	var gen int64
	if rec != nil && rec.intent == intent {
		switch {
		case current == nil:
			// Not in the cache: not seen yet after our apply (skip), or deleted since (apply again).
			skip = !rec.seen
		case tokenOfObject(current) == rec.post:
			rec.seen = true
			skip = true
		case !rec.seen && current.GetResourceVersion() == rec.preRV:
			// The cache still shows the object as it was before our apply.
			skip = true
		}
		gen = rec.gen
	}
	a.mu.Unlock()
	if skip {
		a.applies.WithLabelValues(kind, "skipped").Inc()
		return Result{Key: key, Generation: gen}, nil
	}

	preRV := ""
	if current != nil {
		preRV = current.GetResourceVersion()
	}
	if err := a.c.Apply(ctx, ac, client.FieldOwner(a.owner), client.ForceOwnership); err != nil {
		a.forget(key)
		return Result{Key: key}, fmt.Errorf("applying %s: %w", key, err)
	}
	a.applies.WithLabelValues(kind, "sent").Inc()
	after, err := metaOf(ac)
	if err != nil {
		return Result{Key: key, Sent: true}, err
	}
	a.mu.Lock()
	a.records[key] = &record{
		intent: intent,
		preRV:  preRV,
		post:   token(after.Metadata.Generation, after.Metadata.ResourceVersion, after.Metadata.Labels, after.Metadata.Annotations),
		gen:    after.Metadata.Generation,
	}
	a.mu.Unlock()
	return Result{Key: key, Sent: true, Generation: after.Metadata.Generation}, nil
}

// ApplyStatus applies ac to the status subresource unless the same status intent was already applied
// to the object with this UID. The status belongs to the operator alone, so no other writer can
// have changed it.
func (a *Applier) ApplyStatus(ctx context.Context, ac runtime.ApplyConfiguration, current client.Object) (Result, error) {
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
	skip := rec != nil && rec.intent == intent && rec.statusOf == uid && uid != ""
	a.mu.Unlock()
	if skip {
		a.applies.WithLabelValues(m.Kind+"/status", "skipped").Inc()
		return Result{Key: key}, nil
	}
	if err := a.c.Status().Apply(ctx, ac, client.FieldOwner(a.owner), client.ForceOwnership); err != nil {
		return Result{Key: key}, fmt.Errorf("applying the status of %s: %w", key, err)
	}
	a.applies.WithLabelValues(m.Kind+"/status", "sent").Inc()
	a.mu.Lock()
	a.status[key] = &record{intent: intent, statusOf: uid}
	a.mu.Unlock()
	return Result{Key: key, Sent: true}, nil
}

// Forget drops what the applier remembers of an object, e.g. after the operator deleted it.
func (a *Applier) Forget(key Key) { a.forget(key) }

func (a *Applier) forget(key Key) {
	a.mu.Lock()
	delete(a.records, key)
	delete(a.status, key)
	a.mu.Unlock()
}

// KeyOf returns the key of an apply configuration.
func KeyOf(ac runtime.ApplyConfiguration) (Key, error) {
	m, err := metaOf(ac)
	if err != nil {
		return Key{}, err
	}
	return m.key(), nil
}

func intentOf(ac runtime.ApplyConfiguration) ([32]byte, *meta, error) {
	data, err := json.Marshal(ac)
	if err != nil {
		return [32]byte{}, nil, fmt.Errorf("encoding an apply configuration: %w", err)
	}
	m := &meta{}
	if err := json.Unmarshal(data, m); err != nil {
		return [32]byte{}, nil, err
	}
	if m.Kind == "" || m.Metadata.Name == "" {
		return [32]byte{}, nil, fmt.Errorf("apply configuration without kind or name: %s", truncate(data))
	}
	return sha256.Sum256(data), m, nil
}

func metaOf(ac runtime.ApplyConfiguration) (*meta, error) {
	data, err := json.Marshal(ac)
	if err != nil {
		return nil, err
	}
	m := &meta{}
	return m, json.Unmarshal(data, m)
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
