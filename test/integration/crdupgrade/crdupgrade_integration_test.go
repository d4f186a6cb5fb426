package crdupgrade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

// TestMain starts a control plane without the operator's CRDs: the test installs them itself, the
// previous release's first.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{SkipCRDs: true}, &env))
}

const (
	// fieldManager is the field manager of kubectl apply --server-side, the way the CRDs and the
	// facility's objects are applied.
	fieldManager = "kubectl"
	// statusManager writes the status, as the operator does.
	statusManager = "tiled-operator"
	// openAPIPath is the group-version of the CRDs in kube-apiserver's OpenAPI v3 discovery.
	openAPIPath = "apis/" + "tiled.blueskyproject.io/v1alpha1"
)

var (
	previousCRDs = filepath.Join(testenv.RepoRoot(), "hack", "crdcompat", "testdata", "previous")
	currentCRDs  = filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")
)

// change is the one-field change the test applies to each object after the upgrade.
type change struct {
	path  []string
	value any
}

var changes = map[string]change{
	"TiledProfile":  {[]string{"spec", "tiled", "replicas"}, int64(3)},
	"TiledCluster":  {[]string{"spec", "rollout", "maxUnavailable"}, "50%"},
	"TiledInstance": {[]string{"spec", "tiled", "replicas"}, int64(1)},
}

