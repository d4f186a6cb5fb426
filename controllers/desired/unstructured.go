package desired

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// toUnstructured converts an apply configuration (or unstructured object) to unstructured.
func toUnstructured(o any) (*unstructured.Unstructured, error) {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u.DeepCopy(), nil
	}
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return nil, err
	}
	if _, ok := u.Object["metadata"].(map[string]any); !ok {
		u.Object["metadata"] = map[string]any{}
	}
	return u, nil
}

// trimIntent drops from an intent built from a typed object the fields the operator never sets,
// which the typed object's JSON carries anyway: the status and metadata.creationTimestamp (null).
func trimIntent(u *unstructured.Unstructured) {
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
}
