package controllers_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// No kubelet or StatefulSet controller runs here: the tests create the pods a StatefulSet would,
// with the pod template's labels, and write their status as the kubelet would.

// createPod creates the pod a StatefulSet of component would run for ti, named name.
func createPod(t *testing.T, g Gomega, ti *tiledv1alpha1.TiledInstance, component, name string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ti.Namespace, Name: name, Labels: render.Labels(ti, component)},
		Spec:       corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false)},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "example.org/" + c + ":1"})
	}
	g.Expect(env.Client.Create(ctxT(t), p)).To(Succeed())
	return p
}

// setPodStatus writes a pod's status through the status subresource, as the kubelet does.
func setPodStatus(t *testing.T, g Gomega, p *corev1.Pod, st corev1.PodStatus) {
	g.Eventually(func() error {
		cur := &corev1.Pod{}
		if err := env.Client.Get(ctxT(t), client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Status = st
		return env.Client.Status().Update(ctxT(t), cur)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

func waitingStatus(container, reason, message string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: container, Image: "example.org/" + container + ":1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
	}}}
}

func crashLoopStatus(container, log string) corev1.PodStatus {
	st := waitingStatus(container, "CrashLoopBackOff", "back-off 20s restarting failed container")
	st.Phase = corev1.PodRunning
	st.ContainerStatuses[0].RestartCount = 3
	st.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: log}
	return st
}

func runningStatus(container string, ready bool, started time.Time) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: container, Image: "example.org/" + container + ":1", Ready: ready, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
	}}}
}

// condition waits until the instance's condition typ has status and reason (and messages containing
// each of contains), and returns the instance.
func condition(t *testing.T, g Gomega, ns, name, typ string, st metav1.ConditionStatus, reason string, within time.Duration, contains ...string) *tiledv1alpha1.TiledInstance {
	var ti *tiledv1alpha1.TiledInstance
	g.Eventually(func(g Gomega) {
		ti = getInstance(t, g, ns, name)
		c := meta.FindStatusCondition(ti.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "no %s condition", typ)
		g.Expect(c.Status).To(Equal(st), "%s: %s", c.Reason, c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		for _, s := range contains {
			g.Expect(c.Message).To(ContainSubstring(s))
		}
	}, within, 200*time.Millisecond).Should(Succeed())
	return ti
}

// allReplicas, as setStatefulSetReady's ready, means every replica of the StatefulSet.
const allReplicas = -1

// setStatefulSetReady simulates the kubelet and the StatefulSet controller (neither runs here): the
// StatefulSet reports its current generation rolled out with ready replicas ready.
func setStatefulSetReady(t *testing.T, g Gomega, ns, name string, ready int32) {
	g.Eventually(func() error {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		n := ptr.Deref(s.Spec.Replicas, 1)
		if ready == allReplicas {
			ready = n
		}
		s.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: ready, CurrentReplicas: n,
			UpdatedReplicas: n, AvailableReplicas: ready,
		}
		return env.Client.Status().Update(ctxT(t), s)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestDatabaseOutage: the managed PostgreSQL's StatefulSet goes unready after being ready; the
// instance says its database is down, naming the pod, and is not Ready; it recovers by itself.
func TestDatabaseOutage(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "outage")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	condition(t, g, ns, ti.Name, controllers.ConditionDatabaseReady, metav1.ConditionFalse, controllers.ReasonWaitingForDatabase, time.Minute, n.Postgres+"-0")

	setStatefulSetReady(t, g, ns, n.Postgres, 1)
	setStatefulSetReady(t, g, ns, n.Tiled, 1)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)
	condition(t, g, ns, ti.Name, controllers.ConditionDatabaseReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute, n.Postgres+"-0")

	// The database goes down: the instance names it (DatabaseUnavailable) before anything its Tiled
	// pods' readiness says (their probe, ready.py, fails too on a real node: here no kubelet runs it).
	setStatefulSetReady(t, g, ns, n.Postgres, 0)
	ti = condition(t, g, ns, ti.Name, controllers.ConditionDatabaseReady, metav1.ConditionFalse, controllers.ReasonDatabaseUnavailable, time.Minute,
		"PostgreSQL pod "+n.Postgres+"-0 is not ready")
	ready := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(controllers.ReasonDatabaseUnavailable))
	g.Expect(ti.Status.Database).To(Equal(&tiledv1alpha1.DatabaseStatus{Mode: "Managed", Ready: false}))
	g.Expect(kstatusOf(t, g, ti)).To(Equal(status.InProgressStatus))
	g.Eventually(func() []string { return eventReasons(t, g, ns) }, 10*time.Second).Should(ContainElement(controllers.ReasonDatabaseUnavailable))

	// It comes back.
	setStatefulSetReady(t, g, ns, n.Postgres, 1)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)
	condition(t, g, ns, ti.Name, controllers.ConditionDatabaseReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)
}

