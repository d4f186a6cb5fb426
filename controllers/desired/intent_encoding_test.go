package desired

import (
	"encoding/json"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// legacyInstanceObject is instanceObject as it was before the intents were built from typed objects
// (a hand-written map): the reference the typed builder must reproduce byte for byte, since the
// applier hashes the intent and a different hash would re-apply every instance after an upgrade.
func legacyInstanceObject(cluster *tiledv1alpha1.TiledCluster, ti *tiledv1alpha1.TiledInstance, hash string) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(ti.Spec)
	if err != nil {
		return nil, err
	}
	spec := map[string]any{}
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, err
	}
	labels := map[string]any{}
	for k, v := range ti.Labels {
		labels[k] = v
	}
	obj := map[string]any{
		"apiVersion": tiledv1alpha1.GroupVersion.String(),
		"kind":       "TiledInstance",
		"metadata": map[string]any{
			"name":        ti.Name,
			"namespace":   cluster.Namespace,
			"labels":      labels,
			"annotations": map[string]any{AnnotationExpansionHash: hash},
			"ownerReferences": []any{map[string]any{
				"apiVersion": tiledv1alpha1.GroupVersion.String(), "kind": "TiledCluster",
				"name": cluster.Name, "uid": string(cluster.UID),
				"controller": true, "blockOwnerDeletion": true,
			}},
		},
		"spec": spec,
	}
	if len(ti.Provenance) > 0 {
		prov := map[string]any{}
		for k, v := range ti.Provenance {
			prov[k] = v
		}
		obj["provenance"] = prov
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// legacyOwner is the hand-written controller reference InstanceObjects set on an instance's children.
func legacyOwner(ti *tiledv1alpha1.TiledInstance) map[string]any {
	return map[string]any{
		"apiVersion": tiledv1alpha1.GroupVersion.String(), "kind": "TiledInstance",
		"name": ti.Name, "uid": string(ti.UID), "controller": true, "blockOwnerDeletion": true,
	}
}

// intentHash is what the applier records of an intent.
func intentHash(g Gomega, u *unstructured.Unstructured) applier.Prepared {
	p, err := applier.PrepareUnstructured(u)
	g.Expect(err).NotTo(HaveOccurred())
	return p
}

// fleetInstances expands a few beamlines of the NSLS-II-like fleet: an MX beamline, chx with its
// override, plain ones; each with the provenance and labels the engine gives.
func fleetInstances(t *testing.T) (*tiledv1alpha1.TiledCluster, []*tiledv1alpha1.TiledInstance) {
	g := NewWithT(t)
	cluster := fleet.Cluster("nsls2", "beamlines", []string{"amx", "chx", "csx", "bmm"})
	cluster.UID = types.UID("0b7c2a3e-cluster")
	var profiles []tiledv1alpha1.TiledProfile
	for _, p := range fleet.Profiles("nsls2") {
		p.Generation = 3
		profiles = append(profiles, *p)
	}
	res, err := expansion.Expand(cluster, profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	var out []*tiledv1alpha1.TiledInstance
	for i, in := range res.Instances {
		ti := in.Object
		ti.UID = types.UID(fmt.Sprintf("1f4e9d2c-instance-%d", i))
		out = append(out, ti)
	}
	g.Expect(out).To(HaveLen(4))
	return cluster, out
}

// TestInstanceObjectMatchesLegacy: the TiledInstance intent built from the typed object is, as JSON,
// the hand-written map it replaces, so the applier's hash of every existing instance is unchanged.
func TestInstanceObjectMatchesLegacy(t *testing.T) {
	cluster, expanded := fleetInstances(t)
	bare := expanded[2].DeepCopy()
	bare.Name, bare.Provenance = "nsls2-bare", nil
	cases := map[string]*tiledv1alpha1.TiledInstance{
		"mx beamline (profiles and expressions)": expanded[0],
		"override (chx)":                         expanded[1],
		"plain beamline":                         expanded[3],
		"no provenance":                          bare,
	}
	for name, ti := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, hash, err := instanceObject(cluster, ti)
			g.Expect(err).NotTo(HaveOccurred())
			want, err := legacyInstanceObject(cluster, ti, hash)
			g.Expect(err).NotTo(HaveOccurred())
			gotJSON, err := json.Marshal(got.Object)
			g.Expect(err).NotTo(HaveOccurred())
			wantJSON, err := json.Marshal(want.Object)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(gotJSON)).To(Equal(string(wantJSON)))
			g.Expect(intentHash(g, got)).To(Equal(intentHash(g, want)))
			g.Expect(got.Object).To(HaveKey("spec"))
			g.Expect(got.Object).NotTo(HaveKey("status"))
			g.Expect(got.Object["metadata"]).NotTo(HaveKey("creationTimestamp"))
			g.Expect(got.GetOwnerReferences()).To(ConsistOf(metav1.OwnerReference{
				APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledCluster", Name: cluster.Name,
				UID: cluster.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}))
		})
	}
}

// TestInstanceObjectsMatchLegacy: the children's controller reference built with
// metav1.NewControllerRef is, as JSON, the hand-written one it replaces; retained claims and the
// retained Secret still carry none.
func TestInstanceObjectsMatchLegacy(t *testing.T) {
	_, expanded := fleetInstances(t)
	deleted := expanded[3].DeepCopy()
	if deleted.Spec.Storage == nil {
		deleted.Spec.Storage = &tiledv1alpha1.StorageSpec{}
	}
	deleted.Spec.Storage.Retention = tiledv1alpha1.RetentionDelete
	cases := map[string]*tiledv1alpha1.TiledInstance{
		"retain (mx)":   expanded[0],
		"retain (chx)":  expanded[1],
		"delete policy": deleted,
	}
	for name, ti := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := render.Render(ti, render.Inputs{})
			g.Expect(err).NotTo(HaveOccurred())
			got, err := InstanceObjects(ti, objs)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(HaveLen(len(objs.All())))
			owned := 0
			for i, o := range objs.All() {
				want, err := toUnstructured(o)
				g.Expect(err).NotTo(HaveOccurred())
				if len(got[i].GetOwnerReferences()) > 0 {
					owned++
					want.Object["metadata"].(map[string]any)["ownerReferences"] = []any{legacyOwner(ti)}
				}
				gotJSON, err := json.Marshal(got[i].Object)
				g.Expect(err).NotTo(HaveOccurred())
				wantJSON, err := json.Marshal(want.Object)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(gotJSON)).To(Equal(string(wantJSON)), "%s %s", got[i].GetKind(), got[i].GetName())
				g.Expect(intentHash(g, got[i])).To(Equal(intentHash(g, want)))
			}
			g.Expect(owned).To(BeNumerically(">", 3), "the namespaced children are owned")
			if render.Retained(ti) {
				g.Expect(owned).To(BeNumerically("<", len(got)), "retained claims and Secret carry no owner")
			}
		})
	}
}
