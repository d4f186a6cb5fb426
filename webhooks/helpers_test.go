package webhooks_test

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

// ns is the namespace of the fixtures in handler tests.
const ns = admissiontable.Namespace

// fixtures are the objects of testdata: the profiles, the cluster and the terse instance.
type fixtures struct{ *admissiontable.Base }

func loadFixtures(t testing.TB, namespace string) fixtures {
	t.Helper()
	b, err := admissiontable.LoadBase(namespace)
	if err != nil {
		t.Fatal(err)
	}
	return fixtures{b}
}

// reader is a client holding the fixtures, standing in for the manager's cache in handler tests.
func (f fixtures) reader(extra ...client.Object) client.Client {
	objs := []client.Object{f.Cluster.DeepCopy()}
	for i := range f.Profiles {
		objs = append(objs, f.Profiles[i].DeepCopy())
	}
	objs = append(objs, extra...)
	return fake.NewClientBuilder().WithScheme(testenv.NewScheme()).WithObjects(objs...).Build()
}

// handlers returns the webhooks' handlers reading from r.
func handlers(r client.Reader) map[string]admission.Handler {
	b := expansion.DefaultBuiltins()
	return map[string]admission.Handler{
		"mutate":            &webhooks.InstanceDefaulter{Reader: r, Builtins: b, Operator: webhooks.Identity{FieldManager: v1alpha1.FieldOwner, Usernames: []string{"system:serviceaccount:tiled-system:tiled-operator"}}},
		"validate-instance": &webhooks.InstanceValidator{Reader: r, Builtins: b},
		"validate-profile":  &webhooks.ProfileValidator{Reader: r, Builtins: b},
		"validate-cluster":  &webhooks.ClusterValidator{Reader: r, Builtins: b},
	}
}

// request builds the admission request the API server would send for obj (YAML or an object).
func request(t testing.TB, op admissionv1.Operation, obj, old any) admission.Request {
	t.Helper()
	raw := toJSON(t, obj)
	var meta struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	namespace := meta.Metadata.Namespace
	if namespace == "" {
		namespace = ns
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       types.UID("uid-1"),
		Kind:      metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: meta.Kind},
		Name:      meta.Metadata.Name,
		Namespace: namespace,
		Operation: op,
		UserInfo:  authenticationv1.UserInfo{Username: "beamline-admin"},
	}}
	if op == admissionv1.Delete {
		req.OldObject = runtime.RawExtension{Raw: raw}
	} else {
		req.Object = runtime.RawExtension{Raw: raw}
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Raw: toJSON(t, old)}
	}
	return req
}

func toJSON(t testing.TB, obj any) []byte {
	t.Helper()
	switch o := obj.(type) {
	case string:
		b, err := yaml.YAMLToJSON([]byte(o))
		if err != nil {
			t.Fatal(err)
		}
		return b
	case []byte:
		return o
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }
