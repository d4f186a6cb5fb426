package controllers

import (
	"context"
	"iter"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/childset"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// accepting answers every apply, of an object or of a status, with success: enough for the applier
// to remember what it applied.
type accepting struct{ client.Client }

func (accepting) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return nil
}
func (accepting) Delete(context.Context, client.Object, ...client.DeleteOption) error { return nil }
func (accepting) Status() client.SubResourceWriter                                    { return acceptingStatus{} }

type acceptingStatus struct{ client.SubResourceWriter }

func (acceptingStatus) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return nil
}

// remember has the applier remember an apply of the object kind/name in ns, or of its status,
// filed under group.
func remember(g Gomega, a *applier.Applier, kind, name string, status bool, group string) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": name, "namespace": "ns"},
	}}
	if kind != "ConfigMap" {
		u.SetAPIVersion(tiledv1alpha1.GroupVersion.String())
	}
	var err error
	if status {
		u.Object["status"] = map[string]any{"observedGeneration": int64(1)}
		_, err = a.ApplyStatus(context.Background(), client.ApplyConfigurationFromUnstructured(u), nil, applier.Group(group))
	} else {
		_, err = a.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), nil, applier.Group(group))
	}
	g.Expect(err).NotTo(HaveOccurred())
}

// none is an empty cache: every object is gone.
func none(g Gomega) client.Client {
	scheme := runtime.NewScheme()
	g.Expect(tiledv1alpha1.AddToScheme(scheme)).To(Succeed())
	return fake.NewClientBuilder().WithScheme(scheme).Build()
}

