package controllers_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// setRevisions simulates the StatefulSet controller (it does not run in this suite): the
// StatefulSet has seen its current generation, its pods run revision current, its template is
// revision update, and ready of its one replica is ready.
func setRevisions(t *testing.T, g Gomega, ns, name, current, update string, ready int32) {
	g.Eventually(func() error {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		updated := int32(0)
		if current == update {
			updated = 1
		}
		s.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: s.Generation, Replicas: 1, ReadyReplicas: ready, AvailableReplicas: ready,
			CurrentReplicas: 1 - updated, UpdatedReplicas: updated, CurrentRevision: current, UpdateRevision: update,
		}
		return env.Client.Status().Update(ctxT(t), s)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// stuckPod creates the streaming cache's pod name on revision rev (as the StatefulSet controller
// would: the template's labels and the revision label), with status st.
func stuckPod(t *testing.T, g Gomega, ti *tiledv1alpha1.TiledInstance, name, rev string, st corev1.PodStatus) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ti.Namespace, Name: name, Labels: render.Labels(ti, render.ComponentCache)},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "cache", Image: "example.org/cache:1"}}},
	}
	p.Labels[appsv1.ControllerRevisionHashLabelKey] = rev
	g.Expect(env.Client.Create(ctxT(t), p)).To(Succeed())
	setPodStatus(t, g, p, st)
	return p
}

// setPodRevision relabels the pod with revision rev.
func setPodRevision(t *testing.T, g Gomega, p *corev1.Pod, rev string) {
	g.Eventually(func() error {
		cur := &corev1.Pod{}
		if err := env.Client.Get(ctxT(t), client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Labels[appsv1.ControllerRevisionHashLabelKey] = rev
		return env.Client.Update(ctxT(t), cur)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

func readyStatus(container string) corev1.PodStatus {
	st := runningStatus(container, true, time.Now().Add(-time.Minute))
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return st
}

func imagePullStatus(container string) corev1.PodStatus {
	st := waitingStatus(container, "ImagePullBackOff", `Back-off pulling image "example.org/cache:typo"`)
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}}
	return st
}

// podDeletes counts the pod deletions the operator sent.
func podDeletes(op *runningOperator) int64 {
	return op.Traffic.Snapshot().Sum(func(k traffic.Key) bool { return k.Verb == traffic.VerbDelete && k.Resource == "pods" })
}

// stuckEvents are the messages of the StuckPodReplaced Events of the namespace.
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

func podUID(t *testing.T, ns, name string) string {
	p := &corev1.Pod{}
	if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return ""
		}
		t.Fatalf("reading pod %s: %v", name, err)
	}
	return string(p.UID)
}

