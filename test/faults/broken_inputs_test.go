package faults_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// stalledWith waits until the cluster reports a failure with the given reason.
func stalledWith(t *testing.T, g Gomega, ns, reason string) {
	g.Eventually(func(g Gomega) {
		c := getCluster(t, g, ns)
		s := condition(c.Status.Conditions, controllers.ConditionStalled)
		g.Expect(s).NotTo(BeNil(), "not Stalled")
		g.Expect(s.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(s.Reason).To(Equal(reason))
		r := condition(c.Status.Conditions, controllers.ConditionReady)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// recovered waits until the cluster is resolved again and no longer stalled.
func recovered(t *testing.T, g Gomega, ns string) {
	g.Eventually(func(g Gomega) {
		c := getCluster(t, g, ns)
		g.Expect(condition(c.Status.Conditions, controllers.ConditionStalled)).To(BeNil(), "still Stalled")
		p := condition(c.Status.Conditions, controllers.ConditionProfilesResolved)
		g.Expect(p).NotTo(BeNil())
		g.Expect(p.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// A profile every instance uses is deleted: nothing is deleted or rewritten, the cluster reports
// ProfileDeleted; the profile is recreated: the cluster recovers by itself, every object still there.
func testProfileDeleted(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-profile-deleted", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	rvs := fleet.ResourceVersions(checkFleet(t, g, c))

	p := &tiledv1alpha1.TiledProfile{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-network"}, p)).To(Succeed())
	g.Expect(env.Client.Delete(ctxT(t), p)).To(Succeed())
	stalledWith(t, g, ns, controllers.ReasonProfileDeleted)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty(), "objects changed or deleted while the profile was missing")

	for _, q := range fleet.Profiles(ns) {
		if q.Name == "nsls2-network" {
			g.Expect(env.Client.Create(ctxT(t), q)).To(Succeed())
		}
	}
	recovered(t, g, ns)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	checkFleet(t, g, c)
	ti := &tiledv1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-bmm"}, ti)).To(Succeed())
	g.Expect(ti.Spec.Tiled.Env).To(ContainElement(HaveField("Name", "TILED_PUBLIC_URL")), "the recreated profile's settings are in the instances")
}

// A profile is changed so that it conflicts with another of equal priority: nothing is rewritten, the
// cluster reports ProfileConflict; the change is reverted: the cluster recovers by itself.
func testProfileConflict(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-conflict", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	rvs := fleet.ResourceVersions(checkFleet(t, g, c))

	p := &tiledv1alpha1.TiledProfile{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-network"}, p)).To(Succeed())
	orig := p.Spec.DeepCopy()
	p.Spec.Priority = 5 // nsls2-ops has priority 5 and sets this annotation to data-science
	p.Spec.Tiled.PodAnnotations = map[string]string{"nsls2.bnl.gov/team": "network"}
	g.Expect(env.Client.Update(ctxT(t), p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cl := getCluster(t, g, ns)
		r := condition(cl.Status.Conditions, controllers.ConditionProfilesResolved)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(r.Reason).To(Equal(controllers.ReasonConflict))
		g.Expect(r.Message).To(And(ContainSubstring("nsls2-network"), ContainSubstring("nsls2-ops")))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	stalledWith(t, g, ns, controllers.ReasonConflict)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty(), "objects changed during the conflict")

	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-network"}, p)).To(Succeed())
	p.Spec = *orig
	g.Expect(env.Client.Update(ctxT(t), p)).To(Succeed())
	recovered(t, g, ns)
	checkFleet(t, g, c)
}

// An external database's Secret disappears: the instance reports DatabaseSecretInvalid and keeps its
// objects; the Secret comes back: the instance recovers by itself.
func testDatabaseSecret(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-dbsecret", func(ns string) *tiledv1alpha1.TiledCluster {
		c := defaultCluster(fleetN - 1)(ns)
		c.Spec.Instances = append(c.Spec.Instances, tiledv1alpha1.ClusterInstance{Name: "ext", Overrides: &tiledv1alpha1.InstanceTemplate{
			Database: &tiledv1alpha1.DatabaseSpec{External: &tiledv1alpha1.ExternalDatabase{URISecretRef: &tiledv1alpha1.SecretKeyRef{Name: "ext-db"}}},
		}})
		return c
	})
	secret := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext-db"},
			Data: map[string][]byte{"uri": []byte("postgresql://tiled:pw@db.nsls2.bnl.gov:5432/catalog")}}
	}
	g.Expect(env.Client.Create(ctxT(t), secret())).To(Succeed())
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	rvs := fleet.ResourceVersions(checkFleet(t, g, c))
	instanceStalled := func(g Gomega) *metav1.Condition {
		ti := &tiledv1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-ext"}, ti)).To(Succeed())
		return condition(ti.Status.Conditions, controllers.ConditionStalled)
	}
	g.Expect(instanceStalled(g)).To(BeNil())

	g.Expect(env.Client.Delete(ctxT(t), secret())).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := instanceStalled(g)
		g.Expect(s).NotTo(BeNil(), "the instance does not report the missing Secret")
		g.Expect(s.Reason).To(Equal(controllers.ReasonDatabaseSecret))
		g.Expect(s.Message).To(ContainSubstring("ext-db"))
	}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	for k := range rvs {
		if k == "TiledInstance/nsls2-ext" {
			continue // its status changed
		}
		g.Expect(objs).To(HaveKey(k), "deleted while the database Secret was missing")
	}

	g.Expect(env.Client.Create(ctxT(t), secret())).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(instanceStalled(g)).To(BeNil(), "still Stalled after the Secret came back")
	}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	checkFleet(t, g, c)
}
