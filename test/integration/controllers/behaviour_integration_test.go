package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// smallFleet creates one profile and a cluster of the given instances, and returns the cluster.
func smallFleet(t *testing.T, g Gomega, ns string, instances ...tiledv1alpha1.ClusterInstance) *tiledv1alpha1.TiledCluster {
	p := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults", Labels: map[string]string{"facility": "test"}},
		Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"team": "a"}},
			Storage: &tiledv1alpha1.StorageSpec{
				Data: &tiledv1alpha1.DataVolume{Size: "5Gi"},
				ReadOnlyMounts: []tiledv1alpha1.ReadOnlyMount{{Name: "proposals", NFS: &tiledv1alpha1.NFSVolumeSource{
					Server: "nfs.example.org", PathExpression: "'/data/' + instance.name + '/proposals'",
				}}},
			},
			Database: &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Size: "1Gi"}},
			// No streaming cache: the tests mark the Tiled and PostgreSQL StatefulSets ready as the
			// kubelet would, and TestStreamingCacheOutage covers the cache's readiness.
			Streaming: &tiledv1alpha1.StreamingSpec{Enabled: ptr.To(false)},
		}},
	}
	c := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"},
		Spec: tiledv1alpha1.TiledClusterSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
			Instances:       instances,
		},
	}
	createAll(t, g, p, c)
	return c
}

func names(ns ...string) []tiledv1alpha1.ClusterInstance {
	out := make([]tiledv1alpha1.ClusterInstance, len(ns))
	for i, n := range ns {
		out[i] = tiledv1alpha1.ClusterInstance{Name: n}
	}
	return out
}

func getCluster(t *testing.T, g Gomega, ns string) *tiledv1alpha1.TiledCluster {
	c := &tiledv1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "fleet"}, c)).To(Succeed())
	return c
}

func exists(t *testing.T, obj client.Object, ns, name string) bool {
	err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, obj)
	return err == nil
}

// markReady simulates the kubelet and the StatefulSet controller (neither runs here): the
// StatefulSet reports every replica ready at its current generation.
func markReady(t *testing.T, g Gomega, ns, name string) {
	setStatefulSetReady(t, g, ns, name, allReplicas)
}

// kstatusOf computes what kstatus (and so ArgoCD and Flux) reads from an object.
func kstatusOf(t *testing.T, g Gomega, obj client.Object) status.Status {
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	g.Expect(err).NotTo(HaveOccurred())
	res, err := status.Compute(&unstructured.Unstructured{Object: m})
	g.Expect(err).NotTo(HaveOccurred())
	return res.Status
}

func eventReasons(t *testing.T, g Gomega, ns string) []string {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason)
	}
	return out
}