// fleetInstances expands two beamlines of the NSLS-II-like fleet.
func fleetInstances(t *testing.T) (*tiledv1alpha1.TiledCluster, []*tiledv1alpha1.TiledInstance) {
	g := NewWithT(t)
	cluster := fleet.Cluster("nsls2", "beamlines", []string{"amx", "bmm"})
	cluster.UID = "cluster-uid"
	var profiles []tiledv1alpha1.TiledProfile
	for _, p := range fleet.Profiles("nsls2") {
		profiles = append(profiles, *p)
	}
	res, err := expansion.Expand(cluster, profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	var out []*tiledv1alpha1.TiledInstance
	for _, in := range res.Instances {
		in.Object.UID = types.UID("uid-" + in.Object.Name)
		out = append(out, in.Object)
	}
	return cluster, out
}

// TestEveryMemoryIsForgotten: each memory named in memories.go is forgotten by its path — what a
// controller remembers of a cluster, an instance or a profile when its reconcile finds it gone, the
// applier's record of a child pruned or seen deleted — and only what that path is for: the
// memories of other objects stay. (The applier's process-wide fingerprints are bounded, not
// forgotten: applier.TestFingerprintsAreBounded.)
func TestEveryMemoryIsForgotten(t *testing.T) {
	_, instances := fleetInstances(t)
	for _, tc := range []struct {
		path string
		// run fills the memories of the object ns/gone and of ns/kept, takes the forget path of
		// ns/gone, and checks what is left.
		run func(g Gomega)
	}{
		{path: "a cluster gone: its expansion, its pace, its instances' and status's records", run: func(g Gomega) {
			a := applier.New(accepting{}, tiledv1alpha1.FieldOwner, nil)
			r := &TiledClusterReconciler{Client: none(g), Applier: a}
			for _, name := range []string{"gone", "kept"} {
				c := fleet.Cluster("ns", name, []string{"amx"})
				c.UID = types.UID(name)
				_, _ = r.memories.expansions.Expand(c, nil, expansion.DefaultBuiltins(), nil) // fails (no profile): remembered all the same
				r.memories.took.store(types.NamespacedName{Namespace: "ns", Name: name}, time.Second)
				remember(g, a, "TiledInstance", name+"-amx", false, "ns/"+name)
				remember(g, a, "TiledCluster", name, true, "ns/"+name)
			}
			g.Expect(r.memories.expansions.Len()).To(Equal(2))
			g.Expect(a.Len()).To(Equal(4))

			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gone"}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.memories.expansions.Len()).To(Equal(1))
			g.Expect(r.memories.took.len()).To(Equal(1))
			_, ok := r.memories.took.load(types.NamespacedName{Namespace: "ns", Name: "kept"})
			g.Expect(ok).To(BeTrue())
			g.Expect(a.Len()).To(Equal(2), "the kept cluster's records stay")
		}},
		{path: "an instance gone: its Secret's data, its render, its upgrade status, its replaced pods, its pending render change, its approvals, its notifications, its last status write, its children's and status's records", run: func(g Gomega) {
			a := applier.New(accepting{}, tiledv1alpha1.FieldOwner, nil)
			r := &TiledInstanceReconciler{Client: none(g), Applier: a}
			for i, name := range []string{"gone", "kept"} {
				ti := instances[i].DeepCopy()
				ti.Namespace, ti.Name = "ns", name
				key := types.NamespacedName{Namespace: "ns", Name: name}
				r.memories.secrets.store(key, instanceSecrets{uid: ti.UID, data: map[string][]byte{"k": []byte("v")}})
				r.memories.upgrades.store(key, writtenUpgrade{uid: ti.UID, resourceVersion: "1"})
				r.memories.replaced.store(key, writtenOver[[]tiledv1alpha1.ReplacedPod]{uid: ti.UID, resourceVersion: "1"})
				r.memories.pending.store(key, writtenOver[*tiledv1alpha1.PendingRollout]{uid: ti.UID, resourceVersion: "1"})
				r.memories.approvals.store(key, writtenOver[approvalRecords]{uid: ti.UID, resourceVersion: "1"})
				r.memories.notifications.store(key, writtenOver[*tiledv1alpha1.NotificationStatus]{uid: ti.UID, resourceVersion: "1"})
				r.memories.statusWrite.store(key, statusWrite{uid: ti.UID, over: "1", made: "2"})
				_, err := r.memories.rendered.Render(ti, ti, render.Inputs{})
				g.Expect(err).NotTo(HaveOccurred())
				remember(g, a, "ConfigMap", name+"-config", false, "ns/"+name)
				remember(g, a, "TiledInstance", name, true, "ns/"+name)
			}
			g.Expect(r.memories.rendered.Len()).To(Equal(2))

			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gone"}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.memories.secrets.len()).To(Equal(1))
			g.Expect(r.memories.upgrades.len()).To(Equal(1))
			g.Expect(r.memories.replaced.len()).To(Equal(1))
			g.Expect(r.memories.pending.len()).To(Equal(1))
			g.Expect(r.memories.approvals.len()).To(Equal(1))
			g.Expect(r.memories.notifications.len()).To(Equal(1))
			g.Expect(r.memories.statusWrite.len()).To(Equal(1))
			g.Expect(r.memories.rendered.Len()).To(Equal(1))
			g.Expect(a.Len()).To(Equal(2), "the kept instance's records stay")
		}},
		{path: "a profile gone: its verdict and its status's record, not its namesakes' records", run: func(g Gomega) {
			a := applier.New(accepting{}, tiledv1alpha1.FieldOwner, nil)
			r := &TiledProfileReconciler{Client: none(g), Applier: a}
			for _, name := range []string{"gone", "kept"} {
				r.memories.verdicts.store(types.NamespacedName{Namespace: "ns", Name: name}, &verdict{uid: types.UID(name)})
				remember(g, a, "TiledProfile", name, true, "ns/"+name)
			}
			remember(g, a, "TiledCluster", "gone", true, "ns/gone") // a cluster of the same name: the same group

			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gone"}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.memories.verdicts.len()).To(Equal(1))
			g.Expect(a.Len()).To(Equal(2), "the kept profile's record and the namesake cluster's stay")
		}},
		{path: "a child seen deleted by a watch: its record", run: func(g Gomega) {
			a := applier.New(accepting{}, tiledv1alpha1.FieldOwner, nil)
			r := &TiledInstanceReconciler{Applier: a}
			remember(g, a, "ConfigMap", "gone-config", false, "ns/i")
			remember(g, a, "ConfigMap", "kept-config", false, "ns/i")
			deleted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone-config"}}
			g.Expect(r.forgetDeleted(corev1.SchemeGroupVersion.WithKind("ConfigMap")).Delete(event.DeleteEvent{Object: deleted})).To(BeTrue(),
				"the deletion is passed on")
			g.Expect(a.Len()).To(Equal(1))
		}},
		{path: "a child pruned: its record", run: func(g Gomega) {
			a := applier.New(accepting{}, tiledv1alpha1.FieldOwner, nil)
			remember(g, a, "ConfigMap", "gone-config", false, "ns/i")
			remember(g, a, "ConfigMap", "kept-config", false, "ns/i")
			owned := func(name string) client.Object {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name),
					OwnerReferences: []metav1.OwnerReference{{Name: "i", UID: "i", Controller: ptr.To(true)}}}}
			}
			var objs iter.Seq[client.Object] = func(yield func(client.Object) bool) {
				_ = yield(owned("gone-config")) && yield(owned("kept-config"))
			}
			_, err := childset.Prune(context.Background(), accepting{}, a, corev1.SchemeGroupVersion.WithKind("ConfigMap"), objs, "i",
				func(k applier.Key) bool { return k.Name == "kept-config" }, childset.PruneOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Len()).To(Equal(1))
		}},
	} {
		t.Run(tc.path, func(t *testing.T) { tc.run(NewWithT(t)) })
	}
}
