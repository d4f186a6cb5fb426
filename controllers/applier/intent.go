package applier

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/intern"
)

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
	return Key{APIVersion: intern.String(m.APIVersion), Kind: intern.String(m.Kind), Namespace: intern.String(m.Metadata.Namespace), Name: m.Metadata.Name}
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
	return rec != nil && rec.intent == shortIntent(p.intent)
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
