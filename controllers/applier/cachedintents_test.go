package applier

import (
	"context"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedConfigMap is the ConfigMap "a" of intent("a", ...) as the cache holds it (metadata only),
// at resourceVersion rv, with these annotations.
func cachedConfigMap(uid, rv string, annotations map[string]string) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "a", Namespace: "ns", UID: types.UID("uid-" + uid), ResourceVersion: rv, Annotations: annotations,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1"}},
	}}
	o.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	return o
}

// TestStripIntent: the intent leaves the cached object's annotations (the others stay, an emptied map
// goes) and IntentOf reads it back from any copy of that version; a copy of another version reads
// none; a value the applier did not write in its form stays where it is.
func TestStripIntent(t *testing.T) {
	g := NewWithT(t)
	p, err := Prepare(intent("a", "1"))
	g.Expect(err).NotTo(HaveOccurred())

	o := cachedConfigMap("strip-1", "5", map[string]string{AnnotationIntent: p.Annotation(), "other": "x"})
	StripIntent(&o.ObjectMeta)
	g.Expect(o.Annotations).To(Equal(map[string]string{"other": "x"}))
	g.Expect(IntentOf(o.DeepCopy())).To(Equal(p.Annotation()))
	older := o.DeepCopy()
	older.ResourceVersion = "4"
	g.Expect(IntentOf(older)).To(BeEmpty(), "another version's intent is not known")

	alone := cachedConfigMap("strip-2", "7", map[string]string{AnnotationIntent: p.Annotation()})
	StripIntent(&alone.ObjectMeta)
	g.Expect(alone.Annotations).To(BeNil())
	g.Expect(IntentOf(alone)).To(Equal(p.Annotation()))

	for _, odd := range []string{"not-an-intent", "ABCDEF0123456789ABCDEF0123456789"} {
		kept := cachedConfigMap("strip-3", "1", map[string]string{AnnotationIntent: odd})
		StripIntent(&kept.ObjectMeta)
		g.Expect(kept.Annotations).To(HaveKeyWithValue(AnnotationIntent, odd))
		g.Expect(IntentOf(kept)).To(Equal(odd))
	}
	runtime.KeepAlive(o)
	runtime.KeepAlive(alone)
}

// TestRestartReadsTheStrippedIntent: after a restart the applier finds the intent of a cached object
// whose annotation the cache transform moved out: nothing is sent.
func TestRestartReadsTheStrippedIntent(t *testing.T) {
	g := NewWithT(t)
	p, err := Prepare(intent("a", "1"))
	g.Expect(err).NotTo(HaveOccurred())
	o := cachedConfigMap("restart", "5", map[string]string{AnnotationIntent: p.Annotation()})
	StripIntent(&o.ObjectMeta)
	s := &server{objects: map[string]*unstructured.Unstructured{}}
	a := New(s, "tiled-operator", nil)
	res, err := a.Apply(context.Background(), intent("a", "1"), o.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Sent).To(BeFalse())
	g.Expect(s.applies).To(Equal(0))
	res, err = a.Apply(context.Background(), intent("a", "2"), o.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Sent).To(BeTrue(), "another intent is sent")
	runtime.KeepAlive(o)
}

// TestStrippedIntentIsForgotten: the table forgets an intent once the cached object it was taken
// from is collected, but not while a newer version of the object, filed since, is alive.
func TestStrippedIntentIsForgotten(t *testing.T) {
	g := NewWithT(t)
	func() {
		o := cachedConfigMap("forgotten", "1", map[string]string{AnnotationIntent: "0123456789abcdef0123456789abcdef"})
		StripIntent(&o.ObjectMeta)
	}()
	newer := cachedConfigMap("kept", "2", map[string]string{AnnotationIntent: "00000000000000000000000000000002"})
	func() {
		old := cachedConfigMap("kept", "1", map[string]string{AnnotationIntent: "00000000000000000000000000000001"})
		StripIntent(&old.ObjectMeta)
	}()
	StripIntent(&newer.ObjectMeta)
	g.Expect(filed("uid-forgotten")).To(BeTrue())
	g.Eventually(func() bool { runtime.GC(); return filed("uid-forgotten") }).Should(BeFalse())
	g.Consistently(func() string { runtime.GC(); return IntentOf(newer) }).Should(Equal("00000000000000000000000000000002"))
	runtime.KeepAlive(newer)
}

