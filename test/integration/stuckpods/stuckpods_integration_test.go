package stuckpods_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{ControllerManager: true, Controllers: append([]string{"statefulset", "job"}, testenv.DefaultControllers...)}, &env))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// cachePod is the streaming cache's pod as the API server holds it, nil when there is none (or it
// is being deleted).
func cachePod(t *testing.T, g Gomega, ns, name string) *corev1.Pod {
	p := &corev1.Pod{}
	err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	g.Expect(err).NotTo(HaveOccurred())
	if p.DeletionTimestamp != nil {
		return nil
	}
	return p
}

// podOn waits for the pod name on revision rev (the StatefulSet controller creates it) and returns it.
func podOn(t *testing.T, g Gomega, ns, name, rev string) *corev1.Pod {
	var p *corev1.Pod
	g.Eventually(func(g Gomega) {
		p = cachePod(t, g, ns, name)
		g.Expect(p).NotTo(BeNil(), "pod %s", name)
		g.Expect(p.Labels).To(HaveKeyWithValue(appsv1.ControllerRevisionHashLabelKey, rev))
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	return p
}

// updateRevision waits until the StatefulSet's controller has seen its current generation, and
// returns its update revision.
func updateRevision(t *testing.T, g Gomega, ns, name string) string {
	var rev string
	g.Eventually(func(g Gomega) {
		s := &appsv1.StatefulSet{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		rev = s.Status.UpdateRevision
		g.Expect(rev).NotTo(BeEmpty())
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	return rev
}

// oneBeamline makes, in ns, a fleet (makeFleet) of one beamline "a" (its streaming cache on or
// off), and returns the instance and the names of its objects.
func oneBeamline(t *testing.T, g Gomega, ns string, streaming bool) (*tiledv1alpha1.TiledInstance, names.Objects) {
	makeFleet(t, ns, tiledv1alpha1.InstanceTemplate{}, tiledv1alpha1.ClusterInstance{Name: "a", Overrides: &tiledv1alpha1.InstanceTemplate{
		Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(streaming)}}})
	ti := &tiledv1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "fleet-a"}, ti)).To(Succeed())
	return ti, fleet.NamesOf(ti)
}

// makeFleet makes, in ns, a profile "defaults" (defaults, with a managed database) and a
// TiledCluster "fleet" of the instances, and waits until they are stamped out.
func makeFleet(t *testing.T, ns string, defaults tiledv1alpha1.InstanceTemplate, instances ...tiledv1alpha1.ClusterInstance) {
	defaults.Database = &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Size: "1Gi"}}
	p := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults", Labels: map[string]string{"facility": "test"}},
		Spec:       tiledv1alpha1.TiledProfileSpec{InstanceTemplate: defaults},
	}
	c := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"},
		Spec: tiledv1alpha1.TiledClusterSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
			Instances:       instances,
		},
	}
	fixture.Create(ctxT(t), t, env.Client, p, c)
	fixture.WaitStampedOut(ctxT(t), t, env.Client, ns, "fleet", len(instances), 250*time.Millisecond, 3*time.Minute)
}

// setCacheImage sets the beamline's managed streaming cache image ("" for the default).
func setCacheImage(t *testing.T, g Gomega, ns, image string) {
	g.Eventually(func() error {
		c := &tiledv1alpha1.TiledCluster{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "fleet"}, c); err != nil {
			return err
		}
		s := &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(true)}
		if image != "" {
			s.Managed = &tiledv1alpha1.ManagedCache{Image: image}
		}
		o := c.Spec.Instances[0].Overrides
		if o == nil {
			o = &tiledv1alpha1.InstanceTemplate{}
		}
		o.Streaming = s // the other overrides (the database's image) stay
		c.Spec.Instances[0].Overrides = o
		return env.Client.Update(ctxT(t), c)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

func stuckEvents(t *testing.T, g Gomega, ns string) []string {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Reason == controllers.ReasonStuckPodReplaced {
			out = append(out, e.Note)
		}
	}
	return out
}