func reconcileCount(g Gomega, controller string) float64 {
	families, err := crmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "controller") == controller {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestRetention removes beamlines under each retention policy and then deletes the cluster: the
// garbage collector (kube-controller-manager) removes the owned objects, and data under Retain stays.
func TestRetention(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "retention")
	op := startOperator(t, ns)
	del := tiledv1alpha1.ClusterInstance{Name: "del", Overrides: &tiledv1alpha1.InstanceTemplate{
		Storage: &tiledv1alpha1.StorageSpec{Retention: tiledv1alpha1.RetentionDelete},
	}}
	smallFleet(t, g, ns, tiledv1alpha1.ClusterInstance{Name: "keep"}, del, tiledv1alpha1.ClusterInstance{Name: "stay"})
	waitForStampOut(t, g, op, ns, "fleet", 3)
	keep, stay := fleet.NamesOf(getInstance(t, g, ns, "fleet-keep")), fleet.NamesOf(getInstance(t, g, ns, "fleet-stay"))
	delNames := fleet.NamesOf(getInstance(t, g, ns, "fleet-del"))
	for _, n := range []string{keep.DataClaim, keep.DatabaseClaim, delNames.DataClaim, delNames.DatabaseClaim} {
		g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, ns, n)).To(BeTrue(), n)
	}

	// Remove two beamlines: one under Retain (the default), one under Delete.
	c := getCluster(t, g, ns)
	c.Spec.Instances = []tiledv1alpha1.ClusterInstance{{Name: "stay"}}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() []string {
		var left []string
		for what, gone := range map[string]bool{
			"instance keep":        !exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-keep"),
			"instance del":         !exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-del"),
			"keep's StatefulSet":   !exists(t, &appsv1.StatefulSet{}, ns, keep.Tiled),
			"del's Secret":         !exists(t, &corev1.Secret{}, ns, delNames.Secret),
			"del's data claim":     !exists(t, &corev1.PersistentVolumeClaim{}, ns, delNames.DataClaim),
			"del's database claim": !exists(t, &corev1.PersistentVolumeClaim{}, ns, delNames.DatabaseClaim),
		} {
			if !gone {
				left = append(left, what)
			}
		}
		return left
	}, 90*time.Second, 250*time.Millisecond).Should(BeEmpty(), "pruned instances and their owned objects are garbage-collected")
	g.Expect(exists(t, &corev1.PersistentVolume{}, "", keep.ReadOnlyVolumeName(ns, "proposals"))).To(BeFalse(),
		"the NFS PersistentVolume of a removed beamline is left behind")
	g.Expect(exists(t, &corev1.PersistentVolume{}, "", stay.ReadOnlyVolumeName(ns, "proposals"))).To(BeTrue())
	for _, n := range []string{keep.DataClaim, keep.DatabaseClaim} {
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(exists(t, pvc, ns, n)).To(BeTrue(), "retained claim %s was deleted", n)
		g.Expect(pvc.Labels).To(HaveKeyWithValue(controllers.LabelReleased, "true"))
		g.Expect(pvc.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelInstance, "keep"))
	}
	// The Secret stays with the data: the retained database opens only with its password.
	sec := &corev1.Secret{}
	g.Expect(exists(t, sec, ns, keep.Secret)).To(BeTrue(), "the Secret of a retained beamline was deleted")
	g.Expect(sec.Labels).To(HaveKeyWithValue(controllers.LabelReleased, "true"))
	g.Expect(sec.OwnerReferences).To(BeEmpty())
	g.Eventually(func() []string { return eventReasons(t, g, ns) }, 10*time.Second).Should(ContainElement("InstanceRemoved"))

	// Delete the cluster: everything goes but the retained data.
	g.Expect(env.Client.Delete(ctxT(t), getCluster(t, g, ns), client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() bool {
		return !exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-stay") && !exists(t, &appsv1.StatefulSet{}, ns, stay.Tiled) &&
			!exists(t, &appsv1.StatefulSet{}, ns, stay.Postgres) && !exists(t, &corev1.ConfigMap{}, ns, stay.ConfigMap)
	}, 90*time.Second, 250*time.Millisecond).Should(BeTrue())
	for _, n := range []string{stay.DataClaim, stay.DatabaseClaim, keep.DataClaim} {
		g.Expect(exists(t, &corev1.PersistentVolumeClaim{}, ns, n)).To(BeTrue(), "retained claim %s was deleted with the cluster", n)
	}
}

// TestSecretsAreNeverRegenerated reconciles the instances a hundred times and restarts the operator:
// the generated secrets do not change, and the Secret objects are not even written.
func TestSecretsAreNeverRegenerated(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "secrets")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a", "b")...)
	waitForStampOut(t, g, op, ns, "fleet", 2)
	secrets := map[string]*corev1.Secret{}
	for _, n := range []string{"fleet-a", "fleet-b"} {
		s := &corev1.Secret{}
		g.Expect(exists(t, s, ns, fleet.NamesOf(getInstance(t, g, ns, n)).Secret)).To(BeTrue())
		g.Expect(s.Data).To(HaveKey(render.SecretKeyAPIKey))
		g.Expect(s.Data).To(HaveKey(render.SecretKeyDatabasePassword))
		secrets[n] = s
	}
	g.Expect(secrets["fleet-a"].Data[render.SecretKeyAPIKey]).NotTo(Equal(secrets["fleet-b"].Data[render.SecretKeyAPIKey]))

	for i := 0; i < 100; i++ {
		before := reconcileCount(g, "tiledinstance")
		g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
		g.Eventually(func() float64 { return reconcileCount(g, "tiledinstance") }, 10*time.Second, 5*time.Millisecond).
			Should(BeNumerically(">=", before+2))
	}
	check := func() {
		for n, want := range secrets {
			s := &corev1.Secret{}
			g.Expect(exists(t, s, ns, want.Name)).To(BeTrue())
			g.Expect(s.Data).To(Equal(want.Data), "the Secret of %s changed", n)
			g.Expect(s.ResourceVersion).To(Equal(want.ResourceVersion), "the Secret of %s was written", n)
		}
	}
	check()

	op.stop()
	op2 := startOperator(t, ns)
	g.Expect(op2.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op2)
	check()
}

// TestExternalEdits lets another field manager edit a child: an operator-owned field is restored, a
// field the operator does not set is left alone, and the edit is reported on the instance.
func TestExternalEdits(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "edits")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	name := fleet.NamesOf(getInstance(t, g, ns, "fleet-a")).Tiled

	s := &appsv1.StatefulSet{}
	g.Expect(exists(t, s, ns, name)).To(BeTrue())
	s.Spec.Replicas = ptr.To[int32](5)                            // owned by the operator
	s.Annotations = map[string]string{"example.org/owner": "ops"} // not set by the operator
	g.Expect(env.Client.Update(ctxT(t), s, client.FieldOwner("kubectl-edit"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		s := &appsv1.StatefulSet{}
		g.Expect(exists(t, s, ns, name)).To(BeTrue())
		g.Expect(*s.Spec.Replicas).To(Equal(int32(1)), "the operator-owned field is restored")
		g.Expect(s.Annotations).To(HaveKeyWithValue("example.org/owner", "ops"), "the other writer's field is left alone")
		ti := getInstance(t, g, ns, "fleet-a")
		c := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionExternalEdits)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(ContainSubstring("StatefulSet/" + name + " has fields managed by kubectl-edit"))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Eventually(func() []string { return eventReasons(t, g, ns) }, 10*time.Second).Should(ContainElement(controllers.ReasonFieldsManaged))
}

// TestKstatusPhases drives an instance through the phases ArgoCD and Flux read: in progress while
// pods are not ready, current when they are, failed when the cluster cannot be expanded — and back.
func TestKstatusPhases(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "kstatus")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	cluster := getCluster(t, g, ns)
	g.Expect(kstatusOf(t, g, ti)).To(Equal(status.InProgressStatus))
	g.Expect(kstatusOf(t, g, cluster)).To(Equal(status.InProgressStatus))

	markReady(t, g, ns, n.Postgres)
	markReady(t, g, ns, n.Tiled)
	g.Eventually(func() status.Status { return kstatusOf(t, g, ti) }, time.Minute, 250*time.Millisecond).Should(Equal(status.CurrentStatus))
	g.Eventually(func() status.Status { return kstatusOf(t, g, cluster) }, time.Minute, 250*time.Millisecond).Should(Equal(status.CurrentStatus))
	ti = getInstance(t, g, ns, "fleet-a")
	g.Expect(ti.Status.ReadyReplicas).To(Equal(int32(1)))
	g.Expect(ti.Status.Database).To(Equal(&tiledv1alpha1.DatabaseStatus{Mode: "Managed", Ready: true}))
	g.Expect(ti.Status.URL).To(Equal("http://" + n.Tiled + "." + ns + ".svc:8000"))

	// A conflicting profile: the cluster is Stalled (kstatus: Failed), the instance is left alone.
	rv := getInstance(t, g, ns, "fleet-a").ResourceVersion
	conflicting := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", Labels: map[string]string{"facility": "test"}},
		Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"team": "b"}},
		}},
	}
	createAll(t, g, conflicting)
	g.Eventually(func() status.Status { return kstatusOf(t, g, cluster) }, time.Minute, 250*time.Millisecond).Should(Equal(status.FailedStatus))
	cluster = getCluster(t, g, ns)
	resolved := meta.FindStatusCondition(cluster.Status.Conditions, controllers.ConditionProfilesResolved)
	g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(resolved.Reason).To(Equal(controllers.ReasonConflict))
	g.Expect(resolved.Message).To(And(ContainSubstring("profile/defaults@"), ContainSubstring("profile/other@"), ContainSubstring(`spec.tiled.podAnnotations.team`)))
	g.Expect(meta.FindStatusCondition(cluster.Status.Conditions, controllers.ConditionReconciling)).To(BeNil(), "never Reconciling and Stalled together")
	g.Expect(getInstance(t, g, ns, "fleet-a").ResourceVersion).To(Equal(rv), "the instance was touched during a conflict")
	g.Eventually(func() []string { return eventReasons(t, g, ns) }, 10*time.Second).Should(ContainElement(controllers.ReasonConflict))

	// Fixed: the conflict goes, the cluster recovers on its own.
	g.Expect(env.Client.Delete(ctxT(t), conflicting)).To(Succeed())
	g.Eventually(func() status.Status { return kstatusOf(t, g, cluster) }, time.Minute, 250*time.Millisecond).Should(Equal(status.CurrentStatus))
}