// TestCRDUpgrade installs the previous release's CRDs, stores objects through them, installs the
// checkout's CRDs over them with server-side apply, and checks that the stored objects are
// undisturbed and still writable.
func TestCRDUpgrade(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	previous := decodeFile(g, filepath.Join(previousCRDs, "*.yaml"))
	current := decodeFile(g, filepath.Join(currentCRDs, "*.yaml"))
	g.Expect(previous).To(HaveLen(3), "the previous release's CRDs (hack/crdcompat/refresh.sh writes them)")
	g.Expect(current).To(HaveLen(3))

	// The control plane starts with none of the operator's CRDs.
	for _, crd := range previous {
		err := env.Client.Get(ctx, client.ObjectKey{Name: crd.GetName()}, &apiextensionsv1.CustomResourceDefinition{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CRD %s is installed before the test installs it: %v", crd.GetName(), err)
	}

	// 1. The previous release.
	applyCRDs(ctx, g, previous)
	waitEstablished(ctx, g, previous)
	for _, kind := range []string{"tiledprofiles", "tiledclusters", "tiledinstances"} {
		g.Expect(env.WaitForResource(ctx, tiledv1alpha1.GroupVersion.WithResource(kind))).To(Succeed())
	}

	ns := createNamespace(ctx, g)
	objects := decodeFile(g, filepath.Join("testdata", "objects.yaml"))
	statuses := decodeFile(g, filepath.Join("testdata", "status.yaml"))
	g.Expect(objects).To(HaveLen(3))
	g.Expect(statuses).To(HaveLen(len(objects)))
	for i, obj := range objects {
		obj.SetNamespace(ns)
		statuses[i].SetNamespace(ns)
		g.Expect(statuses[i].GetKind()).To(Equal(obj.GetKind()))
		g.Expect(statuses[i].GetName()).To(Equal(obj.GetName()))
		g.Expect(apply(ctx, obj)).To(Succeed(), "applying %s through the previous release's CRD", describe(obj))
		g.Expect(applyStatus(ctx, statuses[i])).To(Succeed(), "writing the status of %s through the previous release's CRD", describe(obj))
	}
	before := map[string]*unstructured.Unstructured{}
	for _, obj := range objects {
		got := get(ctx, g, obj)
		// What was applied is what is stored: the previous release's schema pruned nothing.
		g.Expect(applied(obj.Object["spec"], got.Object["spec"], ".spec")).To(BeEmpty(), "%s as stored by the previous release (applied -> stored)", describe(obj))
		before[obj.GetKind()] = got
	}
	kinds := []string{"TiledProfile", "TiledCluster", "TiledInstance"}
	hash := stableOpenAPIHash(ctx, g, kinds, "")

	// 2. The upgrade: the checkout's CRDs, applied over the previous ones by the same manager.
	applyCRDs(ctx, g, current)
	waitEstablished(ctx, g, current)
	waitServed(ctx, t, g, previous, current, kinds, hash)

	// 3. Nothing stored was disturbed.
	for i, obj := range objects {
		t.Run(obj.GetKind(), func(t *testing.T) {
			g := NewWithT(t)
			old := before[obj.GetKind()]
			got := get(ctx, g, obj)
			// Compared as unstructured content: a field the new schema prunes is missing here.
			g.Expect(diff(old.Object["spec"], got.Object["spec"], ".spec")).To(BeEmpty(), "the spec of %s changed in the CRD upgrade (before -> after)", describe(obj))
			g.Expect(diff(old.Object["status"], got.Object["status"], ".status")).To(BeEmpty(), "the status of %s changed in the CRD upgrade (before -> after)", describe(obj))
			g.Expect(got.GetLabels()).To(Equal(old.GetLabels()))
			g.Expect(got.GetGeneration()).To(Equal(old.GetGeneration()))

			// The typed API reads it, and knows every field of its spec.
			typed := typedRead(ctx, g, obj)
			g.Expect(diff(got.Object["spec"], typedSpec(g, typed, obj.GroupVersionKind()), ".spec")).To(BeEmpty(),
				"%s read through apis/v1alpha1 lost or changed fields of its spec (stored -> typed)", describe(obj))

			// A server-side apply of the same content is accepted and changes nothing.
			g.Expect(apply(ctx, obj)).To(Succeed(), "re-applying %s after the upgrade", describe(obj))
			same := get(ctx, g, obj)
			g.Expect(diff(old.Object["spec"], same.Object["spec"], ".spec")).To(BeEmpty(), "re-applying %s changed its spec", describe(obj))
			g.Expect(same.GetGeneration()).To(Equal(old.GetGeneration()), "re-applying the same content of %s bumped its generation", describe(obj))

			// A one-field change is accepted, and is the only change.
			c, ok := changes[obj.GetKind()]
			g.Expect(ok).To(BeTrue(), "no change for kind %s", obj.GetKind())
			edited := obj.DeepCopy()
			g.Expect(unstructured.SetNestedField(edited.Object, c.value, c.path...)).To(Succeed())
			g.Expect(edited.Object["spec"]).NotTo(Equal(obj.Object["spec"]), "the change of %s changes nothing", describe(obj))
			g.Expect(apply(ctx, edited)).To(Succeed(), "applying a change of %s after the upgrade", describe(obj))
			changed := get(ctx, g, obj)
			g.Expect(applied(edited.Object["spec"], changed.Object["spec"], ".spec")).To(BeEmpty(), "the changed %s (applied -> stored)", describe(obj))
			g.Expect(diff(old.Object["spec"], changed.Object["spec"], ".spec")).To(HaveLen(1), "the change of %s is one field", describe(obj))
			g.Expect(changed.GetGeneration()).To(Equal(old.GetGeneration() + 1))

			// The status subresource takes writes: the operator observes the new generation.
			status := statuses[i].DeepCopy()
			g.Expect(unstructured.SetNestedField(status.Object, changed.GetGeneration(), "status", "observedGeneration")).To(Succeed())
			g.Expect(applyStatus(ctx, status)).To(Succeed(), "writing the status of %s after the upgrade", describe(obj))
			written := get(ctx, g, obj)
			g.Expect(applied(status.Object["status"], written.Object["status"], ".status")).To(BeEmpty(), "the status of %s (applied -> stored)", describe(obj))
			g.Expect(diff(edited.Object["spec"], written.Object["spec"], ".spec")).To(BeEmpty(), "a status write changed the spec of %s", describe(obj))
			g.Expect(written.GetGeneration()).To(Equal(changed.GetGeneration()), "a status write bumped the generation of %s", describe(obj))
		})
	}
}

// decodeFile reads every YAML document of the files matching pattern, in name order.
func decodeFile(g Gomega, pattern string) []*unstructured.Unstructured {
	paths, err := filepath.Glob(pattern)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths).NotTo(BeEmpty(), "no file matches %s", pattern)
	var out []*unstructured.Unstructured
	for _, p := range paths {
		f, err := os.Open(p)
		g.Expect(err).NotTo(HaveOccurred())
		dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				g.Expect(err).To(MatchError(io.EOF), "decoding %s", p)
				break
			}
			if len(raw) == 0 || string(raw) == "null" {
				continue
			}
			// Through the unstructured JSON decoder, so that integers are int64 as in what the
			// client reads back (a plain YAML decode gives float64).
			u := &unstructured.Unstructured{}
			g.Expect(u.UnmarshalJSON(raw)).To(Succeed(), "decoding %s", p)
			out = append(out, u)
		}
		_ = f.Close()
	}
	return out
}

