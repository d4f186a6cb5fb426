package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// root is the checkout's root folder.
var root = testenv.RepoRoot()

// kustomize renders a kustomization folder (relative to the root) with kubectl's built-in kustomize.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	return kustomizeAt(t, filepath.Join(root, dir))
}

// kustomizeAt renders the kustomization folder at an absolute path.
func kustomizeAt(t *testing.T, dir string) []byte {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not on PATH (it renders the kustomizations): %v", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("kubectl kustomize %s printed warnings:\n%s", dir, stderr.String())
	}
	return stdout.Bytes()
}

// decodeAll splits a YAML stream into objects.
func decodeAll(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
}

// renderDefault renders config/default into objects.
func renderDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := decodeAll(kustomize(t, "config/default"))
	if err != nil {
		t.Fatalf("decoding config/default: %v", err)
	}
	return objs
}

// only returns the objects of one kind.
func only(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the single object of a kind, or fails.
func one[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) *T {
	t.Helper()
	found := only(objs, kind)
	if len(found) != 1 {
		t.Fatalf("config/default renders %d objects of kind %s, want 1", len(found), kind)
	}
	var typed T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(found[0].Object, &typed, true); err != nil {
		t.Fatalf("%s %s: %v", kind, found[0].GetName(), err)
	}
	return &typed
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s", o.GetKind(), o.GetName())
}

// named returns the object of a kind and name, or fails.
func named[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			var typed T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &typed, true); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return &typed
		}
	}
	t.Fatalf("config/default renders no %s %s", kind, name)
	return nil
}
