package stuckpods_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/test/support/fixture"
)

// setPodStatus writes the status of the pod's first container as the kubelet would: running and
// ready, or waiting for the reason waiting (ImagePullBackOff, with the image the pod asks for).
func setPodStatus(t *testing.T, g Gomega, p *corev1.Pod, ready bool, waiting string) {
	g.Eventually(func() error {
		cur := &corev1.Pod{}
		if err := env.Client.Get(ctxT(t), client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		if cur.UID != p.UID {
			return nil // replaced meanwhile
		}
		c := cur.Spec.Containers[0]
		cond := corev1.ConditionFalse
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: ready}
		if ready {
			cond = corev1.ConditionTrue
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
			cs.Started = ptr.To(true)
		} else {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waiting, Message: "Back-off pulling image \"" + c.Image + "\""}
		}
		now := metav1.Now()
		cur.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{cs},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now}}}
		return env.Client.Status().Update(ctxT(t), cur)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// statefulSet reads the StatefulSet name from the API server.
func statefulSet(t *testing.T, g Gomega, ns, name string) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	return s
}

// servingBeamline makes a one-beamline fleet on a managed database, without streaming, and waits
// until it serves: its database and Tiled pods Ready (as the kubelet would say), the instance Ready.
func servingBeamline(t *testing.T, g Gomega) (string, *tiledv1alpha1.TiledInstance, names.Objects) {
	ns := fixture.Namespace(ctxT(t), t, env.Client, "dependencies")
	fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: fixture.InProcess(ns), SyncTimeout: time.Minute})
	ti, n := oneBeamline(t, g, ns, false)
	setPodStatus(t, g, podOn(t, g, ns, n.Postgres+"-0", updateRevision(t, g, ns, n.Postgres)), true, "")
	setPodStatus(t, g, podOn(t, g, ns, n.Tiled+"-0", updateRevision(t, g, ns, n.Tiled)), true, "")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(ti.Status.Conditions, controllers.ConditionReady)).To(BeTrue(), "%v", ti.Status.Conditions)
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	return ns, ti, n
}

// TestTiledWaitsForItsNewStreamingCache is issue 43's "dependencies before dependants" on the real
// StatefulSet controller: a beamline serves without streaming; streaming is turned on (a managed
// cache: a new StatefulSet, and a Tiled configuration that names it), and the cache's pod cannot
// pull its image. The Tiled StatefulSet is left exactly as it is (its generation and intent), and
// the instance says why (RolloutPending, WaitingForDependency, naming the cache's StatefulSet, the
// image and ImagePullBackOff, and an Event). Once the cache's pod is Ready, the Tiled StatefulSet
// gets its new template, and the condition goes.
func TestTiledWaitsForItsNewStreamingCache(t *testing.T) {
	g := NewWithT(t)
	ns, ti, n := servingBeamline(t, g)
	before := statefulSet(t, g, ns, n.Tiled)
	intent := before.Annotations[applier.AnnotationIntent]
	g.Expect(intent).NotTo(BeEmpty())

	// Streaming turned on: the cache's StatefulSet is created, and its pod cannot pull its image.
	setCacheImage(t, g, ns, "")
	cachePod := podOn(t, g, ns, n.Cache+"-0", updateRevision(t, g, ns, n.Cache))
	image := cachePod.Spec.Containers[0].Image
	setPodStatus(t, g, cachePod, false, "ImagePullBackOff")
	// The reconcile that created the cache held the Tiled StatefulSet (without the gate it would
	// have its new template already: it is applied right after the cache).
	g.Expect(statefulSet(t, g, ns, n.Tiled).Annotations[applier.AnnotationIntent]).To(Equal(intent), "the Tiled StatefulSet waits for its cache")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(c).NotTo(BeNil(), "%v", ti.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(controllers.ReasonWaitingForDependency))
		g.Expect(c.Message).To(And(ContainSubstring("StatefulSet "+n.Tiled+":"), ContainSubstring("StatefulSet "+n.Cache+" (the managed streaming cache)"),
			ContainSubstring("ImagePullBackOff"), ContainSubstring(image)))
		g.Expect(ti.Status.PendingRollout).To(BeNil(), "nothing for the cluster to approve")
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	// The Tiled StatefulSet stays exactly as it was: the beamline keeps serving with what it had.
	g.Consistently(func(g Gomega) {
		s := statefulSet(t, g, ns, n.Tiled)
		g.Expect(s.Generation).To(Equal(before.Generation))
		g.Expect(s.Annotations[applier.AnnotationIntent]).To(Equal(intent))
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Reason == controllers.ReasonWaitingForDependency {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ConsistOf(ContainSubstring("StatefulSet " + n.Cache)))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	// The cache's pod Ready (its image pulled at last): Tiled gets its new template, and the
	// condition goes.
	setPodStatus(t, g, cachePod, true, "")
	g.Eventually(func(g Gomega) {
		s := statefulSet(t, g, ns, n.Tiled)
		g.Expect(s.Generation).To(BeNumerically(">", before.Generation))
		g.Expect(s.Annotations[applier.AnnotationIntent]).NotTo(Equal(intent))
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)).To(BeNil())
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
}

// TestTiledWaitsForItsDatabaseRollout: a profile changes the PostgreSQL pod template and the Tiled
// pod template together. The StatefulSet controller rolls the database's pod; until the new one is
// Ready the Tiled StatefulSet keeps its template, and the instance names the database's
// StatefulSet; once it is Ready, Tiled gets its new template.
func TestTiledWaitsForItsDatabaseRollout(t *testing.T) {
	g := NewWithT(t)
	ns, ti, n := servingBeamline(t, g)
	before := statefulSet(t, g, ns, n.Tiled)
	intent := before.Annotations[applier.AnnotationIntent]
	was := updateRevision(t, g, ns, n.Postgres)

	g.Eventually(func() error {
		p := &tiledv1alpha1.TiledProfile{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "defaults"}, p); err != nil {
			return err
		}
		p.Spec.Database.Managed.NodeSelector = map[string]string{"disk": "ssd"}
		p.Spec.Tiled = &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"team": "b"}}
		return env.Client.Update(ctxT(t), p)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Eventually(func() string { return updateRevision(t, g, ns, n.Postgres) }, 2*time.Minute, 100*time.Millisecond).ShouldNot(Equal(was))
	rolled := podOn(t, g, ns, n.Postgres+"-0", updateRevision(t, g, ns, n.Postgres))
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)
		g.Expect(c).NotTo(BeNil(), "%v", ti.Status.Conditions)
		g.Expect(c.Reason).To(Equal(controllers.ReasonWaitingForDependency))
		g.Expect(c.Message).To(And(ContainSubstring("StatefulSet "+n.Postgres+" (the managed PostgreSQL database)"),
			ContainSubstring("spec.template.metadata.annotations[team]")))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	s := statefulSet(t, g, ns, n.Tiled)
	g.Expect(s.Annotations[applier.AnnotationIntent]).To(Equal(intent), "the Tiled StatefulSet waits for its database")
	g.Expect(s.Spec.Template.Annotations).NotTo(HaveKey("team"))

	setPodStatus(t, g, rolled, true, "")
	g.Eventually(func(g Gomega) {
		s := statefulSet(t, g, ns, n.Tiled)
		g.Expect(s.Spec.Template.Annotations).To(HaveKeyWithValue("team", "b"))
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionRolloutPending)).To(BeNil())
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
}