func describe(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

// apply server-side applies obj (a copy: the client writes the answer into what it is given) as
// kubectl apply --server-side does.
func apply(ctx context.Context, obj *unstructured.Unstructured) error {
	return env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()), client.FieldOwner(fieldManager))
}

// applyStatus server-side applies the status of obj through the status subresource, as the
// operator does.
func applyStatus(ctx context.Context, obj *unstructured.Unstructured) error {
	return env.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()),
		client.FieldOwner(statusManager), client.ForceOwnership)
}

func get(ctx context.Context, g Gomega, obj *unstructured.Unstructured) *unstructured.Unstructured {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed(), "reading %s", describe(obj))
	return got
}

// typedRead reads obj through the operator's scheme into its Go type.
func typedRead(ctx context.Context, g Gomega, obj *unstructured.Unstructured) client.Object {
	ro, err := env.Scheme.New(obj.GroupVersionKind())
	g.Expect(err).NotTo(HaveOccurred(), "the scheme does not know %s", obj.GroupVersionKind())
	typed, ok := ro.(client.Object)
	g.Expect(ok).To(BeTrue())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), typed)).To(Succeed(), "reading %s typed", describe(obj))
	return typed
}

// typedSpec returns the spec of a typed object as the JSON the Go types write.
func typedSpec(g Gomega, typed client.Object, gvk schema.GroupVersionKind) any {
	// Through JSON rather than the unstructured converter, so that numbers are int64 and float64
	// as they are in what the client decodes.
	// The client clears apiVersion and kind of what it decodes into a Go type.
	typed.GetObjectKind().SetGroupVersionKind(gvk)
	raw, err := json.Marshal(typed)
	g.Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{}
	g.Expect(u.UnmarshalJSON(raw)).To(Succeed())
	return u.Object["spec"]
}

func createNamespace(ctx context.Context, g Gomega) string {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"generateName": "crdupgrade-"},
	}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	return ns.GetName()
}

// applyCRDs server-side applies the CRDs with the field manager of kubectl, without forcing: the
// upgrade is the same manager applying a newer version of the same objects.
func applyCRDs(ctx context.Context, g Gomega, crds []*unstructured.Unstructured) {
	for _, crd := range crds {
		g.Expect(apply(ctx, crd)).To(Succeed(), "applying CRD %s", crd.GetName())
	}
}

// waitEstablished waits until every CRD is Established with its names accepted.
func waitEstablished(ctx context.Context, g Gomega, crds []*unstructured.Unstructured) {
	for _, u := range crds {
		g.Eventually(func(g Gomega) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd)).To(Succeed())
			for _, want := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.Established, apiextensionsv1.NamesAccepted} {
				found := false
				for _, c := range crd.Status.Conditions {
					if c.Type == want {
						found = true
						g.Expect(c.Status).To(Equal(apiextensionsv1.ConditionTrue), "CRD %s %s: %s", u.GetName(), want, c.Message)
					}
				}
				g.Expect(found).To(BeTrue(), "CRD %s has no %s condition yet", u.GetName(), want)
			}
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
}