// filed says whether the table holds an intent for uid.
func filed(uid types.UID) bool {
	cachedIntents.Lock()
	defer cachedIntents.Unlock()
	return cachedIntents.m[uid] != nil
}

// TestStripIntentTwice: the transform applied again to an object it already stripped keeps the
// intent answered. A version of this table that read an object without the annotation as "a newer
// version has none" and dropped its entry made the restarted manager of a bench run re-apply its
// whole fleet: some transform call sees cached objects (or copies without the annotation) again —
// which one was not found (client-go's RealFIFO skips the transform for resyncs).
func TestStripIntentTwice(t *testing.T) {
	g := NewWithT(t)
	p, err := Prepare(intent("a", "1"))
	g.Expect(err).NotTo(HaveOccurred())
	o := cachedConfigMap("twice", "5", map[string]string{AnnotationIntent: p.Annotation()})
	StripIntent(&o.ObjectMeta)
	StripIntent(&o.ObjectMeta)
	g.Expect(IntentOf(o.DeepCopy())).To(Equal(p.Annotation()))
	runtime.KeepAlive(o)
}

// TestStrippedIntentSharedByTwoCaches: one version of an object cached twice (two informers of one
// kind, one of them selecting by label) keeps its intent while either copy lives: the copy that
// leaves first (its label changed) does not take it from the other. Without the count of holders the
// entry went with the first copy collected, and a restarted manager re-applied claims and volumes.
func TestStrippedIntentSharedByTwoCaches(t *testing.T) {
	g := NewWithT(t)
	p, err := Prepare(intent("a", "1"))
	g.Expect(err).NotTo(HaveOccurred())
	stays := cachedConfigMap("two-caches", "9", map[string]string{AnnotationIntent: p.Annotation()})
	StripIntent(&stays.ObjectMeta)
	func() {
		leaves := cachedConfigMap("two-caches", "9", map[string]string{AnnotationIntent: p.Annotation()})
		StripIntent(&leaves.ObjectMeta)
	}()
	g.Consistently(func() string { runtime.GC(); return IntentOf(stays) }).Should(Equal(p.Annotation()))
	runtime.KeepAlive(stays)
	g.Eventually(func() bool { runtime.GC(); return filed("uid-two-caches") }).Should(BeFalse(), "forgotten with its last holder")
}

// TestStrippedIntentOfTwoVersions: while one informer holds version 9 of an object and another
// already version 10, a reader of either finds its version's intent; version 9's entry goes with its
// last holder and version 10's stays.
func TestStrippedIntentOfTwoVersions(t *testing.T) {
	g := NewWithT(t)
	newer := cachedConfigMap("two-versions", "10", map[string]string{AnnotationIntent: "0000000000000000000000000000000a"})
	func() {
		behind := cachedConfigMap("two-versions", "9", map[string]string{AnnotationIntent: "00000000000000000000000000000009"})
		StripIntent(&behind.ObjectMeta)
		StripIntent(&newer.ObjectMeta)
		g.Expect(IntentOf(behind.DeepCopy())).To(Equal("00000000000000000000000000000009"), "the informer behind reads its version")
		g.Expect(IntentOf(newer.DeepCopy())).To(Equal("0000000000000000000000000000000a"))
		runtime.KeepAlive(behind)
	}()
	old := cachedConfigMap("two-versions", "9", nil)
	g.Eventually(func() string { runtime.GC(); return IntentOf(old) }).Should(BeEmpty(), "version 9 forgotten with its last holder")
	g.Consistently(func() string { runtime.GC(); return IntentOf(newer) }).Should(Equal("0000000000000000000000000000000a"))
	runtime.KeepAlive(newer)
}
