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
	// The objects of a fleet repeat a few field sets (every instance's StatefulSet has the operator
	// manage the same fields), and the cache transform fingerprints every watch event: the canonical
	// form of the same bytes is worked out once.
	key := sha256.Sum256(raw)
	fingerprints.Lock()
	fp, ok := fingerprints.m[key]
	fingerprints.Unlock()
	if ok {
		return fp
	}
	var v any
	canonical := raw
	if json.Unmarshal(raw, &v) == nil {
		if c, err := json.Marshal(v); err == nil {
			canonical = c
		}
	}
	sum := sha256.Sum256(canonical)
	fp = append(append(append([]byte{}, fingerprintPrefix...), hex.EncodeToString(sum[:16])...), '"')
	fingerprints.Lock()
	if len(fingerprints.m) >= maxFingerprints {
		clear(fingerprints.m)
	}
	fingerprints.m[key] = fp
	fingerprints.Unlock()
	return fp
}

// fingerprints remembers the fingerprints of the field sets seen last (by the SHA-256 of their
// bytes), up to maxFingerprints of them. The slices are shared: callers copy, never write.
var fingerprints = struct {
	sync.Mutex
	m map[[32]byte][]byte
}{m: map[[32]byte][]byte{}}

const maxFingerprints = 4096

// fingerprintPrefix starts a fingerprint: a JSON string, so that an unstructured object (a cached
// ServiceMonitor) can hold it in its managedFields as well as a typed one.
var fingerprintPrefix = []byte(`"fp:`)

// SlimManagedFields returns a cache transform that drops the field sets of managedFields before an
// object enters the cache, keeping who manages what (manager, operation, subresource) and, for the
// operator's own field owner, a fingerprint of its field set: enough for the applier to tell an
// object it already wrote from one someone changed, without holding the field sets, which are most
// of the memory a cached StatefulSet takes.
func SlimManagedFields(owner string) func(any) (any, error) {
	return func(in any) (any, error) {
		if obj, ok := in.(metav1.Object); ok {
			mf := obj.GetManagedFields()
			for i := range mf {
				if mf[i].FieldsV1 == nil {
					continue
				}
				if mf[i].Manager == owner && mf[i].Subresource == "" {
					mf[i].FieldsV1 = metav1.NewFieldsV1(string(Fingerprint(mf[i].FieldsV1.GetRawBytes())))
				} else {
					mf[i].FieldsV1 = nil
				}
			}
			obj.SetManagedFields(mf)
		}
		return in, nil
	}
}
