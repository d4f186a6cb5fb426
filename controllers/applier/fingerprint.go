package applier

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fingerprint condenses a managedFields field set (fieldsV1 JSON, always an object) to a short
// string that does not depend on the order of its keys. A fingerprint is passed through unchanged,
// so a cache that holds fingerprints instead of field sets (see SlimManagedFields) reads the same.
func Fingerprint(raw []byte) []byte {
	if bytes.HasPrefix(raw, fingerprintPrefix) {
		return raw
	}
	return fingerprint(raw).fp
}

// fingerprintFields is the fingerprint of raw as a field set the cached objects share: every object
// whose field set has this fingerprint holds the same FieldsV1 (they are never written: the cache
// hands out deep copies), instead of one of its own each.
func fingerprintFields(raw []byte) *metav1.FieldsV1 { return fingerprint(raw).fields }

// fingerprinted is a field set's fingerprint, as bytes and as the FieldsV1 that holds them.
type fingerprinted struct {
	fp     []byte
	fields *metav1.FieldsV1
}

func fingerprint(raw []byte) fingerprinted {
	// The objects of a fleet repeat a few field sets (every instance's StatefulSet has the operator
	// manage the same fields), and the cache transform fingerprints every watch event: the canonical
	// form of the same bytes is worked out once.
	key := sha256.Sum256(raw)
	fingerprints.Lock()
	f, ok := fingerprints.m[key]
	fingerprints.Unlock()
	if ok {
		return f
	}
	var v any
	canonical := raw
	if json.Unmarshal(raw, &v) == nil {
		if c, err := json.Marshal(v); err == nil {
			canonical = c
		}
	}
	sum := sha256.Sum256(canonical)
	fp := append(append(append([]byte{}, fingerprintPrefix...), hex.EncodeToString(sum[:16])...), '"')
	f = fingerprinted{fp: fp, fields: metav1.NewFieldsV1(string(fp))}
	fingerprints.Lock()
	if len(fingerprints.m) >= maxFingerprints {
		clear(fingerprints.m)
	}
	fingerprints.m[key] = f
	fingerprints.Unlock()
	return f
}

// fingerprints remembers the fingerprints of the field sets seen last (by the SHA-256 of their
// bytes), up to maxFingerprints of them. The slices and FieldsV1 are shared: callers copy, never
// write.
var fingerprints = struct {
	sync.Mutex
	m map[[32]byte]fingerprinted
}{m: map[[32]byte]fingerprinted{}}

const maxFingerprints = 4096

// fingerprintPrefix starts a fingerprint: a JSON string, so that an unstructured object (a cached
// ServiceMonitor) can hold it in its managedFields as well as a typed one.
var fingerprintPrefix = []byte(`"fp:`)

// SlimManagedFields returns a cache transform that drops the field sets of managedFields before an
// object enters the cache, keeping who manages what (manager, operation, subresource) and, for the
// operator's own field owner, a fingerprint of its field set: enough for the applier to tell an
// object it already wrote from one someone changed, without holding the field sets, which are most
// of the memory a cached StatefulSet takes. The entries the applier never reads go too: those of a
// subresource (status writes) and those of Kubernetes' own controllers (systemManagers); what is
// left is held in a slice of its own length, without the time of each entry's last write.
func SlimManagedFields(owner string) func(any) (any, error) {
	return func(in any) (any, error) {
		if obj, ok := in.(metav1.Object); ok {
			mf := obj.GetManagedFields()
			n := 0
			for i := range mf {
				if keepEntry(mf[i]) {
					n++
				}
			}
			kept := mf
			if n < len(mf) || n < cap(mf) {
				kept = nil
				if n > 0 {
					kept = make([]metav1.ManagedFieldsEntry, 0, n)
				}
				for i := range mf {
					if keepEntry(mf[i]) {
						kept = append(kept, mf[i])
					}
				}
			}
			for i := range kept {
				// When the entry was last written is never read (24 bytes each, on every object).
				kept[i].Time = nil
				if kept[i].FieldsV1 == nil {
					continue
				}
				if kept[i].Manager == owner {
					// One FieldsV1 for all the objects with this fingerprint (most of a fleet's).
					if raw := kept[i].FieldsV1.GetRawBytes(); !bytes.HasPrefix(raw, fingerprintPrefix) {
						kept[i].FieldsV1 = fingerprintFields(raw)
					}
				} else {
					kept[i].FieldsV1 = nil
				}
			}
			if len(mf) > 0 {
				obj.SetManagedFields(kept)
			}
		}
		return in, nil
	}
}

// keepEntry says whether the cache keeps a managedFields entry: the applier reads those of the
// object itself (no subresource) by managers other than Kubernetes' own (token,
// foreignManagersLocked).
func keepEntry(e metav1.ManagedFieldsEntry) bool {
	return e.Subresource == "" && !systemManagers[e.Manager]
}
