package faults_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// retentionFleet is a small fleet: the beamlines cycle through the two policies (Retain, the
// default, and Delete).
func retentionFleet(n int) func(ns string) *tiledv1alpha1.TiledCluster {
	return func(ns string) *tiledv1alpha1.TiledCluster {
		c := defaultCluster(n)(ns)
		for i := range c.Spec.Instances {
			if i%2 == 1 {
				in := &c.Spec.Instances[i]
				if in.Overrides == nil {
					in.Overrides = &tiledv1alpha1.InstanceTemplate{}
				}
				in.Overrides.Storage = &tiledv1alpha1.StorageSpec{Retention: tiledv1alpha1.RetentionDelete}
			}
		}
		return c
	}
}

const retentionN = 6

// dataClaims maps each instance's data and database claims to their UIDs.
func dataClaims(t *testing.T, g Gomega, ns string, names []string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, n := range names {
		ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-" + n, Namespace: ns}}
		nm := fleet.NamesOf(ti)
		out[n] = map[string]string{}
		for _, claim := range []string{nm.DataClaim, nm.DatabaseClaim} {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: claim}, pvc)).To(Succeed())
			out[n][claim] = string(pvc.UID)
		}
	}
	return out
}

// checkClaims waits for the claims of Delete beamlines to go and asserts that those of Retain
// beamlines are still there, the very same objects (same UID).
func checkClaims(t *testing.T, g Gomega, ns string, claims map[string]map[string]string, deleted map[string]bool) {
	g.Eventually(func(g Gomega) {
		for n, cs := range claims {
			for name, uid := range cs {
				pvc := &corev1.PersistentVolumeClaim{}
				err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, pvc)
				if deleted[n] {
					g.Expect(apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero())).To(BeTrue(), "claim %s of %s (Delete) is still there", name, n)
					continue
				}
				g.Expect(err).NotTo(HaveOccurred(), "retained claim %s of %s is gone", name, n)
				g.Expect(string(pvc.UID)).To(Equal(uid), "retained claim %s of %s was recreated", name, n)
				g.Expect(pvc.DeletionTimestamp.IsZero()).To(BeTrue(), "retained claim %s of %s is being deleted", name, n)
			}
		}
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// Two beamlines are removed from the cluster, one under each policy: the Retain one's data and
// database claims stay (labelled released), the Delete one's go with it; the others are untouched.
func testRetentionBeamlines(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-retain-bl", retentionFleet(retentionN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, retentionN)
	names := make([]string, 0, retentionN)
	for _, in := range c.Spec.Instances {
		names = append(names, in.Name)
	}
	claims := dataClaims(t, g, ns, names)
	keep, drop := names[0], names[1] // Retain, Delete
	cl := getCluster(t, g, ns)
	cl.Spec.Instances = cl.Spec.Instances[2:]
	g.Expect(env.Client.Update(ctxT(t), cl)).To(Succeed())
	g.Eventually(func() bool {
		err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-" + keep}, &tiledv1alpha1.TiledInstance{})
		err2 := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-" + drop}, &tiledv1alpha1.TiledInstance{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(err2)
	}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(BeTrue(), "removed beamlines' instances are deleted")
	checkClaims(t, g, ns, claims, map[string]bool{drop: true})
	for name := range claims[keep] {
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, pvc)).To(Succeed())
		g.Expect(pvc.Labels).To(HaveKeyWithValue(controllers.LabelReleased, "true"))
	}
}

// The cluster is deleted: every Retain beamline's data and database claims stay, the very same
// objects; the Delete beamlines' go.
func testRetentionCluster(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-retain-cl", retentionFleet(retentionN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, retentionN)
	names := make([]string, 0, retentionN)
	deleted := map[string]bool{}
	for i, in := range c.Spec.Instances {
		names = append(names, in.Name)
		deleted[in.Name] = i%2 == 1
	}
	claims := dataClaims(t, g, ns, names)
	g.Expect(env.Client.Delete(ctxT(t), getCluster(t, g, ns), client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var tis tiledv1alpha1.TiledInstanceList
		g.Expect(env.Client.List(ctxT(t), &tis, client.InNamespace(ns))).To(Succeed())
		g.Expect(tis.Items).To(BeEmpty())
		var sts appsv1.StatefulSetList
		g.Expect(env.Client.List(ctxT(t), &sts, client.InNamespace(ns))).To(Succeed())
		g.Expect(sts.Items).To(BeEmpty())
	}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "the garbage collector removes the cluster's instances and workloads")
	checkClaims(t, g, ns, claims, deleted)
}

// A Retain beamline is removed and added again under the same name: the same claims and Secret
// (same UIDs, same data), the released label gone, and the fleet exactly as expected.
func testBeamlineReadded(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-readd", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	gone := c.Spec.Instances[1].Name
	claims := dataClaims(t, g, ns, []string{gone})
	names := fleet.NamesOf(&tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-" + gone, Namespace: ns}})
	secret := &corev1.Secret{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: names.Secret}, secret)).To(Succeed())

	cl := getCluster(t, g, ns)
	all := cl.Spec.Instances
	cl.Spec.Instances = append(append([]tiledv1alpha1.ClusterInstance{}, all[:1]...), all[2:]...)
	g.Expect(env.Client.Update(ctxT(t), cl)).To(Succeed())
	g.Eventually(func() bool {
		err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-" + gone}, &tiledv1alpha1.TiledInstance{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(BeTrue())
	checkClaims(t, g, ns, claims, nil)

	cl = getCluster(t, g, ns)
	cl.Spec.Instances = all
	g.Expect(env.Client.Update(ctxT(t), cl)).To(Succeed())
	waitStampedOut(t, g, op, ns, fleetN)
	g.Eventually(func(g Gomega) {
		checkFleet(t, g, c)
		for name, uid := range claims[gone] {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, pvc)).To(Succeed())
			g.Expect(string(pvc.UID)).To(Equal(uid), "claim %s is not the same", name)
			g.Expect(pvc.Labels).NotTo(HaveKey(controllers.LabelReleased), "claim %s in use again", name)
		}
		s := &corev1.Secret{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: names.Secret}, s)).To(Succeed())
		g.Expect(s.UID).To(Equal(secret.UID))
		g.Expect(s.Data).To(Equal(secret.Data), "the Secret was regenerated")
		g.Expect(s.Labels).NotTo(HaveKey(controllers.LabelReleased))
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
