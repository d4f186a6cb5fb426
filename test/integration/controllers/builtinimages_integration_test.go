package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestReplacedBuiltinImageRolls: the manager restarted with RELATED_IMAGE_POSTGRESQL (here its
// result, Builtins.WithImages, as cmd/manager passes it) changes the database image of every
// instance that takes the built-in one, as a changed default: the stored TiledInstances say where
// it came from (provenance "default (RELATED_IMAGE_POSTGRESQL)"), a standalone instance changes at
// once, a cluster's instances one at a time within maxUnavailable 1, and the held beamline not at
// all.
func TestReplacedBuiltinImageRolls(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "builtinimages")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a", "b", "c")...)
	solo := &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "solo"},
		Spec: tiledv1alpha1.TiledInstanceSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
		},
	}
	createAll(t, g, solo)
	waitForStampOut(t, g, op, ns, "fleet", 3)
	instances := []string{"fleet-a", "fleet-b", "fleet-c", "solo"}
	postgres := func(i string) string { return fleet.NamesOf(getInstance(t, g, ns, i)).Postgres }
	g.Eventually(func() bool { return exists(t, &appsv1.StatefulSet{}, ns, postgres("solo")) }, time.Minute, 250*time.Millisecond).Should(BeTrue())
	for _, i := range instances {
		markReady(t, g, ns, postgres(i))
		markReady(t, g, ns, fleet.NamesOf(getInstance(t, g, ns, i)).Tiled)
	}
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(3)))
	g.Eventually(func() bool {
		return meta.IsStatusConditionTrue(getInstance(t, g, ns, "solo").Status.Conditions, controllers.ConditionReady)
	}, time.Minute, 250*time.Millisecond).Should(BeTrue())
	image := func(i string) string {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, postgres(i))).To(BeTrue())
		return s.Spec.Template.Spec.Containers[0].Image
	}
	for _, i := range instances {
		g.Expect(image(i)).To(Equal(expansion.PostgresImage))
	}
	g.Expect(getInstance(t, g, ns, "fleet-a").Provenance).To(HaveKeyWithValue("spec.database.managed.image", expansion.SourceDefault))
	waitQuiet(t, op)
	op.stop()

	// Beamtime on b, budget 1; then the manager starts with the facility's mirror.
	c := getCluster(t, g, ns)
	c.Spec.Instances[1].Hold = true
	c.Spec.Rollout = &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	const mirrored = "registry.example.org/library/postgres:16"
	b, err := expansion.DefaultBuiltins().WithImages(map[string]string{expansion.ImagePostgreSQL: mirrored})
	g.Expect(err).NotTo(HaveOccurred())
	o := fixture.InProcess(ns)
	o.Builtins = b
	op = &runningOperator{fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: o, SyncTimeout: time.Minute})}

	// A new database image is run once by its image check before the StatefulSet changes: the
	// kubelet (played here) runs it.
	g.Eventually(func() string { passImageChecks(t, g, ns); return image("solo") }, time.Minute, 250*time.Millisecond).Should(Equal(mirrored), "a standalone instance takes a changed default at once, once its image check passes")
	updated := func() (n int) {
		for _, i := range []string{"fleet-a", "fleet-c"} {
			if image(i) == mirrored {
				n++
			}
		}
		return n
	}
	for want := 1; want <= 2; want++ {
		g.Eventually(func() int { passImageChecks(t, g, ns); return updated() }, time.Minute, 250*time.Millisecond).Should(Equal(want))
		waitQuiet(t, op)
		g.Expect(updated()).To(Equal(want), "more than maxUnavailable instances changed at once")
		g.Expect(image("fleet-b")).To(Equal(expansion.PostgresImage), "the held beamline's database changed")
		for _, i := range []string{"fleet-a", "fleet-c"} {
			if image(i) == mirrored {
				ti := getInstance(t, g, ns, i)
				g.Expect(ti.Spec.Database.Managed.Image).To(Equal(mirrored))
				g.Expect(ti.Provenance).To(HaveKeyWithValue("spec.database.managed.image", "default (RELATED_IMAGE_POSTGRESQL)"))
				g.Expect(ti.Provenance).To(HaveKeyWithValue("spec.tiled.image", expansion.SourceDefault))
				markReady(t, g, ns, postgres(i)) // the kubelet brings the new pod up
			}
		}
	}
	markReady(t, g, ns, postgres("solo"))
	waitQuiet(t, op)
	held := getInstance(t, g, ns, "fleet-b")
	g.Expect(held.Spec.Database.Managed.Image).To(Equal(expansion.PostgresImage))
	g.Expect(held.Provenance).To(HaveKeyWithValue("spec.database.managed.image", expansion.SourceDefault))
}
