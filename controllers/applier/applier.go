package applier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// AnnotationIntent records, on every object the applier writes, a hash of the intent it applied.
// After a restart or a change of leader the applier has no memory of its writes; an object in the
// cache that carries the hash of today's intent, and that no other writer has edited, already holds
// it, so nothing is sent.
const AnnotationIntent = "tiled.blueskyproject.io/intent"

// unseenGrace bounds how long a missing object is taken for a cache that has not caught up with the
// applier's own create. Deletions normally arrive as informer events (Deleted); this bound covers an
// informer that relisted and never showed the object at all.
const unseenGrace = 30 * time.Second

// systemManagers are field managers of Kubernetes itself, whose fields are not edits by people.
var systemManagers = map[string]bool{
	"kube-controller-manager": true, "kube-scheduler": true, "kubelet": true, "kube-apiserver": true,
}

type record struct {
	intent   [32]byte
	at       time.Time // when the apply was sent
	preRV    string    // the resourceVersion the cache showed when the apply was sent ("" if none)
	post     string    // the object's version token after the apply
	seen     bool      // the cache has shown the object at (or after) post
	gen      int64     // the object's generation after the apply (0 for kinds without one)
	statusOf types.UID
	group    string // the owner the caller applied it for (see Group)
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
	status  map[Key]*record

	applies *prometheus.CounterVec
}

// New returns an Applier writing through c as field owner owner. When reg is not nil it exports
// tiled_operator_applies_total{kind,result} (result: sent, skipped).
func New(c client.Client, owner string, reg prometheus.Registerer) *Applier {
	a := &Applier{c: c, owner: owner, trusted: map[string]bool{owner: true}, records: map[Key]*record{}, status: map[Key]*record{}}
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

// Trust adds field managers whose fields on an object are the operator's own doing (e.g. a second
// field owner the operator labels objects with), so they never count as edits by someone else.
func (a *Applier) Trust(managers ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range managers {
		a.trusted[m] = true
	}
}

// ForeignManagers returns, sorted, the field managers of o's spec and metadata other than the
// applier's own, the trusted ones and Kubernetes' own controllers: the writers whose edits the
// operator did not make.
func (a *Applier) ForeignManagers(o client.Object) []string {
	a.mu.Lock()
	out := a.foreignManagersLocked(o)
	a.mu.Unlock()
	sort.Strings(out)
	return out
}

// meta is the part of an object the applier reads.
type meta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string                      `json:"name"`
		Namespace       string                      `json:"namespace"`
		UID             types.UID                   `json:"uid"`
		ResourceVersion string                      `json:"resourceVersion"`
		Generation      int64                       `json:"generation"`
		Labels          map[string]string           `json:"labels"`
		Annotations     map[string]string           `json:"annotations"`
		ManagedFields   []metav1.ManagedFieldsEntry `json:"managedFields"`
	} `json:"metadata"`
}

func (m *meta) key() Key {
	// The applier keeps a record per object: the strings its keys repeat are shared.
	return Key{APIVersion: intern(m.APIVersion), Kind: intern(m.Kind), Namespace: intern(m.Metadata.Namespace), Name: m.Metadata.Name}
}

func intern(s string) string { return unique.Make(s).Value() }

// token is an object's version as far as the operator's intent is concerned: the fingerprint of
// the field set the applier's field owner manages on it, and the other writers of its spec and
// metadata. Anyone who changes or removes a field the operator set takes it over (or shares it),
// which changes one or the other; Kubernetes' own controllers writing status, binding annotations
// or finalizers change neither, so they cause no re-apply.
func (a *Applier) token(managed []metav1.ManagedFieldsEntry) string {
	var b strings.Builder
	var foreign []string
	for _, mf := range managed {
		switch {
		case mf.Subresource != "":
		case mf.Manager == a.owner:
			if mf.FieldsV1 != nil {
				b.Write(Fingerprint(mf.FieldsV1.GetRawBytes()))
			}
			b.WriteString("@" + mf.APIVersion)
		case !a.trusted[mf.Manager] && !systemManagers[mf.Manager]:
			foreign = append(foreign, mf.Manager+"/"+string(mf.Operation))
		}
	}
	sort.Strings(foreign)
	b.WriteString("|" + strings.Join(foreign, ","))
	// The objects of one kind in a fleet mostly share a token (the same field set, no other
	// manager): the records hold one copy of it.
	return intern(b.String())
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

// Prepared is what the applier needs of an apply configuration to decide whether it must be sent:
// the object it names and the hash of its content. A controller that applies the same intent on
// every reconcile (the cluster controller, its instances) keeps this — a few dozen bytes — instead
// of the object, and builds the object again only when ApplyPrepared must send it.
type Prepared struct {
	// Key is the object the apply configuration names.
	Key    Key
	intent [32]byte
}

// Annotation is the value AnnotationIntent carries on an object that holds p's intent: comparing it
// with the annotation of the object as it is tells whether applying p would change it.
func (p Prepared) Annotation() string { return encodeIntent(p.intent) }

// Holds reports whether the applier itself applied p's intent to p's object, or found it applied,
// since it started (and has not forgotten it since).
func (a *Applier) Holds(p Prepared) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec := a.records[p.Key]
	return rec != nil && rec.intent == p.intent
}

// Prepare computes ac's Prepared form.
func Prepare(ac runtime.ApplyConfiguration) (Prepared, error) {
	intent, m, err := intentOf(ac)
	if err != nil {
		return Prepared{}, err
	}
	return Prepared{Key: m.key(), intent: intent}, nil
}