// openAPIHash returns the address (with its hash) that kube-apiserver publishes for the operator's
// group-version in its OpenAPI v3 discovery (/openapi/v3), once the document it names describes
// every kind of kinds; the hash changes when the served schemas change. It fails g while the
// group-version or a kind is not published yet.
func openAPIHash(ctx context.Context, g Gomega, kinds []string) string {
	raw, err := env.Clientset.Discovery().RESTClient().Get().AbsPath("/openapi/v3").DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var discovery struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	g.Expect(json.Unmarshal(raw, &discovery)).To(Succeed())
	p, ok := discovery.Paths[openAPIPath]
	g.Expect(ok).To(BeTrue(), "%s is not in /openapi/v3 yet", openAPIPath)

	raw, err = env.Clientset.Discovery().RESTClient().Get().AbsPath("/openapi/v3/" + openAPIPath).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	g.Expect(json.Unmarshal(raw, &doc)).To(Succeed())
	for _, kind := range kinds {
		found := false
		for name := range doc.Components.Schemas {
			found = found || strings.HasSuffix(name, "."+kind)
		}
		g.Expect(found).To(BeTrue(), "kind %s is not in the OpenAPI v3 document of %s yet", kind, openAPIPath)
	}
	return p.ServerRelativeURL
}

// stableOpenAPIHash waits until openAPIHash answers and then gives the same answer twice, half a
// second apart (the CRDs are applied one by one, and each one updates the document), and returns
// it. With changedFrom set, it also waits until the answer differs from changedFrom.
func stableOpenAPIHash(ctx context.Context, g Gomega, kinds []string, changedFrom string) string {
	var hash string
	g.Eventually(func(g Gomega) {
		first := openAPIHash(ctx, g, kinds)
		g.Expect(first).NotTo(Equal(changedFrom), "kube-apiserver does not publish the upgraded schemas yet")
		time.Sleep(500 * time.Millisecond)
		hash = openAPIHash(ctx, g, kinds)
		g.Expect(hash).To(Equal(first), "the OpenAPI v3 document of %s is still changing", openAPIPath)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	return hash
}

// waitServed waits until kube-apiserver serves the upgraded CRDs. Established stays True through an
// update, so it says nothing. The OpenAPI v3 document of the group-version changes once the
// apiserver's CRD informer has the new CRDs, and the handler that serves the objects reads them
// from that informer; the handler drops its cached storage in the same informer's event, which costs
// far less than rebuilding the OpenAPI document. When the two sets' schemas are the same there is
// nothing to wait for.
func waitServed(ctx context.Context, t *testing.T, g Gomega, previous, current []*unstructured.Unstructured, kinds []string, before string) {
	if sameSchemas(g, previous, current) {
		t.Logf("the previous release's CRD schemas equal the checkout's: the upgrade changes no schema")
		return
	}
	after := stableOpenAPIHash(ctx, g, kinds, before)
	t.Logf("the OpenAPI v3 document of %s changed: %s -> %s", openAPIPath, before, after)
}

// sameSchemas reports whether the CRDs of both sets, matched by name, have the same spec.versions.
func sameSchemas(g Gomega, previous, current []*unstructured.Unstructured) bool {
	versions := func(crds []*unstructured.Unstructured) map[string]any {
		out := map[string]any{}
		for _, c := range crds {
			v, _, err := unstructured.NestedFieldNoCopy(c.Object, "spec", "versions")
			g.Expect(err).NotTo(HaveOccurred())
			out[c.GetName()] = v
		}
		return out
	}
	return reflect.DeepEqual(versions(previous), versions(current))
}

// diff lists the differences between two JSON values (unstructured content), one line per path:
// "PATH: A -> B", with "(missing)" for an absent value. Empty when they are equal.
func diff(a, b any, path string) []string { return compare(a, b, path, false) }

// applied lists what of the applied content a is not in the stored content b: the same as diff,
// except that fields only in b (defaults the schema sets) are not differences.
func applied(a, b any, path string) []string { return compare(a, b, path, true) }

func compare(a, b any, path string, subset bool) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			av, ain := am[k]
			bv, bin := bm[k]
			switch {
			case !ain && subset:
			case !ain:
				out = append(out, fmt.Sprintf("%s.%s: (missing) -> %s", path, k, show(bv)))
			case !bin:
				out = append(out, fmt.Sprintf("%s.%s: %s -> (missing)", path, k, show(av)))
			default:
				out = append(out, compare(av, bv, path+"."+k, subset)...)
			}
		}
		return out
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, compare(al[i], bl[i], fmt.Sprintf("%s[%d]", path, i), subset)...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s -> %s", path, show(a), show(b))}
}

func show(v any) string {
	if v == nil {
		return "(missing)"
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%s (%T)", raw, v)
}
