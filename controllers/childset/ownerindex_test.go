package childset

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestOwnerIndexInNamespaceOnly: the informer's owner index files each child once, under the key
// controller-runtime's cache reader asks for when Owned lists in a namespace ("<namespace>/<uid>"),
// not a second time for lists across namespaces; a cluster-scoped child under the key of those; an
// object without a controller not at all.
func TestOwnerIndexInNamespaceOnly(t *testing.T) {
	g := NewWithT(t)
	owned := func(ns, name string, owner types.UID) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledInstance", Name: "bmm", UID: owner, Controller: ptr.To(true),
		}}}}
	}
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{ownerIndexName: indexOwnerInNamespace})
	for _, o := range []*corev1.ConfigMap{owned("ns", "a", "owner"), owned("ns", "b", "owner"), owned("ns", "c", "other"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "free"}}} {
		g.Expect(idx.Add(o)).To(Succeed())
	}
	got, err := idx.ByIndex(ownerIndexName, "ns/owner")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(2))
	g.Expect(idx.ListIndexFuncValues(ownerIndexName)).To(ConsistOf("ns/owner", "ns/other"), "one key per owner, none across namespaces")

	keys, err := indexOwnerInNamespace(owned("", "pv", "owner"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(Equal([]string{"__all_namespaces/owner"}))
	g.Expect(ownerIndexName).To(Equal("field:.metadata.controllerUID"))
}
