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
// An entry is the intent of one version of one object (its UID and resourceVersion): IntentOf
// answers from the table only for a copy of a version some cached object still holds — a copy of
// an older version whose cached copies are all gone gets "" (its intent is not known: the applier
// then applies, which is always safe, never skips wrongly). Claims, volumes and StatefulSets are
// cached by two informers (typed and metadata), one of which may hold a version behind the other
// for a moment; each version held keeps its entry, so a reader of either cache finds its intent
// (seen without it: a restarted manager re-applied four claims and a volume that the other informer
// had seen a newer version of). An entry is forgotten when the last cached
// object it was taken from is collected (runtime.AddCleanup), unless a newer version of the object
// has replaced it since, so the table follows the cache. "Last": one version of an object may be
// cached more than once — claims and volumes are watched by two informers, one of them selecting by
// label, whose copy leaves when the label does — and the entry is shared by every copy of that
// version (a count of its holders), so that the copy that leaves first does not take the intent from
// the one that stays (seen: a restarted manager re-applied four claims and a volume).

// cachedIntents is the table of the intents StripIntent took out of cached objects.
var cachedIntents = struct {
	sync.Mutex
	m map[types.UID]*cachedIntent
}{m: map[types.UID]*cachedIntent{}}

// cachedIntent is the intent of the version rv of an object, as bytes (the annotation is their
// hex encoding).
type cachedIntent struct {
	uid    types.UID
	rv     string
	intent [intentBytes]byte
	// holders is how many cached objects this entry was taken from and are not collected yet;
	// next is the entry of another version of the same object still held by a cached copy (two
	// informers of one kind, one behind the other). Both guarded by cachedIntents.
	holders int
	next    *cachedIntent
}

// intentBytes is how much of the intent's SHA-256 the annotation carries (encodeIntent).
const intentBytes = 16

// StripIntent takes AnnotationIntent out of the annotations of an object entering the informer
// cache and files it under the object's UID (see above); the object's other annotations stay, and a
// map left empty is dropped. It does nothing to an object without a UID or resourceVersion, or whose
// annotation is not an intent the applier wrote (32 hexadecimal digits): those keep it in their map.
// holder is the object's metadata, which the cache keeps as long as the object.
func StripIntent(holder *metav1.ObjectMeta) {
	v, ok := holder.Annotations[AnnotationIntent]
	if !ok || holder.UID == "" || holder.ResourceVersion == "" || len(v) != 2*intentBytes {
		return
	}
	e := &cachedIntent{uid: holder.UID, rv: holder.ResourceVersion}
	if n, err := hex.Decode(e.intent[:], []byte(v)); err != nil || n != intentBytes || hex.EncodeToString(e.intent[:]) != v {
		return // not in encodeIntent's form (upper case, say): kept as it is
	}
	// The object was just decoded for the cache: its map is its own.
	delete(holder.Annotations, AnnotationIntent)
	if len(holder.Annotations) == 0 {
		holder.Annotations = nil
	}
	cachedIntents.Lock()
	if cur := findIntent(e.uid, e.rv); cur != nil && cur.intent == e.intent {
		// Another cached copy of this version: it shares the entry.
		e = cur
	} else {
		// The newest first: a version is mostly looked up while it is the newest.
		e.next = cachedIntents.m[e.uid]
		cachedIntents.m[e.uid] = e
	}
	e.holders++
	cachedIntents.Unlock()
	runtime.AddCleanup(holder, forgetCachedIntent, e)
}

// findIntent is the entry of version rv of the object uid, or nil; cachedIntents is locked.
func findIntent(uid types.UID, rv string) *cachedIntent {
	for e := cachedIntents.m[uid]; e != nil; e = e.next {
		if e.rv == rv {
			return e
		}
	}
	return nil
}

// forgetCachedIntent counts off a holder of e when the object it was taken from is collected, and
// unlinks e with its last holder.
func forgetCachedIntent(e *cachedIntent) {
	cachedIntents.Lock()
	defer cachedIntents.Unlock()
	e.holders--
	if e.holders > 0 {
		return
	}
	for p := (**cachedIntent)(nil); ; {
		var cur *cachedIntent
		if p == nil {
			cur = cachedIntents.m[e.uid]
		} else {
			cur = *p
		}
		if cur == nil {
			return
		}
		if cur == e {
			if p == nil {
				if e.next == nil {
					delete(cachedIntents.m, e.uid)
				} else {
					cachedIntents.m[e.uid] = e.next
				}
			} else {
				*p = e.next
			}
			e.next = nil
			return
		}
		p = &cur.next
	}
}

// IntentOf is the value of AnnotationIntent on o: from its annotations when it carries it, else
// what StripIntent took out of the cached version o is a copy of ("" when there is none, or the
// cache holds another version of o by now).
func IntentOf(o metav1.Object) string {
	if v, ok := o.GetAnnotations()[AnnotationIntent]; ok {
		return v
	}
	uid, rv := o.GetUID(), o.GetResourceVersion()
	if uid == "" {
		return ""
	}
	cachedIntents.Lock()
	e := findIntent(uid, rv)
	var b [intentBytes]byte
	if e != nil {
		b = e.intent
	}
	cachedIntents.Unlock()
	if e == nil {
		return ""
	}
	return hex.EncodeToString(b[:])
}