// TestStuckCachePodReplacedAfterTheFix is issue 43's case with the real StatefulSet controller: the
// streaming cache's image is set to a new one, which passes its image check (the test completes the
// check Job, as the kubelet and the Job controller would: tiledinstance_imagecheck.go) but whose
// pod then cannot start (CreateContainerConfigError); the StatefulSet controller rolls the Ready
// pod onto it, and the new pod stays failing. (An image that cannot be pulled at all fails its
// check and never reaches the StatefulSet: TestImageCheckHoldsTheDatabase.) The image is set back: the
// StatefulSet's template and update revision go back, but the StatefulSet controller never replaces
// a pod that is not Ready — the operator deletes it, once, with an Event, and the StatefulSet
// controller creates it again from the fixed template. The test deletes no pod; a pod that fails
// again on the fixed revision is not deleted again.
func TestStuckCachePodReplacedAfterTheFix(t *testing.T) {
	g := NewWithT(t)
	ns := fixture.Namespace(ctxT(t), t, env.Client, "stuckcache")
	op := fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: fixture.InProcess(ns), SyncTimeout: time.Minute})
	podDeletes := func() int64 {
		return op.Traffic.Snapshot().Sum(func(k traffic.Key) bool { return k.Verb == traffic.VerbDelete && k.Resource == "pods" })
	}
	ti, n := oneBeamline(t, g, ns, true)
	pod := n.Cache + "-0"

	// The cache runs, Ready, on the first revision.
	good := updateRevision(t, g, ns, n.Cache)
	first := podOn(t, g, ns, pod, good)
	setPodStatus(t, g, first, true, "")

	// A new image that passes its check: the StatefulSet controller replaces the Ready pod (the
	// operator does not), and the new one cannot start.
	const next = "example.org/valkey:8.1-broken"
	orig := imageOf(statefulSet(t, g, ns, n.Cache), "cache")
	setCacheImage(t, g, ns, next)
	passCheck(t, g, ns, checkJobName(n, render.ComponentCache, next))
	g.Eventually(func() string { return updateRevision(t, g, ns, n.Cache) }, 2*time.Minute, 100*time.Millisecond).ShouldNot(Equal(good))
	bad := updateRevision(t, g, ns, n.Cache)
	broken := podOn(t, g, ns, pod, bad)
	g.Expect(broken.UID).NotTo(Equal(first.UID))
	setPodStatus(t, g, broken, false, "CreateContainerConfigError")
	time.Sleep(2 * time.Second)
	g.Expect(cachePod(t, g, ns, pod).UID).To(Equal(broken.UID), "a pod failing on the update revision stays")
	g.Expect(podDeletes()).To(BeZero(), "the StatefulSet controller rolled the Ready pod, not the operator")

	// The image set back (its check passes again: only the last image checked is remembered): the
	// template and the update revision are back, and the stuck pod is replaced from them by the
	// operator.
	setCacheImage(t, g, ns, "")
	passCheck(t, g, ns, checkJobName(n, render.ComponentCache, orig))
	g.Eventually(func() string { return updateRevision(t, g, ns, n.Cache) }, 2*time.Minute, 100*time.Millisecond).Should(Equal(good))
	fixed := podOn(t, g, ns, pod, good)
	g.Expect(fixed.UID).NotTo(Equal(broken.UID))
	g.Expect(podDeletes()).To(BeEquivalentTo(1))
	g.Eventually(func() []string { return stuckEvents(t, g, ns) }, 10*time.Second, 100*time.Millisecond).Should(ConsistOf(
		And(ContainSubstring("deleted pod "+pod), ContainSubstring("revision "+bad), ContainSubstring("revision "+good), ContainSubstring("CreateContainerConfigError"))))
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(ti.Status.ReplacedPods).To(ConsistOf(HaveField("Pod", pod)))
		g.Expect(ti.Status.ReplacedPods[0].Revision).To(Equal(good))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())

	// It fails again, on the fixed revision (a crash loop): not deleted again.
	setPodStatus(t, g, fixed, false, "CrashLoopBackOff")
	time.Sleep(3 * time.Second)
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	g.Expect(cachePod(t, g, ns, pod).UID).To(Equal(fixed.UID), "a pod failing on the update revision is not deleted")
	g.Expect(podDeletes()).To(BeEquivalentTo(1))
	g.Expect(stuckEvents(t, g, ns)).To(HaveLen(1))

	// Ready at last: the record goes.
	setPodStatus(t, g, fixed, true, "")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(ti.Status.ReplacedPods).To(BeEmpty())
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
}
