package stuckpods_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fixture"
)

// checkJobName is the name of the image check Job of image for component (render).
func checkJobName(n names.Objects, component, image string) string {
	return render.ImageCheckJobName(n, render.ImageCheck{Component: component, Image: image})
}

// checkPod waits for the pod the Job controller creates for the Job name, and returns it.
func checkPod(t *testing.T, g Gomega, ns, name string) *corev1.Pod {
	var p *corev1.Pod
	g.Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: name})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1), "the pod of Job %s", name)
		p = &list.Items[0]
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	return p
}

// setCheckPod writes the check pod's status as the kubelet would: waiting for reason (ErrImagePull,
// ImagePullBackOff), or, with reason "", run to completion (exit 0), which the Job controller
// turns into the Job's completion.
func setCheckPod(t *testing.T, g Gomega, p *corev1.Pod, reason string) {
	g.Eventually(func() error {
		cur := &corev1.Pod{}
		if err := env.Client.Get(ctxT(t), client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		c := cur.Spec.Containers[0]
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		st := corev1.PodStatus{Phase: corev1.PodPending}
		if reason != "" {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: "simulated: pull access denied for " + c.Image}
		} else {
			now := metav1.Now()
			st.Phase = corev1.PodSucceeded
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
		}
		st.ContainerStatuses = []corev1.ContainerStatus{cs}
		cur.Status = st
		return env.Client.Status().Update(ctxT(t), cur)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// passCheck lets the image check Job name pass: its pod runs to completion, and the Job controller
// completes the Job.
func passCheck(t *testing.T, g Gomega, ns, name string) {
	setCheckPod(t, g, checkPod(t, g, ns, name), "")
}

// jobExists says the Job name exists and is not being deleted.
func jobExists(t *testing.T, g Gomega, ns, name string) bool {
	j := &batchv1.Job{}
	err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, j)
	if apierrors.IsNotFound(err) {
		return false
	}
	g.Expect(err).NotTo(HaveOccurred())
	return j.DeletionTimestamp == nil
}

// imageOf is the image of the container name of the StatefulSet's pod template.
func imageOf(s *appsv1.StatefulSet, container string) string {
	for _, c := range s.Spec.Template.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	return ""
}

// setDatabaseImage sets the beamline's managed PostgreSQL image ("" for the profile's default).
func setDatabaseImage(t *testing.T, g Gomega, ns, image string) {
	g.Eventually(func() error {
		c := &tiledv1alpha1.TiledCluster{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "fleet"}, c); err != nil {
			return err
		}
		o := c.Spec.Instances[0].Overrides
		if o == nil {
			o = &tiledv1alpha1.InstanceTemplate{}
		}
		o.Database = nil
		if image != "" {
			o.Database = &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Size: "1Gi", Image: image}}
		}
		c.Spec.Instances[0].Overrides = o
		return env.Client.Update(ctxT(t), c)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// readyPods writes every pod of the instance's StatefulSets as Ready, as the kubelet would.
func readyPods(t *testing.T, g Gomega, ns, instance string) {
	g.Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelAppInstance: instance})).To(Succeed())
		n := 0
		for i := range list.Items {
			p := &list.Items[i]
			switch p.Labels[tiledv1alpha1.LabelAppComponent] {
			case render.ComponentServer, render.ComponentDatabase, render.ComponentCache:
			default:
				continue
			}
			n++
			ready := p.Status.Phase == corev1.PodRunning
			for _, c := range p.Status.Conditions {
				ready = ready && (c.Type != corev1.PodReady || c.Status == corev1.ConditionTrue)
			}
			if ready && len(p.Status.Conditions) > 0 {
				continue
			}
			now := metav1.Now()
			var css []corev1.ContainerStatus
			for _, c := range p.Spec.Containers {
				css = append(css, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
			}
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: css, Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
			g.Expect(env.Client.Status().Update(ctxT(t), p)).To(Succeed())
		}
		g.Expect(n).To(Equal(3), "the Tiled, PostgreSQL and cache pods")
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
}

