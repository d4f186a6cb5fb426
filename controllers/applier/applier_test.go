package applier

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// server stands in for the API server's answer to an apply: it stores the object with a new
// resourceVersion and a managedFields entry for the field owner whose field set is the applied
// content. Only the applier's own decision logic is under test here; what the real API server does
// with applies is tested against it in the controllers' integration tests.
type server struct {
	client.Client
	rv      int
	applies int
	objects map[string]*unstructured.Unstructured
}

// Patch takes a server-side apply as the API server would, and answers with the stored object's
// metadata, as the API server does to the metadata client.
func (s *server) Patch(_ context.Context, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || patch.Type() != types.ApplyPatchType {
		return fmt.Errorf("unexpected patch %s of %T", patch.Type(), obj)
	}
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	o := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &o.Object); err != nil {
		return err
	}
	if o.GroupVersionKind() != m.GroupVersionKind() || o.GetName() != m.GetName() || o.GetNamespace() != m.GetNamespace() {
		return fmt.Errorf("the patch of %s names %s", m.GetName(), o.GetName())
	}
	s.rv++
	s.applies++
	fields, _ := json.Marshal(o.Object["spec"])
	o.SetResourceVersion(fmt.Sprint(s.rv))
	o.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":` + string(fields) + `}`),
	}})
	s.objects[o.GetName()] = o
	return runtime.DefaultUnstructuredConverter.FromUnstructured(o.DeepCopy().Object["metadata"].(map[string]any), &m.ObjectMeta)
}

func intent(name, value string) runtime.ApplyConfiguration {
	return client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec":     map[string]any{"value": value},
	}})
}

// cached returns the object as an informer cache holding it through SlimManagedFields would.
func (s *server) cached(name string) client.Object {
	o := s.objects[name].DeepCopy()
	out, _ := SlimManagedFields("tiled-operator")(o)
	return out.(client.Object)
}