// TestStuckPodReplaced: the streaming cache's pod fails (an image it cannot pull) on an older
// revision of its StatefulSet after the template changed: the operator deletes it, once, with an
// Event and a record in status.replacedPods. It never deletes a Ready pod on an older revision, nor
// a failing pod on the update revision, nor the same pod again for the same revision (a pod back on
// the old revision, or after a restart of the operator), nor a stuck pod of a held instance (whose
// Stalled condition says so); the record goes once the pod is Ready on its revision. The
// StatefulSet controller does not run here: the test writes the revisions and the pods.
func TestStuckPodReplaced(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "stuck")
	op := startOperator(t, ns)
	on := &tiledv1alpha1.InstanceTemplate{Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(true)}}
	smallFleet(t, g, ns, tiledv1alpha1.ClusterInstance{Name: "a", Overrides: on})
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	markReady(t, g, ns, n.Postgres)
	markReady(t, g, ns, n.Tiled)
	pod := n.Cache + "-0"
	oldRev, newRev, newerRev := n.Cache+"-5d4f8b7c9", n.Cache+"-7c9d6f5b8", n.Cache+"-6b8c7d9f4"
	const quiet = 3 * time.Second
	settle := func() {
		time.Sleep(quiet) // the pod events reach the operator, which reconciles
		waitQuiet(t, op)
	}

	// A Ready pod on the old revision while the template changed: the StatefulSet controller's to
	// roll; the operator deletes nothing, even when one of its containers reports a back-off (the
	// pod's Ready condition is what counts: it serves).
	ready := readyStatus("cache")
	ready.ContainerStatuses = append(ready.ContainerStatuses, crashLoopStatus("exporter", "exit").ContainerStatuses...)
	p := stuckPod(t, g, ti, pod, oldRev, ready)
	uid := p.UID
	setRevisions(t, g, ns, n.Cache, oldRev, newRev, 1)
	settle()
	g.Expect(podUID(t, ns, pod)).To(BeEquivalentTo(uid), "a Ready pod on an older revision is not deleted")
	g.Expect(podDeletes(op)).To(BeZero())

	// Failing on the update revision: a new pod would fail the same; nothing deleted.
	setPodRevision(t, g, p, newRev)
	setPodStatus(t, g, p, imagePullStatus("cache"))
	setRevisions(t, g, ns, n.Cache, oldRev, newRev, 0)
	condition(t, g, ns, ti.Name, controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonImagePull, time.Minute, pod)
	settle()
	g.Expect(podUID(t, ns, pod)).To(BeEquivalentTo(uid), "a failing pod on the update revision is not deleted")
	g.Expect(podDeletes(op)).To(BeZero())

	// Failing and not Ready on the old revision (the template was fixed since): deleted once, with
	// an Event naming the pod, both revisions and the reason, and recorded.
	// (A pod's labels do not change once the StatefulSet controller created it: the operator hears of
	// its status, as here, or of its StatefulSet.)
	setPodRevision(t, g, p, oldRev)
	setPodStatus(t, g, p, waitingStatus("cache", "ErrImagePull", "not found"))
	g.Eventually(func() string { return podUID(t, ns, pod) }, time.Minute, 100*time.Millisecond).Should(BeEmpty(), "the stuck pod deleted")
	g.Eventually(func() []string { return stuckEvents(t, g, ns) }, 10*time.Second).Should(ConsistOf(
		And(ContainSubstring("deleted pod "+pod), ContainSubstring("revision "+oldRev), ContainSubstring("revision "+newRev), ContainSubstring("ErrImagePull"))))
	g.Eventually(func(g Gomega) {
		rp := getInstance(t, g, ns, ti.Name).Status.ReplacedPods
		g.Expect(rp).To(HaveLen(1))
		g.Expect(rp[0].Pod).To(Equal(pod))
		g.Expect(rp[0].Revision).To(Equal(newRev))
		g.Expect(rp[0].Reason).To(Equal("ErrImagePull"))
		g.Expect(rp[0].Time).NotTo(BeNil())
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	g.Expect(podDeletes(op)).To(BeEquivalentTo(1))

	// The pod comes back on the old revision and fails again: not deleted a second time for the
	// same revision.
	p = stuckPod(t, g, ti, pod, oldRev, imagePullStatus("cache"))
	uid = p.UID
	settle()
	g.Expect(podUID(t, ns, pod)).To(BeEquivalentTo(uid), "not deleted twice for one revision")
	g.Expect(podDeletes(op)).To(BeEquivalentTo(1))

	// A restart of the operator does not delete it again, and writes nothing.
	before := getInstance(t, g, ns, ti.Name)
	rv := before.ResourceVersion
	op.stop()
	op = startOperator(t, ns)
	time.Sleep(quiet)
	waitQuiet(t, op)
	g.Expect(podUID(t, ns, pod)).To(BeEquivalentTo(uid), "not deleted again after a restart")
	g.Expect(podDeletes(op)).To(BeZero())
	after := getInstance(t, g, ns, ti.Name)
	g.Expect(after.Status).To(Equal(before.Status), "the restarted operator changed the instance's status")
	g.Expect(after.ResourceVersion).To(Equal(rv), "the restarted operator wrote the instance")
	g.Expect(op.Traffic.Snapshot().Writes()).To(BeZero(), "the restarted operator's writes: %s", op.Traffic.Snapshot())

	// Ready on the revision it was replaced for: the record goes.
	setPodRevision(t, g, p, newRev)
	setPodStatus(t, g, p, readyStatus("cache"))
	setRevisions(t, g, ns, n.Cache, newRev, newRev, 1)
	g.Eventually(func() []tiledv1alpha1.ReplacedPod { return getInstance(t, g, ns, ti.Name).Status.ReplacedPods },
		time.Minute, 100*time.Millisecond).Should(BeEmpty())
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)

	// Held (beamtime): a pod stuck on an older revision stays, and the Stalled condition names the
	// hold; released, the pod is replaced.
	g.Eventually(func() error {
		c := getCluster(t, g, ns)
		c.Spec.Instances[0].Hold = true
		return env.Client.Update(ctxT(t), c)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	setPodStatus(t, g, p, imagePullStatus("cache"))
	setRevisions(t, g, ns, n.Cache, newRev, newerRev, 0)
	ti = condition(t, g, ns, ti.Name, controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonImagePull, time.Minute,
		"pod "+pod+" is stuck on revision "+newRev, "is not replaced while TiledCluster fleet spec.instances[a].hold is set")
	settle()
	g.Expect(podUID(t, ns, pod)).To(BeEquivalentTo(uid), "a held instance's stuck pod is not deleted")
	g.Expect(podDeletes(op)).To(BeZero())
	g.Eventually(func() error {
		c := getCluster(t, g, ns)
		c.Spec.Instances[0].Hold = false
		return env.Client.Update(ctxT(t), c)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// The instance is reconciled again when a pod changes (the hold itself changes nothing of it).
	setPodStatus(t, g, p, waitingStatus("cache", "ErrImagePull", "not found"))
	g.Eventually(func() string { return podUID(t, ns, pod) }, time.Minute, 100*time.Millisecond).Should(BeEmpty(), "the stuck pod deleted once released")
	g.Eventually(func() []string { return stuckEvents(t, g, ns) }, 10*time.Second).Should(ContainElement(
		And(ContainSubstring("revision "+newRev), ContainSubstring("revision "+newerRev))))
	g.Eventually(func(g Gomega) {
		rp := getInstance(t, g, ns, ti.Name).Status.ReplacedPods
		g.Expect(rp).To(HaveLen(1))
		g.Expect(rp[0].Revision).To(Equal(newerRev))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	st := meta.FindStatusCondition(getInstance(t, g, ns, ti.Name).Status.Conditions, controllers.ConditionStalled)
	if st != nil {
		g.Expect(strings.Contains(st.Message, "hold")).To(BeFalse(), st.Message)
	}
}