// TestStreamingCacheOutage: an instance with a managed streaming cache is Ready only once the cache
// is; the cache going unready after being ready (an outage) shows as StreamingCacheReady=False
// naming the pod, and Ready=False with the same reason; it recovers by itself. Switched off, the
// cache's StatefulSet and Service are pruned and the condition is gone, and the Secret keeps the
// password.
func TestStreamingCacheOutage(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "cacheoutage")
	op := startOperator(t, ns)
	on := &tiledv1alpha1.InstanceTemplate{Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(true)}}
	smallFleet(t, g, ns, tiledv1alpha1.ClusterInstance{Name: "a", Overrides: on})
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	g.Expect(ti.Spec.Streaming.Managed).NotTo(BeNil(), "the built-in managed cache")
	setStatefulSetReady(t, g, ns, n.Postgres, 1)
	setStatefulSetReady(t, g, ns, n.Tiled, 1)
	ti = condition(t, g, ns, ti.Name, controllers.ConditionStreamingCacheReady, metav1.ConditionFalse, controllers.ReasonWaitingForStreamingCache, time.Minute, n.Cache+"-0")
	// Ready names the cache once the status has caught up with the database's and Tiled's readiness
	// too (the status that first says the cache is not ready may still wait for the database).
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionFalse, controllers.ReasonWaitingForStreamingCache, time.Minute)
	g.Expect(exists(t, &corev1.Service{}, ns, n.Cache)).To(BeTrue())
	secret := &corev1.Secret{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: n.Secret}, secret)).To(Succeed())
	password := secret.Data[render.SecretKeyStreamingCachePassword]
	g.Expect(password).To(HaveLen(32))

	setStatefulSetReady(t, g, ns, n.Cache, 1)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)
	condition(t, g, ns, ti.Name, controllers.ConditionStreamingCacheReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute, n.Cache+"-0")

	// The outage.
	setStatefulSetReady(t, g, ns, n.Cache, 0)
	ti = condition(t, g, ns, ti.Name, controllers.ConditionStreamingCacheReady, metav1.ConditionFalse, controllers.ReasonStreamingCacheUnavailable, time.Minute,
		"streaming cache pod "+n.Cache+"-0 is not ready")
	ready := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(controllers.ReasonStreamingCacheUnavailable))
	g.Expect(kstatusOf(t, g, ti)).To(Equal(status.InProgressStatus))

	// It comes back.
	setStatefulSetReady(t, g, ns, n.Cache, 1)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, time.Minute)

	// Switched off for this beamline: the cache is pruned, the condition removed, the password kept.
	g.Eventually(func() error {
		c := getCluster(t, g, ns)
		c.Spec.Instances[0].Overrides = &tiledv1alpha1.InstanceTemplate{Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(false)}}
		return env.Client.Update(ctxT(t), c)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Eventually(func() bool {
		return exists(t, &appsv1.StatefulSet{}, ns, n.Cache) || exists(t, &corev1.Service{}, ns, n.Cache)
	},
		time.Minute, 200*time.Millisecond).Should(BeFalse(), "the cache's StatefulSet and Service pruned")
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-a")
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStreamingCacheReady)).To(BeNil())
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: n.Secret}, secret)).To(Succeed())
	g.Expect(secret.Data[render.SecretKeyStreamingCachePassword]).To(Equal(password), "the password is kept for when streaming is on again")
}