func edited(o client.Object, manager string, mutate func(*unstructured.Unstructured)) client.Object {
	u := o.(*unstructured.Unstructured).DeepCopy()
	mf := u.GetManagedFields()
	if manager != "" {
		mf = append(mf, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"})
	}
	u.SetManagedFields(mf)
	if mutate != nil {
		mutate(u)
	}
	u.SetResourceVersion(u.GetResourceVersion() + "0")
	return u
}

func TestApplyDecisions(t *testing.T) {
	type step struct {
		value   string
		current func(s *server) client.Object // the cache's view; nil func means "not in the cache"
		before  func(s *server, a *Applier)   // e.g. a deletion event, a restart
		sent    bool
	}
	seen := func(s *server) client.Object { return s.cached("a") }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"create, then the cache shows it: one write", []step{
			{value: "1", sent: true},
			{value: "1", current: seen, sent: false},
			{value: "1", current: seen, sent: false},
		}},
		{"the cache has not caught up with the create: no second write", []step{
			{value: "1", sent: true},
			{value: "1", sent: false},
		}},
		{"stale cache after an update: no second write", []step{
			{value: "1", sent: true},
			{value: "2", current: seen, sent: true},
			{value: "2", current: func(s *server) client.Object {
				o := s.cached("a").(*unstructured.Unstructured)
				o.SetResourceVersion("1") // still the version before the second apply
				return o
			}, sent: false},
		}},
		{"a new intent is sent", []step{
			{value: "1", sent: true},
			{value: "1", current: seen, sent: false},
			{value: "2", current: seen, sent: true},
		}},
		{"deleted right after creation, before the cache showed it: sent again", []step{
			{value: "1", sent: true},
			{value: "1", before: func(_ *server, a *Applier) {
				a.Deleted(Key{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"})
			}, sent: true},
		}},
		{"deleted after the cache showed it: sent again", []step{
			{value: "1", sent: true},
			{value: "1", current: seen, sent: false},
			{value: "1", sent: true},
		}},
		{"a field the operator set was taken over by another writer: sent again", []step{
			{value: "1", sent: true},
			{value: "1", current: func(s *server) client.Object {
				return edited(s.cached("a"), "kubectl-edit", func(u *unstructured.Unstructured) {
					mf := u.GetManagedFields()
					mf[0].FieldsV1 = metav1.NewFieldsV1(`{"f:spec":{}}`)
					u.SetManagedFields(mf)
				})
			}, sent: true},
		}},
		{"Kubernetes' own controllers wrote status and annotations: not sent", []step{
			{value: "1", sent: true},
			{value: "1", current: func(s *server) client.Object {
				return edited(s.cached("a"), "kube-controller-manager", func(u *unstructured.Unstructured) {
					u.SetAnnotations(map[string]string{"pv.kubernetes.io/bind-completed": "yes", AnnotationIntent: u.GetAnnotations()[AnnotationIntent]})
				})
			}, sent: false},
		}},
		{"after a restart, an object holding the intent: not sent", []step{
			{value: "1", sent: true},
			{value: "1", current: seen, before: func(_ *server, a *Applier) { a.ForgetWhere(func(Key, string) bool { return true }) }, sent: false},
			{value: "1", current: seen, sent: false},
		}},
		{"after a restart, an object someone else edited: sent", []step{
			{value: "1", sent: true},
			{value: "1", current: func(s *server) client.Object { return edited(s.cached("a"), "kubectl-edit", nil) },
				before: func(_ *server, a *Applier) { a.ForgetWhere(func(Key, string) bool { return true }) }, sent: true},
		}},
		{"after a restart, an object holding another intent: sent", []step{
			{value: "1", sent: true},
			{value: "2", current: seen, before: func(_ *server, a *Applier) { a.ForgetWhere(func(Key, string) bool { return true }) }, sent: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &server{objects: map[string]*unstructured.Unstructured{}}
			a := New(s, "tiled-operator", nil)
			for i, st := range tc.steps {
				if st.before != nil {
					st.before(s, a)
				}
				var cur client.Object
				if st.current != nil {
					cur = st.current(s)
				}
				n := s.applies
				res, err := a.Apply(context.Background(), intent("a", st.value), cur)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(res.Sent).To(Equal(st.sent), "step %d", i)
				g.Expect(s.applies-n == 1).To(Equal(st.sent), "step %d", i)
				if st.sent {
					g.Expect(s.objects["a"].GetAnnotations()).To(HaveKey(AnnotationIntent), "step %d", i)
				}
			}
		})
	}
}

// TestUnseenGrace: a create the cache never shows (an informer that relisted past it) is sent again
// once the grace has passed.
func TestUnseenGrace(t *testing.T) {
	g := NewWithT(t)
	s := &server{objects: map[string]*unstructured.Unstructured{}}
	a := New(s, "tiled-operator", nil)
	_, err := a.Apply(context.Background(), intent("a", "1"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	// Within the grace: nothing sent, and the caller is told when to look again.
	res, err := a.Apply(context.Background(), intent("a", "1"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Sent).To(BeFalse())
	g.Expect(res.Recheck).To(And(BeNumerically(">", 0), BeNumerically("<=", unseenGrace)))
	a.records[Key{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}].at = time.Now().Add(-unseenGrace - time.Second).UnixNano()
	res, err = a.Apply(context.Background(), intent("a", "1"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Sent).To(BeTrue())
}

func TestFingerprintIgnoresKeyOrder(t *testing.T) {
	g := NewWithT(t)
	a := Fingerprint([]byte(`{"f:metadata":{"f:labels":{}},"f:spec":{"f:replicas":{}}}`))
	b := Fingerprint([]byte(`{"f:spec":{"f:replicas":{}},"f:metadata":{"f:labels":{}}}`))
	c := Fingerprint([]byte(`{"f:spec":{}}`))
	g.Expect(a).To(Equal(b))
	g.Expect(a).NotTo(Equal(c))
	g.Expect(Fingerprint(a)).To(Equal(a), "a fingerprint passes through")
}

// TestSlimManagedFieldsOfAnUnstructuredObject: a cached unstructured object (a ServiceMonitor)
// holds the fingerprint too — it is valid JSON, so the object takes it — and reads the same token
// as the object before slimming.
func TestSlimManagedFieldsOfAnUnstructuredObject(t *testing.T) {
	g := NewWithT(t)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("monitoring.coreos.com/v1")
	u.SetKind("ServiceMonitor")
	u.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "monitoring.coreos.com/v1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:endpoints":{}}}`)},
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "monitoring.coreos.com/v1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{}}`)},
	})
	a := New(&server{objects: map[string]*unstructured.Unstructured{}}, "tiled-operator", nil)
	before := a.token(u.GetManagedFields())
	out, err := SlimManagedFields("tiled-operator")(u)
	g.Expect(err).NotTo(HaveOccurred())
	mf := out.(*unstructured.Unstructured).GetManagedFields()
	g.Expect(mf).To(HaveLen(2))
	g.Expect(string(mf[0].FieldsV1.GetRawBytes())).To(HavePrefix(`"fp:`), "the operator's field set is a fingerprint")
	g.Expect(mf[1].FieldsV1).To(BeNil(), "another manager's field set is dropped")
	g.Expect(a.token(mf)).To(Equal(before))
}