// instanceCondition reads the instance and its condition typ (nil: absent).
func instanceCondition(t *testing.T, g Gomega, ti *tiledv1alpha1.TiledInstance, typ string) *metav1.Condition {
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
	return meta.FindStatusCondition(ti.Status.Conditions, typ)
}

// TestImageCheckHoldsTheDatabase is issue 43's image check with the real StatefulSet and Job
// controllers: a typo in the managed PostgreSQL's image leaves its StatefulSet as it is (its Ready
// pod keeps serving) while a check Job runs the image; the check's pod cannot pull it, and the
// instance says so, naming the StatefulSet, the image and the reason. The typo removed, the check
// goes and the StatefulSet never changed. A good new image is checked the same way; once its check
// passes, the StatefulSet runs it. The streaming cache's image is held the same way.
func TestImageCheckHoldsTheDatabase(t *testing.T) {
	g := NewWithT(t)
	ns := fixture.Namespace(ctxT(t), t, env.Client, "imagecheck")
	op := fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: fixture.InProcess(ns), SyncTimeout: time.Minute})
	podDeletes := func() int64 {
		return op.Traffic.Snapshot().Sum(func(k traffic.Key) bool { return k.Verb == traffic.VerbDelete && k.Resource == "pods" })
	}
	ti, n := oneBeamline(t, g, ns, true)

	// The beamline serves: every pod Ready.
	updateRevision(t, g, ns, n.Postgres)
	updateRevision(t, g, ns, n.Cache)
	updateRevision(t, g, ns, n.Tiled)
	readyPods(t, g, ns, ti.Name)
	g.Eventually(func(g Gomega) {
		c := instanceCondition(t, g, ti, controllers.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	before := statefulSet(t, g, ns, n.Postgres)
	live := imageOf(before, "postgres")
	g.Expect(live).NotTo(BeEmpty())
	dbPod := cachePod(t, g, ns, n.Postgres+"-0")
	g.Expect(dbPod).NotTo(BeNil())

	// A typo: a check Job runs it; the StatefulSet stays as it is.
	const typo = "docker.io/library/postgress:17"
	setDatabaseImage(t, g, ns, typo)
	typoJob := checkJobName(n, render.ComponentDatabase, typo)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(ti.Spec.Database).NotTo(BeNil())
		g.Expect(ti.Spec.Database.Managed.Image).To(Equal(typo))
		g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	g.Expect(statefulSet(t, g, ns, n.Postgres).Generation).To(Equal(before.Generation), "the StatefulSet is not changed")
	g.Expect(jobExists(t, g, ns, typoJob)).To(BeTrue())
	g.Eventually(func(g Gomega) {
		c := instanceCondition(t, g, ti, controllers.ConditionImageCheckPending)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controllers.ReasonImageCheckRunning))
		g.Expect(c.Message).To(And(ContainSubstring(n.Postgres), ContainSubstring(typo), ContainSubstring(typoJob)))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())

	// Its pod cannot pull the image: the instance says so, and stays Ready (the old pod serves).
	setCheckPod(t, g, checkPod(t, g, ns, typoJob), "ErrImagePull")
	g.Eventually(func(g Gomega) {
		c := instanceCondition(t, g, ti, controllers.ConditionImageCheckPending)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controllers.ReasonImagePull), c.Message)
		g.Expect(c.Message).To(And(ContainSubstring("StatefulSet "+n.Postgres), ContainSubstring(typo), ContainSubstring("ErrImagePull"), ContainSubstring("keeps image "+live)))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue())
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	held := statefulSet(t, g, ns, n.Postgres)
	g.Expect(held.Generation).To(Equal(before.Generation), "the StatefulSet is not changed")
	g.Expect(imageOf(held, "postgres")).To(Equal(live))
	g.Expect(cachePod(t, g, ns, n.Postgres+"-0").UID).To(Equal(dbPod.UID), "the database pod keeps serving")
	g.Expect(jobExists(t, g, ns, typoJob)).To(BeTrue(), "a failing check is not retried nor deleted")
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Reason == controllers.ReasonImageCheckFailed {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ConsistOf(And(ContainSubstring(typo), ContainSubstring(n.Postgres))), "one Warning Event")
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	// The typo removed: the check goes, the condition too; the StatefulSet never changed.
	setDatabaseImage(t, g, ns, "")
	g.Eventually(func(g Gomega) bool { return jobExists(t, g, ns, typoJob) }, time.Minute, 100*time.Millisecond).Should(BeFalse())
	g.Eventually(func(g Gomega) *metav1.Condition {
		return instanceCondition(t, g, ti, controllers.ConditionImageCheckPending)
	}, time.Minute, 100*time.Millisecond).Should(BeNil())
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	g.Expect(statefulSet(t, g, ns, n.Postgres).Generation).To(Equal(before.Generation))
	g.Expect(cachePod(t, g, ns, n.Postgres+"-0").UID).To(Equal(dbPod.UID))

	// A good new image: held while its check runs; the check passes, and the StatefulSet runs it.
	const good = "docker.io/library/postgres:17"
	setDatabaseImage(t, g, ns, good)
	goodJob := checkJobName(n, render.ComponentDatabase, good)
	g.Eventually(func(g Gomega) bool { return jobExists(t, g, ns, goodJob) }, time.Minute, 100*time.Millisecond).Should(BeTrue())
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	g.Expect(statefulSet(t, g, ns, n.Postgres).Generation).To(Equal(before.Generation), "held while its check runs")
	passCheck(t, g, ns, goodJob)
	g.Eventually(func(g Gomega) {
		s := statefulSet(t, g, ns, n.Postgres)
		g.Expect(imageOf(s, "postgres")).To(Equal(good))
		g.Expect(s.Generation).To(BeNumerically(">", before.Generation))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(instanceCondition(t, g, ti, controllers.ConditionImageCheckPending)).To(BeNil())
		g.Expect(ti.Status.CheckedImages).To(ConsistOf(And(HaveField("StatefulSet", n.Postgres), HaveField("Image", good))))
		g.Expect(jobExists(t, g, ns, goodJob)).To(BeFalse(), "the passed check goes once recorded")
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	g.Expect(jobExists(t, g, ns, goodJob)).To(BeFalse(), "not checked again")
	g.Expect(podDeletes()).To(BeZero(), "the operator deleted no pod")

	// The streaming cache: a typo held the same way.
	cacheBefore := statefulSet(t, g, ns, n.Cache)
	const cacheTypo = "docker.io/valkey/valkey:8.1-typo"
	setCacheImage(t, g, ns, cacheTypo)
	cacheJob := checkJobName(n, render.ComponentCache, cacheTypo)
	setCheckPod(t, g, checkPod(t, g, ns, cacheJob), "ImagePullBackOff")
	g.Eventually(func(g Gomega) {
		c := instanceCondition(t, g, ti, controllers.ConditionImageCheckPending)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(controllers.ReasonImagePull), c.Message)
		g.Expect(c.Message).To(And(ContainSubstring("StatefulSet "+n.Cache), ContainSubstring(cacheTypo), ContainSubstring("ImagePullBackOff")))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	op.WaitQuiet(ctxT(t), t, time.Second, time.Minute)
	g.Expect(statefulSet(t, g, ns, n.Cache).Generation).To(Equal(cacheBefore.Generation))
	setCacheImage(t, g, ns, "")
	g.Eventually(func(g Gomega) bool { return jobExists(t, g, ns, cacheJob) }, time.Minute, 100*time.Millisecond).Should(BeFalse())
	g.Eventually(func(g Gomega) *metav1.Condition {
		return instanceCondition(t, g, ti, controllers.ConditionImageCheckPending)
	}, time.Minute, 100*time.Millisecond).Should(BeNil())
	g.Expect(statefulSet(t, g, ns, n.Cache).Generation).To(Equal(cacheBefore.Generation))
	g.Expect(podDeletes()).To(BeZero())
}
