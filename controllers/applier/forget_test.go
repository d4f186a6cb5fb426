package applier

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRecordsAreForgotten: each way the applier forgets drops the records (of an object and of its
// status) it is meant to and no other: Forget and Deleted one object's, ForgetGroup those filed
// under one owner, ForgetWhere those it selects.
func TestRecordsAreForgotten(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget func(a *Applier)
		want   []string // the objects still remembered
	}{
		{name: "Forget (pruned)", forget: func(a *Applier) { a.Forget(Key{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a1"}) },
			want: []string{"a2", "b1"}},
		{name: "Deleted (seen deleted)", forget: func(a *Applier) { a.Deleted(Key{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "b1"}) },
			want: []string{"a1", "a2"}},
		{name: "ForgetGroup (owner gone)", forget: func(a *Applier) { a.ForgetGroup("ns/a") }, want: []string{"b1"}},
		{name: "ForgetWhere", forget: func(a *Applier) { a.ForgetWhere(func(k Key, _ string) bool { return k.Name != "a2" }) }, want: []string{"a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &server{objects: map[string]*unstructured.Unstructured{}}
			a := New(s, "tiled-operator", nil)
			for _, o := range []struct{ name, group string }{{"a1", "ns/a"}, {"a2", "ns/a"}, {"b1", "ns/b"}} {
				_, err := a.Apply(context.Background(), intent(o.name, "x"), nil, Group(o.group))
				g.Expect(err).NotTo(HaveOccurred())
			}
			tc.forget(a)
			var left []string
			a.mu.Lock()
			for k := range a.records {
				left = append(left, k.Name)
			}
			a.mu.Unlock()
			g.Expect(left).To(ConsistOf(tc.want))
		})
	}
}

// TestFingerprintsAreBounded: the process-wide cache of field-set fingerprints holds at most
// maxFingerprints of them, all dropped when it is full (a fleet repeats a few field sets, so it
// fills again with those at once); a fingerprint computed again after that is the same.
func TestFingerprintsAreBounded(t *testing.T) {
	g := NewWithT(t)
	fingerprints.Lock()
	clear(fingerprints.m)
	fingerprints.Unlock()
	size := func() int {
		fingerprints.Lock()
		defer fingerprints.Unlock()
		return len(fingerprints.m)
	}
	first := Fingerprint([]byte(`{"f:spec":{"f:n":{}}}`))
	for i := 1; i < maxFingerprints; i++ {
		Fingerprint(fmt.Appendf(nil, `{"f:spec":{"f:n%d":{}}}`, i))
	}
	g.Expect(size()).To(Equal(maxFingerprints))
	Fingerprint([]byte(`{"f:spec":{"f:one-more":{}}}`))
	g.Expect(size()).To(Equal(1), "full: all dropped, the new one kept")
	g.Expect(Fingerprint([]byte(`{"f:spec":{"f:n":{}}}`))).To(Equal(first))
	g.Expect(size()).To(Equal(2))
}