// TestPodFailuresNamedOnTheInstance: an image that cannot be pulled, a crash loop (with its last log
// line), a readiness probe that keeps failing and a crash-looping database each end in a condition
// on the TiledInstance naming the pod, the container and the reason — Stalled when it will not mend
// by itself — well within two minutes; nothing the operator wrote changes meanwhile.
func TestPodFailuresNamedOnTheInstance(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "podfail")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	setStatefulSetReady(t, g, ns, n.Postgres, 1)
	setStatefulSetReady(t, g, ns, n.Tiled, 0)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionFalse, controllers.ReasonWaitingForPods, time.Minute)
	waitQuiet(t, op)
	written := resourceVersions(t, g, ns)
	delete(written, "TiledInstance/"+ti.Name) // its status changes, as it must
	for k := range written {
		if strings.HasPrefix(k, "StatefulSet/") {
			delete(written, k) // the test writes their status
		}
	}
	const within = 2 * time.Minute
	tiled := createPod(t, g, ti, render.ComponentServer, n.Tiled+"-0", "tiled")

	setPodStatus(t, g, tiled, waitingStatus("tiled", "ErrImagePull", `failed to pull and unpack image "example.org/tiled:1": not found`))
	start := time.Now()
	ti = condition(t, g, ns, ti.Name, controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonImagePull, within,
		"container tiled of pod "+n.Tiled+"-0", "not found")
	t.Logf("image pull failure named after %v: %s", time.Since(start).Round(time.Millisecond),
		meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled).Message)
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReconciling)).To(BeNil(), "never Reconciling and Stalled together")
	g.Expect(kstatusOf(t, g, ti)).To(Equal(status.FailedStatus))
	g.Eventually(func() []string { return eventReasons(t, g, ns) }, 10*time.Second).Should(ContainElement(controllers.ReasonImagePull))
	// The cluster rolls it up: Stalled, naming the instance and its reason; kstatus reads it as failed.
	g.Eventually(func(g Gomega) {
		c := getCluster(t, g, ns)
		st := meta.FindStatusCondition(c.Status.Conditions, controllers.ConditionStalled)
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Reason).To(Equal(controllers.ReasonInstancesStalled))
		g.Expect(st.Message).To(ContainSubstring("1 of 1 instances stalled: fleet-a (" + controllers.ReasonImagePull + ": "))
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, controllers.ConditionReconciling)).To(BeNil())
		g.Expect(kstatusOf(t, g, c)).To(Equal(status.FailedStatus))
	}, within, 100*time.Millisecond).Should(Succeed())

	// The back-off that follows keeps the same reason (no flapping between the kubelet's two).
	setPodStatus(t, g, tiled, waitingStatus("tiled", "ImagePullBackOff", `Back-off pulling image "example.org/tiled:1"`))
	condition(t, g, ns, ti.Name, controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonImagePull, within, "ImagePullBackOff: Back-off pulling image")

	// Tiled refuses its configuration and crash-loops: the condition quotes its last log line.
	setPodStatus(t, g, tiled, crashLoopStatus("tiled", "Traceback (most recent call last):\n  ...\nbogus_key\n  Extra inputs are not permitted [type=extra_forbidden]\n"))
	condition(t, g, ns, ti.Name, controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonCrashLoop, within,
		"container tiled of pod "+n.Tiled+"-0 is crash-looping", "last log line: Extra inputs are not permitted")

	// Running, but its readiness probe has failed for longer than the grace period: named, not
	// stalled (it may recover).
	setPodStatus(t, g, tiled, runningStatus("tiled", false, time.Now().Add(-3*time.Minute)))
	ti = condition(t, g, ns, ti.Name, controllers.ConditionReconciling, metav1.ConditionTrue, controllers.ReasonProbeFailing, within,
		"container tiled of pod "+n.Tiled+"-0 has been running since", "its readiness probe fails")
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionReady).Reason).To(Equal(controllers.ReasonProbeFailing))

	// Not ready for less than the grace period: not a failure yet; named once the period is over,
	// with no pod update to say so (the controller looks again by itself).
	started := time.Now().Add(-controllers.DefaultProbeGrace + 8*time.Second)
	setPodStatus(t, g, tiled, runningStatus("tiled", false, started))
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionFalse, controllers.ReasonWaitingForPods, within)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionFalse, controllers.ReasonProbeFailing, within)
	g.Expect(time.Since(started)).To(BeNumerically(">=", controllers.DefaultProbeGrace))

	// The database crash-loops: the instance names the database pod, and its database as not ready.
	setPodStatus(t, g, tiled, runningStatus("tiled", true, time.Now()))
	setStatefulSetReady(t, g, ns, n.Tiled, 1)
	condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, within)
	pg := createPod(t, g, ti, render.ComponentDatabase, n.Postgres+"-0", "postgres")
	setPodStatus(t, g, pg, crashLoopStatus("postgres", "FATAL:  data directory \"/var/lib/postgresql/data/pgdata\" has invalid permissions\n"))
	setStatefulSetReady(t, g, ns, n.Postgres, 0)
	ti = condition(t, g, ns, ti.Name, controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonCrashLoop, within,
		"container postgres of pod "+n.Postgres+"-0 is crash-looping", `last log line: FATAL:  data directory "/var/lib/postgresql/data/pgdata" has invalid permissions`)
	db := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionDatabaseReady)
	g.Expect(db.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(db.Reason).To(Equal(controllers.ReasonCrashLoop))

	// Mended: Ready again, nothing stalled.
	setPodStatus(t, g, pg, runningStatus("postgres", true, time.Now()))
	setStatefulSetReady(t, g, ns, n.Postgres, 1)
	ti = condition(t, g, ns, ti.Name, controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, within)
	g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	g.Eventually(func(g Gomega) {
		c := getCluster(t, g, ns)
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
		g.Expect(kstatusOf(t, g, c)).To(Equal(status.CurrentStatus))
	}, within, 100*time.Millisecond).Should(Succeed())

	// Nothing the operator wrote was rewritten or removed along the way.
	waitQuiet(t, op)
	after := resourceVersions(t, g, ns)
	for k, v := range written {
		g.Expect(after).To(HaveKeyWithValue(k, v), "%s changed", k)
	}
}

