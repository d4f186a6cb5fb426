package childset

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/bluesky/tiled-operator/controllers/applier"
)

// deletes records the deletes it is asked for, answering with the error queued for the name.
type deletes struct {
	errs map[string]error
	got  []deleted
}

type deleted struct {
	name string
	opts client.DeleteOptions
}

func (d *deletes) Delete(_ context.Context, obj client.Object, opts ...client.DeleteOption) error {
	var o client.DeleteOptions
	o.ApplyOptions(opts)
	d.got = append(d.got, deleted{name: obj.GetName(), opts: o})
	return d.errs[obj.GetName()]
}

var configMapKind = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

// child is a ConfigMap in ns controlled by owner ("" for none).
func child(name string, owner types.UID) client.Object {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	m.SetGroupVersionKind(configMapKind)
	if owner != "" {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledInstance", Name: "i", UID: owner, Controller: ptr.To(true)}}
	}
	return m
}

// TestPrune: only what the owner controls and no longer wants is deleted, each with a UID
// precondition (and the propagation policy when one is given), after BeforeDelete; what is gone or
// replaced already is no error; the applier forgets what was pruned.
func TestPrune(t *testing.T) {
	deleting := child("deleting", "owner")
	deleting.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	owned := []client.Object{
		child("wanted", "owner"), child("unwanted", "owner"), child("gone", "owner"), child("replaced", "owner"),
		child("someone-elses", "other"), child("uncontrolled", ""), deleting,
	}
	wanted := func(k applier.Key) bool { return k.Name == "wanted" }
	background := metav1.DeletePropagationBackground
	for _, tc := range []struct {
		name       string
		opts       PruneOptions
		errs       map[string]error
		wantDelete []string
		wantErr    string
		wantKept   map[string][]string
	}{
		{name: "owned and unwanted only", wantDelete: []string{"unwanted", "gone", "replaced"},
			errs: map[string]error{"gone": apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "gone"),
				"replaced": apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "replaced", errors.New("uid"))}},
		{name: "with a propagation policy", opts: PruneOptions{Propagation: &background}, wantDelete: []string{"unwanted", "gone", "replaced"}},
		{name: "before each delete", wantDelete: []string{"unwanted", "gone", "replaced"},
			opts: PruneOptions{BeforeDelete: func(_ context.Context, o client.Object) ([]string, error) {
				return []string{"kept-of-" + o.GetName()}, nil
			}},
			wantKept: map[string][]string{"unwanted": {"kept-of-unwanted"}, "gone": {"kept-of-gone"}, "replaced": {"kept-of-replaced"}}},
		{name: "a BeforeDelete error stops before that delete", wantDelete: nil, wantErr: "cannot label",
			opts: PruneOptions{BeforeDelete: func(context.Context, client.Object) ([]string, error) { return nil, errors.New("cannot label") }}},
		{name: "a delete error stops the prune, naming the object", wantDelete: []string{"unwanted"}, wantErr: "pruning ConfigMap/ns/unwanted: forbidden",
			errs: map[string]error{"unwanted": errors.New("forbidden")}},
		{name: "a delete error undoes what was done before it", wantDelete: []string{"unwanted"}, wantErr: "pruning ConfigMap/ns/unwanted: forbidden",
			errs: map[string]error{"unwanted": errors.New("forbidden")},
			opts: PruneOptions{
				BeforeDelete: func(_ context.Context, o client.Object) ([]string, error) { return nil, nil },
				UndoBeforeDelete: func(_ context.Context, o client.Object) error {
					return errors.New("undone " + o.GetName())
				},
			}},
		{name: "a delete that finds the object gone or replaced undoes nothing", wantDelete: []string{"unwanted", "gone", "replaced"},
			errs: map[string]error{"gone": apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "gone"),
				"replaced": apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "replaced", errors.New("uid"))},
			opts: PruneOptions{
				BeforeDelete: func(_ context.Context, o client.Object) ([]string, error) { return nil, nil },
				UndoBeforeDelete: func(_ context.Context, o client.Object) error {
					return errors.New("undone " + o.GetName())
				},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := &deletes{errs: tc.errs}
			s := newAPIServer()
			a := applier.New(s, "tiled-operator", nil)
			for _, o := range owned { // the applier remembers every object
				_, err := a.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": o.GetName(), "namespace": "ns"},
				}}), nil)
				g.Expect(err).NotTo(HaveOccurred())
			}
			pruned, err := Prune(context.Background(), d, a, configMapKind, slices.Values(owned), "owner", wanted, tc.opts)
			var names []string
			for _, got := range d.got {
				names = append(names, got.name)
				g.Expect(got.opts.Preconditions).NotTo(BeNil())
				g.Expect(*got.opts.Preconditions.UID).To(Equal(types.UID("uid-" + got.name)))
				if tc.opts.Propagation != nil {
					g.Expect(got.opts.PropagationPolicy).To(Equal(tc.opts.Propagation))
				} else {
					g.Expect(got.opts.PropagationPolicy).To(BeNil(), "no policy sent: the API server's default")
				}
			}
			g.Expect(names).To(Equal(tc.wantDelete))
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				if tc.opts.UndoBeforeDelete != nil {
					// The undo ran for the object whose delete failed (its error says so), and only for it.
					g.Expect(err).To(MatchError(ContainSubstring("undoing what was done before deleting ConfigMap/ns/unwanted: undone unwanted")))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			var prunedNames []string
			for _, p := range pruned {
				prunedNames = append(prunedNames, p.Object.GetName())
				g.Expect(p.Kept).To(Equal(tc.wantKept[p.Object.GetName()]))
			}
			g.Expect(prunedNames).To(Equal(tc.wantDelete))
			g.Expect(a.Len()).To(Equal(len(owned)-len(tc.wantDelete)), "the applier forgets what was pruned")
		})
	}
}