// TestSlimmedObjectsShareTheirFieldSet: typed objects whose operator's field sets are equal hold
// one FieldsV1 between them once slimmed (a fleet's children repeat a few field sets), and slimming
// again keeps it.
func TestSlimmedObjectsShareTheirFieldSet(t *testing.T) {
	g := NewWithT(t)
	slim := SlimManagedFields("tiled-operator")
	cm := func(fields string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsV1: metav1.NewFieldsV1(fields)},
		}}}
	}
	a, b := cm(`{"f:data":{"f:x":{}}}`), cm(`{"f:data":{"f:x":{}}}`)
	for _, o := range []*corev1.ConfigMap{a, b} {
		_, err := slim(o)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(a.ManagedFields[0].FieldsV1).To(BeIdenticalTo(b.ManagedFields[0].FieldsV1))
	g.Expect(a.ManagedFields[0].FieldsV1.GetRawBytes()).To(Equal(Fingerprint([]byte(`{"f:data":{"f:x":{}}}`))))
	shared := a.ManagedFields[0].FieldsV1
	_, err := slim(a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.ManagedFields[0].FieldsV1).To(BeIdenticalTo(shared), "idempotent")
}

// TestSlimManagedFieldsDropsWhatTheApplierSkips: the entries of a subresource and of Kubernetes'
// own controllers leave the cache, and so does when each entry was written; the token the applier
// reads is the same.
func TestSlimManagedFieldsDropsWhatTheApplierSkips(t *testing.T) {
	g := NewWithT(t)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{}}`)},
		{Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1", Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)},
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`),
			Time: &metav1.Time{Time: time.Unix(1700000000, 0)}},
	}}}
	sts.ManagedFields[0].Time = &metav1.Time{Time: time.Unix(1700000000, 0)}
	a := New(&server{objects: map[string]*unstructured.Unstructured{}}, "tiled-operator", nil)
	before, foreign := a.token(sts.ManagedFields), a.foreignManagersLocked(sts)
	_, err := SlimManagedFields("tiled-operator")(sts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sts.ManagedFields).To(HaveLen(2))
	g.Expect(cap(sts.ManagedFields)).To(Equal(2))
	g.Expect(sts.ManagedFields[0].Manager).To(Equal("tiled-operator"))
	g.Expect(sts.ManagedFields[1].Manager).To(Equal("kubectl"))
	g.Expect(sts.ManagedFields[1].FieldsV1).To(BeNil())
	g.Expect(sts.ManagedFields[0].Time).To(BeNil(), "when an entry was written is not kept")
	g.Expect(sts.ManagedFields[1].Time).To(BeNil(), "when an entry was written is not kept")
	g.Expect(a.token(sts.ManagedFields)).To(Equal(before))
	g.Expect(a.foreignManagersLocked(sts)).To(Equal(foreign))
}

// TestWithIntentCopiesUnstructured: the object sent is the apply configuration plus the intent
// annotation, made without encoding when it is unstructured (the same as the encoded way), and the
// caller's object is left as it was.
func TestWithIntentCopiesUnstructured(t *testing.T) {
	g := NewWithT(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "namespace": "ns", "labels": map[string]any{"x": "y"}},
		"data":     map[string]any{"k": "v"}, "n": float64(3), "list": []any{"a", int64(2)},
	}}
	before := u.DeepCopy()
	ac := client.ApplyConfigurationFromUnstructured(u)
	_, ok := copyUnstructured(ac)
	g.Expect(ok).To(BeTrue(), "an unstructured apply configuration is copied, not encoded")
	intent := [32]byte{1, 2, 3}
	got, err := withIntent(ac, intent)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u).To(Equal(before), "the caller's object is unchanged")
	data, err := json.Marshal(ac)
	g.Expect(err).NotTo(HaveOccurred())
	want := &unstructured.Unstructured{}
	g.Expect(json.Unmarshal(data, &want.Object)).To(Succeed())
	want.SetAnnotations(map[string]string{AnnotationIntent: encodeIntent(intent)})
	gotJSON, _ := json.Marshal(got.Object)
	wantJSON, _ := json.Marshal(want.Object)
	g.Expect(string(gotJSON)).To(Equal(string(wantJSON)))
}

// TestMemoryIsFreed: records go with their owner, so a fleet created and deleted again and again
// leaves nothing behind.
func TestMemoryIsFreed(t *testing.T) {
	g := NewWithT(t)
	s := &server{objects: map[string]*unstructured.Unstructured{}}
	a := New(s, "tiled-operator", nil)
	for round := 0; round < 3; round++ {
		for i := 0; i < 300; i++ {
			owner := fmt.Sprintf("ns/i%d", i)
			for _, child := range []string{"cm", "svc"} {
				_, err := a.Apply(context.Background(), intent(fmt.Sprintf("i%d-%s", i, child), "x"), nil, Group(owner))
				g.Expect(err).NotTo(HaveOccurred())
			}
		}
		g.Expect(a.Len()).To(Equal(600))
		for i := 0; i < 300; i++ {
			a.ForgetGroup(fmt.Sprintf("ns/i%d", i))
		}
		g.Expect(a.Len()).To(BeZero())
	}
}