// TestStandaloneInstanceImage: a standalone instance stored terse (no mutating webhook here, as
// when it was not answering) shows the image its pods run in status.image and the Image column.
func TestStandaloneInstanceImage(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "standalone")
	startOperator(t, ns)
	p := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site", Labels: map[string]string{"site": "x"}},
		Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{Image: "registry.example.org/tiled:0.2.20-site"},
		}},
	}
	ti := &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "solo"},
		Spec: tiledv1alpha1.TiledInstanceSpec{
			ProfileSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"site": "x"}},
			InstanceTemplate: tiledv1alpha1.InstanceTemplate{Tiled: &tiledv1alpha1.TiledServerSpec{Replicas: ptr.To[int32](1)}},
		},
	}
	createAll(t, g, p, ti)
	g.Expect(getInstance(t, g, ns, "solo").Spec.Tiled.Image).To(BeEmpty(), "stored terse")
	g.Eventually(func() string { return getInstance(t, g, ns, "solo").Status.Image }, time.Minute, 200*time.Millisecond).
		Should(Equal("registry.example.org/tiled:0.2.20-site"))
	out, stderr, err := env.Kubectl(ctxT(t), "get", "tiledinstances", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	t.Logf("kubectl get tiledinstances:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2))
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	col := -1
	for i, h := range header {
		if h == "IMAGE" {
			col = i
		}
	}
	g.Expect(col).To(BeNumerically(">=", 0), out)
	// The CLUSTER cell is blank for a standalone instance, so the row's fields do not line up with the
	// header's: look for the image among them.
	g.Expect(row).To(ContainElement("registry.example.org/tiled:0.2.20-site"))
}