// TestBadInputLeavesChildrenAlone: a profile deleted in use, an invalid expression, and an external
// database Secret that is missing or lacks its key are reported by condition and event; nothing is
// deleted or rewritten; once fixed, the operator recovers by itself.
func TestBadInputLeavesChildrenAlone(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "badinput")
	op := startOperator(t, ns)
	extra := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "extra", Labels: map[string]string{"facility": "test"}},
		Spec: tiledv1alpha1.TiledProfileSpec{Priority: 3, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Expose: &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{Enabled: ptr.To(true), HostExpression: "instance.name + '.example.org'"}},
		}},
	}
	createAll(t, g, extra)
	smallFleet(t, g, ns, names("a", "b")...)
	waitForStampOut(t, g, op, ns, "fleet", 2)
	rvs := resourceVersions(t, g, ns)
	stalledWith := func(reason string, contains ...string) {
		g.Eventually(func(g Gomega) {
			c := getCluster(t, g, ns)
			s := meta.FindStatusCondition(c.Status.Conditions, controllers.ConditionStalled)
			g.Expect(s).NotTo(BeNil())
			g.Expect(s.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(s.Reason).To(Equal(reason))
			for _, w := range contains {
				g.Expect(s.Message).To(ContainSubstring(w))
			}
		}, time.Minute, 250*time.Millisecond).Should(Succeed())
		waitQuiet(t, op)
		g.Expect(resourceVersions(t, g, ns)).To(Equal(rvs), "children changed while the cluster was stalled")
	}

	// An expression that does not compile.
	g.Expect(exists(t, extra, ns, "extra")).To(BeTrue())
	extra.Spec.Expose.Ingress.HostExpression = "instance.nmae + '.example.org'"
	g.Expect(env.Client.Update(ctxT(t), extra)).To(Succeed())
	stalledWith(controllers.ReasonExpressionError, "profile/extra@", "hostExpression", "instance.nmae")

	// The profile is deleted while in use; recreated, the cluster goes on by itself.
	g.Expect(env.Client.Delete(ctxT(t), extra)).To(Succeed())
	stalledWith(controllers.ReasonProfileDeleted, "profile extra")
	g.Eventually(func() []string { return eventReasons(t, g, ns) }, 10*time.Second).Should(ContainElement(controllers.ReasonProfileDeleted))
	recreated := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "extra", Labels: extra.Labels}, Spec: extra.Spec}
	recreated.Spec.Expose.Ingress.HostExpression = "instance.name + '.example.org'"
	createAll(t, g, recreated)
	g.Eventually(func(g Gomega) {
		g.Expect(meta.FindStatusCondition(getCluster(t, g, ns).Status.Conditions, controllers.ConditionStalled)).To(BeNil())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	rvs = resourceVersions(t, g, ns)
	g.Expect(env.Client.Delete(ctxT(t), recreated)).To(Succeed())
	stalledWith(controllers.ReasonProfileDeleted, "profile extra")

	// Changing the cluster's spec accepts the new selection: the Ingresses go, nothing else is lost.
	c := getCluster(t, g, ns)
	c.Spec.Instances = append(c.Spec.Instances, tiledv1alpha1.ClusterInstance{Name: "ext", Overrides: &tiledv1alpha1.InstanceTemplate{
		Database: &tiledv1alpha1.DatabaseSpec{External: &tiledv1alpha1.ExternalDatabase{URISecretRef: &tiledv1alpha1.SecretKeyRef{Name: "ext-db"}}},
	}})
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() status.Status { return kstatusOf(t, g, getCluster(t, g, ns)) }, time.Minute, 250*time.Millisecond).
		Should(Equal(status.InProgressStatus))

	// The external database's Secret is missing, then lacks its key: the instance says so.
	instanceStalled := func(contains string) {
		g.Eventually(func(g Gomega) {
			ti := getInstance(t, g, ns, "fleet-ext")
			s := meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)
			g.Expect(s).NotTo(BeNil())
			g.Expect(s.Reason).To(Equal(controllers.ReasonDatabaseSecret))
			g.Expect(s.Message).To(ContainSubstring(contains))
		}, time.Minute, 250*time.Millisecond).Should(Succeed())
	}
	instanceStalled(`the external database Secret ` + ns + `/ext-db (spec.database.external.uriSecretRef) does not exist`)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext-db"}, Data: map[string][]byte{"other": []byte("x")}}
	createAll(t, g, secret)
	instanceStalled(`has no key "uri"`)
	secret.Data = map[string][]byte{"uri": []byte("postgresql://tiled:pw@db.example.org:5432/catalog")}
	g.Expect(env.Client.Update(ctxT(t), secret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		ti := getInstance(t, g, ns, "fleet-ext")
		g.Expect(meta.FindStatusCondition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
		g.Expect(exists(t, &appsv1.StatefulSet{}, ns, fleet.NamesOf(ti).Tiled)).To(BeTrue())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}

// TestPausedAndRollout: a paused cluster gets no write at all; a profile change reaches ready
// instances at most rollout.maxUnavailable at a time.
func TestPausedAndRollout(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "rollout")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a", "b", "c")...)
	waitForStampOut(t, g, op, ns, "fleet", 3)
	for _, i := range []string{"a", "b", "c"} {
		n := fleet.NamesOf(getInstance(t, g, ns, "fleet-"+i))
		markReady(t, g, ns, n.Postgres)
		markReady(t, g, ns, n.Tiled)
	}
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(3)))
	waitQuiet(t, op)

	// Paused: a profile change causes no write.
	c := getCluster(t, g, ns)
	c.Spec.Paused = true
	c.Spec.Rollout = &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	waitQuiet(t, op)
	before := op.Traffic.Snapshot()
	p := &tiledv1alpha1.TiledProfile{}
	g.Expect(exists(t, p, ns, "defaults")).To(BeTrue())
	p.Spec.Tiled.PodAnnotations["team"] = "b"
	g.Expect(env.Client.Update(ctxT(t), p)).To(Succeed())
	time.Sleep(2 * time.Second)
	waitQuiet(t, op)
	paused := op.Traffic.Snapshot().Sub(before)
	g.Expect(paused[traffic.Key{Verb: traffic.VerbApply, Resource: "tiledprofiles/status"}]).To(Equal(int64(1)), "the profile's own status (observedGeneration)")
	g.Expect(paused.Writes()).To(Equal(int64(1)), "a paused cluster was written to:\n%s", paused)

	// Unpaused: one instance at a time.
	hashes := func() (updated int) {
		for _, i := range []string{"a", "b", "c"} {
			s := &appsv1.StatefulSet{}
			if exists(t, s, ns, fleet.NamesOf(getInstance(t, g, ns, "fleet-"+i)).Tiled) && s.Spec.Template.Annotations["team"] == "b" {
				updated++
			}
		}
		return updated
	}
	c = getCluster(t, g, ns)
	c.Spec.Paused = false
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	for want := 1; want <= 3; want++ {
		g.Eventually(hashes, time.Minute, 250*time.Millisecond).Should(Equal(want))
		waitQuiet(t, op)
		g.Expect(hashes()).To(Equal(want), "more than maxUnavailable instances changed at once")
		if want < 3 {
			rolling := meta.FindStatusCondition(getCluster(t, g, ns).Status.Conditions, controllers.ConditionReconciling)
			g.Expect(rolling).NotTo(BeNil())
			g.Expect(rolling.Reason).To(Equal(controllers.ReasonRollingOut))
		}
		for _, i := range []string{"a", "b", "c"} { // the kubelet brings the new pods up
			markReady(t, g, ns, fleet.NamesOf(getInstance(t, g, ns, "fleet-"+i)).Tiled)
		}
	}
	g.Eventually(func() status.Status { return kstatusOf(t, g, getCluster(t, g, ns)) }, time.Minute, 250*time.Millisecond).Should(Equal(status.CurrentStatus))
}

// TestUnpauseCatchesUp: while a cluster is paused its instances skip their reconciles, the
// readiness of their pods included; unpausing makes each look again at once (found on a real node:
// an instance stayed WaitingForPods forever after an unpause, its pods long Ready).
func TestUnpauseCatchesUp(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "unpause")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	n := fleet.NamesOf(getInstance(t, g, ns, "fleet-a"))
	markReady(t, g, ns, n.Postgres)
	condition(t, g, ns, "fleet-a", controllers.ConditionReady, metav1.ConditionFalse, controllers.ReasonWaitingForPods, time.Minute)

	c := getCluster(t, g, ns)
	c.Spec.Paused = true
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	waitQuiet(t, op)
	markReady(t, g, ns, n.Tiled) // the pods become ready while the cluster is paused
	time.Sleep(2 * time.Second)
	g.Expect(meta.IsStatusConditionTrue(getInstance(t, g, ns, "fleet-a").Status.Conditions, controllers.ConditionReady)).To(BeFalse(), "a paused instance wrote its status")

	c = getCluster(t, g, ns)
	c.Spec.Paused = false
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	condition(t, g, ns, "fleet-a", controllers.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady, 30*time.Second)
}