// TestOwned: an owner's children of a kind are found through the owner index (typed kinds and
// kinds cached as metadata only), or, for a kind outside the scheme, by label and then by their
// controller reference.
func TestOwned(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	g.Expect(appsv1.AddToScheme(scheme)).To(Succeed())
	ref := func(owner types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledInstance", Name: "i", UID: owner, Controller: ptr.To(true)}}
	}
	sts := func(name string, owner types.UID) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: ref(owner)}}
	}
	cm := func(name string, owner types.UID) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: ref(owner)}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&appsv1.StatefulSet{}, OwnerIndex, IndexController).
		WithIndex(&corev1.ConfigMap{}, OwnerIndex, IndexController).
		WithObjects(sts("mine", "owner"), sts("theirs", "other"), cm("config", "owner"), cm("other-config", "other")).
		Build()
	names := func(objs []client.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.GetName())
		}
		return out
	}

	got, err := Owned(context.Background(), c, &appsv1.StatefulSet{}, "ns", "owner", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(got)).To(ConsistOf("mine"))

	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(configMapKind)
	got, err = Owned(context.Background(), c, meta, "ns", "owner", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(got)).To(ConsistOf("config"))

	g.Expect(IndexController(cm("x", "owner"))).To(Equal([]string{"owner"}))
	g.Expect(IndexController(&corev1.ConfigMap{})).To(BeNil(), "no controller, not indexed")
}

// TestOwnedOutsideTheScheme: a kind outside the scheme (ServiceMonitors, read as unstructured and
// not indexed) is listed by the labels given, then kept only when its controller is the owner.
func TestOwnedOutsideTheScheme(t *testing.T) {
	g := NewWithT(t)
	monitor := func(name, instance string, owner types.UID) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("monitoring.coreos.com/v1")
		u.SetKind("ServiceMonitor")
		u.SetNamespace("ns")
		u.SetName(name)
		u.SetLabels(map[string]string{"app.kubernetes.io/instance": instance})
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledInstance", Name: instance, UID: owner, Controller: ptr.To(true)}})
		return u
	}
	c := fake.NewClientBuilder().WithObjects(
		monitor("mine", "i", "owner"), monitor("same-label-other-owner", "i", "other"), monitor("other-instance", "j", "owner"),
	).Build()
	proto := &unstructured.Unstructured{}
	proto.SetAPIVersion("monitoring.coreos.com/v1")
	proto.SetKind("ServiceMonitor")
	got, err := Owned(context.Background(), c, proto, "ns", "owner", client.MatchingLabels{"app.kubernetes.io/instance": "i"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].GetName()).To(Equal("mine"))
}
