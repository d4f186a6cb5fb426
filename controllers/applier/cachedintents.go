package applier

import (
	"encoding/hex"
	"runtime"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The intent annotation of a cached object, kept beside the object instead of in its annotations.
//
// Every object the applier writes carries AnnotationIntent, and its value differs from object to
// object (a hash of the object's own content), so no two cached objects can share the map that
// holds it: at a thousand instances that is 22,000 maps of one entry, ~7.5 MB of a ~90 MB live heap
// (a Go map costs some 300 bytes however few its entries, the 32-character value 32 more). The
// cache transform (StripIntent) moves the value into a table keyed by the object's UID, as 16 bytes,
// and leaves the object's other annotations, if any, in its map (or no map at all); IntentOf reads
// the annotation from the object when it carries it and from the table otherwise, so a reader of the
// cache (the applier after a restart, the render gate) sees the same value either way.
//
// An entry is the intent of the newest version of an object the cache transform has seen (its UID):
// a newer version replaces it, and one without the annotation removes it. IntentOf answers with it
// for any copy of the object, also one of an older version still in the cache (the transform runs
// on a watch event before the cache stores it, so a reconcile may read the version before): the
// intent the object holds as far as the cache knows. Answering "" there, as a first version of this
// table did (an entry per resourceVersion), made a new leader re-apply a claim that
// kube-controller-manager had just updated (one object write in a failover of the benchmark).
// An entry is forgotten when the cached object it was taken from is collected
// (runtime.AddCleanup), unless a newer version of the object has replaced it since, so the table
// follows the cache.

// cachedIntents is the table of the intents StripIntent took out of cached objects.
var cachedIntents = struct {
	sync.Mutex
	m map[types.UID]*cachedIntent
}{m: map[types.UID]*cachedIntent{}}

// cachedIntent is the intent of the version rv of an object, as bytes (the annotation is their
// hex encoding).
type cachedIntent struct {
	uid    types.UID
	intent [intentBytes]byte
}

// intentBytes is how much of the intent's SHA-256 the annotation carries (encodeIntent).
const intentBytes = 16

// StripIntent takes AnnotationIntent out of the annotations of an object entering the informer
// cache and files it under the object's UID (see above); the object's other annotations stay, and a
// map left empty is dropped. It leaves alone an object without a UID, and one whose annotation is
// not an intent the applier wrote (32 hexadecimal digits): that keeps it in its map (and the entry
// of an older version goes).
// holder is the object's metadata, which the cache keeps as long as the object.
func StripIntent(holder *metav1.ObjectMeta) {
	if holder.UID == "" {
		return
	}
	v, ok := holder.Annotations[AnnotationIntent]
	e := &cachedIntent{uid: holder.UID}
	if !ok || len(v) != 2*intentBytes {
		forgetUID(holder.UID) // this version has none (or one in its map): an older one's is stale
		return
	}
	if n, err := hex.Decode(e.intent[:], []byte(v)); err != nil || n != intentBytes || hex.EncodeToString(e.intent[:]) != v {
		forgetUID(holder.UID)
		return // not in encodeIntent's form (upper case, say): kept as it is
	}
	// The object was just decoded for the cache: its map is its own.
	delete(holder.Annotations, AnnotationIntent)
	if len(holder.Annotations) == 0 {
		holder.Annotations = nil
	}
	cachedIntents.Lock()
	cachedIntents.m[e.uid] = e
	cachedIntents.Unlock()
	runtime.AddCleanup(holder, forgetCachedIntent, e)
}

// forgetCachedIntent drops e when the object it was taken from is collected, unless the entry of
// its UID is a newer one by then.
func forgetCachedIntent(e *cachedIntent) {
	cachedIntents.Lock()
	if cachedIntents.m[e.uid] == e {
		delete(cachedIntents.m, e.uid)
	}
	cachedIntents.Unlock()
}

// forgetUID drops the entry of uid.
func forgetUID(uid types.UID) {
	cachedIntents.Lock()
	delete(cachedIntents.m, uid)
	cachedIntents.Unlock()
}

// IntentOf is the value of AnnotationIntent on o: from its annotations when it carries it, else
// what StripIntent took out of the newest version of o the cache has seen ("" when none).
func IntentOf(o metav1.Object) string {
	if v, ok := o.GetAnnotations()[AnnotationIntent]; ok {
		return v
	}
	uid := o.GetUID()
	if uid == "" {
		return ""
	}
	cachedIntents.Lock()
	e := cachedIntents.m[uid]
	cachedIntents.Unlock()
	if e == nil {
		return ""
	}
	return hex.EncodeToString(e.intent[:])
}