// PrepareUnstructured is Prepare of the apply configuration of an unstructured object
// (client.ApplyConfigurationFromUnstructured), for callers that build intents without a client's
// package (package desired).
func PrepareUnstructured(u *unstructured.Unstructured) (Prepared, error) {
	return Prepare(client.ApplyConfigurationFromUnstructured(u))
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
	case rec != nil && rec.intent == intent:
		switch {
		case current == nil:
			// Not in the cache: not seen yet after our apply (skip), or deleted since (apply again).
			// A deletion makes the controller call Deleted, which drops the record.
			if age := time.Since(rec.at); !rec.seen && age < unseenGrace {
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
	case rec == nil && current != nil && current.GetAnnotations()[AnnotationIntent] == encodeIntent(intent):
		// No memory of this object (a restart, a new leader): the object says it holds this intent.
		// Unless someone else has edited it since, nothing needs sending.
		if len(a.foreignManagersLocked(current)) == 0 {
			gen = current.GetGeneration()
			a.records[key] = &record{intent: intent, post: a.token(current.GetManagedFields()), seen: true, gen: gen, preRV: current.GetResourceVersion(), group: intern(o.group)}
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
		intent: intent,
		at:     time.Now(),
		group:  intern(o.group),
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
	skip := rec != nil && rec.intent == intent && rec.statusOf == uid && uid != ""
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
	a.status[key] = &record{intent: intent, statusOf: uid, group: intern(o.group)}
	a.mu.Unlock()
	return Result{Key: key, Sent: true}, nil
}

// Forget drops what the applier remembers of an object, e.g. after the operator deleted it.
func (a *Applier) Forget(key Key) { a.forget(key) }

// Deleted tells the applier that the cache saw the object deleted, by whoever: its next Apply sends
// the intent again even if the cache never showed the object after the applier created it.
func (a *Applier) Deleted(key Key) { a.forget(key) }

// ForgetGroup drops what the applier remembers of the objects applied for the owner g (see Group).
func (a *Applier) ForgetGroup(g string) {
	a.ForgetWhere(func(_ Key, group string) bool { return group == g })
}

// ForgetWhere drops what the applier remembers of every object for which drop returns true; used
// when an owner goes, so that records do not outlive their objects.
func (a *Applier) ForgetWhere(drop func(k Key, group string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range []map[Key]*record{a.records, a.status} {
		for k, r := range m {
			if drop(k, r.group) {
				delete(m, k)
			}
		}
	}
}

// Len returns how many objects the applier remembers (objects and statuses).
func (a *Applier) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.records) + len(a.status)
}

func (a *Applier) forget(key Key) {
	a.mu.Lock()
	delete(a.records, key)
	delete(a.status, key)
	a.mu.Unlock()
}

func intentOf(ac runtime.ApplyConfiguration) ([32]byte, *meta, error) {
	data, err := json.Marshal(ac)
	if err != nil {
		return [32]byte{}, nil, fmt.Errorf("encoding an apply configuration: %w", err)
	}
	m := &meta{}
	if content, ok := ac.(interface{ UnstructuredContent() map[string]any }); ok {
		// Read from the object itself: decoding the whole encoding again for four strings costs
		// more than encoding it did.
		u := unstructured.Unstructured{Object: content.UnstructuredContent()}
		m.APIVersion, m.Kind = u.GetAPIVersion(), u.GetKind()
		m.Metadata.Name, m.Metadata.Namespace = u.GetName(), u.GetNamespace()
	} else if err := json.Unmarshal(data, m); err != nil {
		return [32]byte{}, nil, err
	}
	if m.Kind == "" || m.Metadata.Name == "" {
		return [32]byte{}, nil, fmt.Errorf("apply configuration without kind or name: %s", truncate(data))
	}
	return sha256.Sum256(data), m, nil
}

func encodeIntent(intent [32]byte) string { return hex.EncodeToString(intent[:16]) }

func (a *Applier) foreignManagersLocked(o client.Object) []string {
	var out []string
	for _, mf := range o.GetManagedFields() {
		if mf.Subresource != "" || a.trusted[mf.Manager] || systemManagers[mf.Manager] {
			continue
		}
		out = append(out, mf.Manager)
	}
	return out
}

// withIntent returns ac as an unstructured object carrying AnnotationIntent.
func withIntent(ac runtime.ApplyConfiguration, intent [32]byte) (*unstructured.Unstructured, error) {
	u, ok := copyUnstructured(ac)
	if !ok {
		data, err := json.Marshal(ac)
		if err != nil {
			return nil, fmt.Errorf("encoding an apply configuration: %w", err)
		}
		u = &unstructured.Unstructured{}
		if err := json.Unmarshal(data, &u.Object); err != nil {
			return nil, err
		}
	}
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationIntent] = encodeIntent(intent)
	u.SetAnnotations(ann)
	return u, nil
}

// copyUnstructured returns a deep copy of an apply configuration made from an unstructured object
// (client.ApplyConfigurationFromUnstructured), without encoding it; ok is false for other apply
// configurations, or an object holding a value JSON has no type for.
func copyUnstructured(ac runtime.ApplyConfiguration) (u *unstructured.Unstructured, ok bool) {
	content, isU := ac.(interface{ UnstructuredContent() map[string]any })
	if !isU {
		return nil, false
	}
	defer func() {
		if recover() != nil { // runtime.DeepCopyJSON panics on a value of another type
			u, ok = nil, false
		}
	}()
	return &unstructured.Unstructured{Object: runtime.DeepCopyJSON(content.UnstructuredContent())}, true
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
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
