package desired

import (
	"reflect"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestExpansionKeptOnlyWhilePending: the cache holds hashes, and the expanded instances only while
// a rollout still has instances to apply (or holds some); once every instance is applied it lets
// them go. A reconcile the cache answered expands again only when it needs an instance, and at
// most once.
func TestExpansionKeptOnlyWhilePending(t *testing.T) {
	instance := func() []*tiledv1alpha1.TiledInstance {
		return []*tiledv1alpha1.TiledInstance{{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-bmm"}}}
	}
	fresh, again := instance(), instance()
	for _, tc := range []struct {
		name          string
		pendingBefore []*tiledv1alpha1.TiledInstance
		fresh         []*tiledv1alpha1.TiledInstance
		needed        bool // the reconcile reads an instance (to send it, or to compare a held one)
		pending       bool // the rollout still waits for or holds instances
		wantPending   []*tiledv1alpha1.TiledInstance
		wantExpanded  int
	}{
		{name: "all applied: nothing kept", fresh: fresh},
		{name: "all applied: what was kept goes", pendingBefore: fresh},
		{name: "waiting or held: this reconcile's expansion kept", fresh: fresh, pending: true, wantPending: fresh},
		{name: "waiting, cache answered, nothing expanded: kept as it was", pendingBefore: fresh, needed: true, pending: true, wantPending: fresh},
		{name: "waiting, expanded again for a send: that expansion kept", needed: true, pending: true, wantPending: again, wantExpanded: 1},
		{name: "all applied, cache answered, nothing needed: no expansion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &memo{intents: []intent{{name: "nsls2-bmm"}}, pending: tc.pendingBefore}
			typed := tc.fresh
			if typed == nil {
				typed = m.pending
			}
			expanded := 0
			d := &Instances{cluster: cluster("ns", "nsls2"), m: m, typed: typed, expand: func() ([]*tiledv1alpha1.TiledInstance, error) {
				expanded++
				return again, nil
			}}
			if tc.needed {
				for range 2 {
					got, err := d.get(0)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(got.Name).To(Equal("nsls2-bmm"))
				}
			}
			d.KeepWhilePending(tc.pending)
			g.Expect(expanded).To(Equal(tc.wantExpanded))
			if tc.wantPending == nil {
				g.Expect(m.pending).To(BeNil())
			} else {
				g.Expect(m.pending).To(HaveLen(1))
				g.Expect(m.pending[0]).To(BeIdenticalTo(tc.wantPending[0]))
			}
		})
	}
}

// TestExpansionViewRefusesAChangedExpansion: an expansion that no longer lines up with the cached
// intents is an error naming the cluster, never a wrong instance applied.
func TestExpansionViewRefusesAChangedExpansion(t *testing.T) {
	g := NewWithT(t)
	m := &memo{intents: []intent{{name: "nsls2-bmm"}}}
	d := &Instances{cluster: cluster("ns", "nsls2"), m: m, expand: func() ([]*tiledv1alpha1.TiledInstance, error) {
		return []*tiledv1alpha1.TiledInstance{{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-chx"}}}, nil
	}}
	_, err := d.Object(0)
	g.Expect(err).To(MatchError(ContainSubstring("the expansion of ns/nsls2 changed under the same inputs (instance 0: nsls2-bmm)")))
}

// TestExpansionIsCachedByInputs: the same inputs take the cached expansion without running the
// engine (and build the same objects when asked); a change of the cluster's generation, of a
// profile's generation or labels, or of the built-ins' version expands again; Forget drops the
// cluster's expansion.
func TestExpansionIsCachedByInputs(t *testing.T) {
	g := NewWithT(t)
	c := fleet.Cluster("nsls2", "beamlines", []string{"amx", "bmm"})
	c.UID, c.Generation = "cluster-uid", 1
	var profiles []tiledv1alpha1.TiledProfile
	for i, p := range fleet.Profiles("nsls2") {
		p.UID, p.Generation = types.UID("profile-"+string(rune('a'+i))), 1
		profiles = append(profiles, *p)
	}
	builtins := expansion.DefaultBuiltins()
	runs := 0
	timer := Timer(func() func(error) { runs++; return func(error) {} })
	e := &Expansions{}

	first, err := e.Expand(c, profiles, builtins, timer)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(Equal(1))
	g.Expect(first.Len()).To(Equal(2))
	g.Expect(first.Profiles()).NotTo(BeEmpty())
	again, err := e.Expand(c, profiles, builtins, timer)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(Equal(1), "the same inputs run no expansion")
	for i := range again.Len() {
		g.Expect(again.Prepared(i)).To(Equal(first.Prepared(i)))
		obj, err := again.Object(i)
		g.Expect(err).NotTo(HaveOccurred())
		p, err := applier.PrepareUnstructured(obj)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p).To(Equal(first.Prepared(i)), "an object built on demand is the one prepared")
		g.Expect(obj.GetAnnotations()).To(HaveKeyWithValue(AnnotationExpansionHash, again.Hash(i)))
	}
	g.Expect(runs).To(Equal(2), "building the objects expanded once more, once")

	for name, change := range map[string]func(c *tiledv1alpha1.TiledCluster, p []tiledv1alpha1.TiledProfile, b *expansion.Builtins){
		"the cluster's generation": func(c *tiledv1alpha1.TiledCluster, _ []tiledv1alpha1.TiledProfile, _ *expansion.Builtins) {
			c.Generation++
		},
		"a profile's generation": func(_ *tiledv1alpha1.TiledCluster, p []tiledv1alpha1.TiledProfile, _ *expansion.Builtins) {
			p[0].Generation++
		},
		"a profile's labels": func(_ *tiledv1alpha1.TiledCluster, p []tiledv1alpha1.TiledProfile, _ *expansion.Builtins) {
			p[0].Labels = map[string]string{"extra": "x"}
		},
		"the built-ins' version": func(_ *tiledv1alpha1.TiledCluster, _ []tiledv1alpha1.TiledProfile, b *expansion.Builtins) {
			b.Version += "+1"
		},
	} {
		cc, pp, bb := c.DeepCopy(), append([]tiledv1alpha1.TiledProfile(nil), profiles...), builtins
		pp[0] = *profiles[0].DeepCopy()
		change(cc, pp, &bb)
		before := runs
		_, _ = e.Expand(cc, pp, bb, timer)
		g.Expect(runs).To(Equal(before+1), "a change of %s expands again", name)
	}

	g.Expect(e.Len()).To(Equal(1))
	e.Forget(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
	g.Expect(e.Len()).To(BeZero())
	before := runs
	_, err = e.Expand(c, profiles, builtins, timer)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(Equal(before+1), "forgotten: expanded again")
}

// TestExpansionErrorIsRemembered: an expansion that fails is remembered as failed for the same
// inputs (the engine is not run again to fail again).
func TestExpansionErrorIsRemembered(t *testing.T) {
	g := NewWithT(t)
	c := fleet.Cluster("nsls2", "beamlines", []string{"amx"})
	c.UID, c.Generation = "cluster-uid", 1
	runs := 0
	timer := Timer(func() func(error) { runs++; return func(error) {} })
	e := &Expansions{}
	_, err := e.Expand(c, nil, expansion.DefaultBuiltins(), timer) // no profile to select
	g.Expect(err).To(HaveOccurred())
	_, again := e.Expand(c, nil, expansion.DefaultBuiltins(), timer)
	g.Expect(again).To(Equal(err))
	g.Expect(runs).To(Equal(1))
}

func cluster(namespace, name string) *tiledv1alpha1.TiledCluster {
	return &tiledv1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

// TestExpandedInstancesShareTheirParts: the instances an expansion keeps hold one copy of every
// part of their specs they have equal (here each top-level part two beamlines have equal), and
// build the same objects as instances expanded on their own.
func TestExpandedInstancesShareTheirParts(t *testing.T) {
	g := NewWithT(t)
	c := fleet.Cluster("nsls2", "beamlines", []string{"amx", "bmm"})
	c.UID, c.Generation = "cluster-uid", 1
	var profiles []tiledv1alpha1.TiledProfile
	for _, p := range fleet.Profiles("nsls2") {
		p.Generation = 1
		profiles = append(profiles, *p)
	}
	builtins := expansion.DefaultBuiltins()
	own, err := expansion.Expand(c, profiles, builtins)
	g.Expect(err).NotTo(HaveOccurred())

	d, err := (&Expansions{}).Expand(c, profiles, builtins, Timer(func() func(error) { return func(error) {} }))
	g.Expect(err).NotTo(HaveOccurred())
	a, err := d.get(0)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := d.get(1)
	g.Expect(err).NotTo(HaveOccurred())
	ownA, ownB := reflect.ValueOf(own.Instances[0].Object.Spec.InstanceTemplate), reflect.ValueOf(own.Instances[1].Object.Spec.InstanceTemplate)
	va, vb := reflect.ValueOf(a.Spec.InstanceTemplate), reflect.ValueOf(b.Spec.InstanceTemplate)
	shared := 0
	for i := range va.NumField() {
		if va.Field(i).Kind() != reflect.Pointer || ownA.Field(i).IsNil() || !reflect.DeepEqual(ownA.Field(i).Interface(), ownB.Field(i).Interface()) {
			continue
		}
		g.Expect(va.Field(i).Pointer()).To(Equal(vb.Field(i).Pointer()), "spec.%s is equal: one copy", va.Type().Field(i).Name)
		g.Expect(ownA.Field(i).Pointer()).NotTo(Equal(ownB.Field(i).Pointer()), "expanded on their own, two copies")
		shared++
	}
	g.Expect(shared).To(BeNumerically(">", 0))
	for i, in := range own.Instances {
		want, _, err := instanceObject(c, in.Object)
		g.Expect(err).NotTo(HaveOccurred())
		got, err := d.Object(i)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(want))
	}
}