// TestTiledWaitsForItsExternalCacheSecret: a serving beamline is pointed at an external streaming
// cache whose URI Secret does not exist yet. Tiled pods rendered against it would never start
// (CreateContainerConfigError, the Secret missing), and the StatefulSet controller would replace
// the serving pod with one: instead the Tiled StatefulSet stays exactly as it is and the instance
// is Stalled, naming the Secret and the field; then the Secret lacks its key (named too); once the
// key is there, the Tiled StatefulSet gets its new template.
func TestTiledWaitsForItsExternalCacheSecret(t *testing.T) {
	g := NewWithT(t)
	ns, ti, n := servingBeamline(t, g)
	before := statefulSet(t, g, ns, n.Tiled)
	intent := before.Annotations[applier.AnnotationIntent]

	g.Eventually(func() error {
		c := &tiledv1alpha1.TiledCluster{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "fleet"}, c); err != nil {
			return err
		}
		c.Spec.Instances[0].Overrides = &tiledv1alpha1.InstanceTemplate{Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(true),
			External: &tiledv1alpha1.ExternalCache{URISecretRef: &tiledv1alpha1.SecretKeyRef{Name: "site-cache"}}}}
		return env.Client.Update(ctxT(t), c)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	stalled := func(contains string) {
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
			c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)
			g.Expect(c).NotTo(BeNil(), "%v", ti.Status.Conditions)
			g.Expect(c.Reason).To(Equal(controllers.ReasonStreamingCacheSecret))
			g.Expect(c.Message).To(ContainSubstring(contains))
		}, time.Minute, 100*time.Millisecond).Should(Succeed())
		s := statefulSet(t, g, ns, n.Tiled)
		g.Expect(s.Generation).To(Equal(before.Generation), "the serving Tiled StatefulSet is left as it was")
		g.Expect(s.Annotations[applier.AnnotationIntent]).To(Equal(intent))
	}
	stalled("the external streaming cache's Secret " + ns + "/site-cache (spec.streaming.external.uriSecretRef) does not exist")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site-cache"}, Data: map[string][]byte{"other": []byte("x")}}
	fixture.Create(ctxT(t), t, env.Client, secret)
	stalled(`has no key "uri" (spec.streaming.external.uriSecretRef.key)`)

	secret.Data = map[string][]byte{"uri": []byte("redis://:pw@cache.example.org:6379/0")}
	g.Expect(env.Client.Update(ctxT(t), secret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := statefulSet(t, g, ns, n.Tiled)
		g.Expect(s.Annotations[applier.AnnotationIntent]).NotTo(Equal(intent))
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(ti), ti)).To(Succeed())
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
}
