package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/traffic"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

// TestFaults runs every trial in order; the webhook trial is last because it installs
// cluster-wide webhook configurations (removed at its end).
func TestFaults(t *testing.T) {
	if !enabled {
		t.Skip("the fault-injection suite runs with `make test-faults` (TILED_FAULTS=1)")
	}
	t.Run("StopDuringStampOut", testStopDuringStampOut)
	trial(t, "APIServerRestartMidReconcile", testAPIServerRestart)
	trial(t, "ExternalEdits", testExternalEdits)
	trial(t, "ProfileDeletedInUse", testProfileDeleted)
	trial(t, "ProfileBecomesConflicting", testProfileConflict)
	trial(t, "DatabaseSecretDisappears", testDatabaseSecret)
	trial(t, "RetentionBeamlinesRemoved", testRetentionBeamlines)
	trial(t, "RetentionClusterDeleted", testRetentionCluster)
	trial(t, "RestartWritesNothing", testRestartWritesNothing)
	trial(t, "ChildrenDeleted", testChildrenDeleted)
	trial(t, "BeamlineRemovedAndReadded", testBeamlineReadded)
	trial(t, "CachesFreedWithTheFleet", testCachesFreed)
	trial(t, "WebhookServerDownThenUp", testWebhookDown)
}

// The manager is stopped at a random point of the stamp-out (after a random number of writes,
// seeded), then a new manager starts: it converges to exactly the expected objects, with no
// duplicate or orphan, and no Secret that existed when the first manager stopped is regenerated.
func testStopDuringStampOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7f4a7c15))
	for i := 0; i < trials; i++ {
		frac := rng.Float64()
		trial(t, fmt.Sprintf("trial-%02d", i+1), func(t *testing.T, g Gomega) {
			ns, _ := newFleet(t, g, "faults-stop", nil)
			c := defaultCluster(fleetN)(ns)
			expected := len(expectedKeys(g, c))
			stopAt := int64(1 + frac*float64(expected-1))
			op := startOperator(t, g, ns, nil)
			g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
			g.Expect(fleet.Poll(ctxT(t), 2*time.Millisecond, 5*time.Minute, "writes before the stop", func(context.Context) (bool, error) {
				return op.Traffic.Snapshot().Writes() >= stopAt, nil
			})).To(Succeed())
			_ = op.Stop()
			written := op.Traffic.Snapshot().Writes()
			t.Logf("stopped after %d writes (aimed at %d of about %d objects)", written, stopAt, expected)
			objs, err := fleet.Objects(ctxT(t), env.Client, ns)
			g.Expect(err).NotTo(HaveOccurred())
			before := secretData(objs)

			op2 := startOperator(t, g, ns, nil)
			waitStampedOut(t, g, op2, ns, fleetN)
			after := checkFleet(t, g, c)
			afterSecrets := secretData(after)
			for k, data := range before {
				g.Expect(afterSecrets).To(HaveKey(k))
				g.Expect(afterSecrets[k]).To(Equal(data), "%s was regenerated after the restart", k)
			}
			t.Logf("%d objects, %d Secrets existed at the stop and kept their data", len(after), len(before))
		})
	}
}

// The apiserver is restarted (etcd kept) while the operator stamps out: the same manager, never
// restarted, converges to exactly the expected objects, and a full resync afterwards writes nothing.
func testAPIServerRestart(t *testing.T, g Gomega) {
	ns, _ := newFleet(t, g, "faults-apiserver", nil)
	c := defaultCluster(fleetN)(ns)
	expected := len(expectedKeys(g, c))
	op := startOperator(t, g, ns, nil)
	g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
	g.Expect(fleet.Poll(ctxT(t), 5*time.Millisecond, 5*time.Minute, "a third of the stamp-out", func(context.Context) (bool, error) {
		return op.Traffic.Snapshot().Writes() >= int64(expected/3), nil
	})).To(Succeed())
	at := op.Traffic.Snapshot().Writes()
	g.Expect(env.RestartAPIServer(ctxT(t), 3*time.Second)).To(Succeed())
	t.Logf("apiserver restarted after %d writes of about %d", at, expected)
	select {
	case <-op.Done():
		t.Fatal("the manager stopped when the apiserver went away")
	default:
	}
	waitStampedOut(t, g, op, ns, fleetN)
	objs := checkFleet(t, g, c)
	rvs := fleet.ResourceVersions(objs)
	before := op.Traffic.Snapshot()
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	time.Sleep(3 * time.Second)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	g.Expect(op.Traffic.Snapshot().Sub(before).Writes()).To(BeZero(), "writes on a resync after recovering")
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty())
	select {
	case <-op.Done():
		t.Fatal("the manager stopped")
	default:
	}
}

// Another field manager edits an operator-owned field (replicas) and a field the operator does not
// set (an annotation) of a StatefulSet: the first is restored, the second left alone, and the
// instance reports it (condition ExternalEdits, reason FieldsManagedElsewhere).
func testExternalEdits(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-edits", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	name := "nsls2-bmm"
	s := &appsv1.StatefulSet{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	replicas := ptr.Deref(s.Spec.Replicas, 1)
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.Replicas = ptr.To(replicas + 4)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations["nsls2.bnl.gov/on-call"] = "controls-group"
	g.Expect(env.Client.Patch(ctxT(t), s, patch, client.FieldOwner("ops-console"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		s := &appsv1.StatefulSet{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		g.Expect(ptr.Deref(s.Spec.Replicas, 1)).To(Equal(replicas), "the operator-owned field is restored")
		g.Expect(s.Annotations).To(HaveKeyWithValue("nsls2.bnl.gov/on-call", "controls-group"), "the other manager's field is left alone")
		ti := &tiledv1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, ti)).To(Succeed())
		cond := condition(ti.Status.Conditions, controllers.ConditionExternalEdits)
		g.Expect(cond).NotTo(BeNil(), "no ExternalEdits condition")
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(controllers.ReasonFieldsManaged))
		g.Expect(cond.Message).To(ContainSubstring("StatefulSet/" + name + " has fields managed by ops-console"))
	}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	// It stays restored, and nothing else moved.
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	g.Expect(ptr.Deref(s.Spec.Replicas, 1)).To(Equal(replicas))
	checkFleet(t, g, c)
}

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
		nm := render.NamesFor(ti)
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

// The webhook server (the operator's manager) goes down, then comes back. While down, as
// docs/webhooks.md says: TiledInstance webhooks fail open (a terse standalone instance is stored as
// written), TiledProfile and TiledCluster create/update fail closed (refused, naming the webhook),
// deletes are never blocked, the fleet's objects are untouched. Once up: the refused changes go
// through, the terse instance is expanded and reconciled by the controller, the fleet is intact.
func testWebhookDown(t *testing.T, g Gomega) {
	defer func() {
		ctx := context.Background()
		_ = env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhooks.MutatingConfigurationName, metav1.DeleteOptions{})
		_ = env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, webhooks.ValidatingConfigurationName, metav1.DeleteOptions{})
	}()
	port := freePort(g)
	hooks := func() *webhooks.Options {
		return &webhooks.Options{Host: "127.0.0.1", Port: port, CertDir: filepath.Join(t.TempDir(), "certs"), SelfSigned: true,
			Certs: webhooks.CertOptions{URL: fmt.Sprintf("https://127.0.0.1:%d", port), Validity: time.Hour}}
	}
	ns, _ := newFleet(t, g, "faults-webhooks", nil)
	op := startOperator(t, g, ns, hooks())
	waitWebhooks(t, g, ns)
	c := defaultCluster(fleetN)(ns)
	g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
	waitStampedOut(t, g, op, ns, fleetN)
	rvs := fleet.ResourceVersions(checkFleet(t, g, c))
	spare := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spare", Labels: map[string]string{"facility": "spare"}},
		Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"spare": "yes"}}}}}
	g.Expect(env.Client.Create(ctxT(t), spare)).To(Succeed())

	_ = op.Stop()
	g.Eventually(func() error {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}).WithTimeout(time.Minute).Should(HaveOccurred(), "the webhook server still answers")

	// TiledInstance: fail open.
	terse := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "standalone"},
		Spec: tiledv1alpha1.TiledInstanceSpec{ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": fleet.Facility}}}}
	g.Expect(env.Client.Create(ctxT(t), terse)).To(Succeed(), "a TiledInstance is refused while the webhooks are down")
	g.Expect(terse.Provenance).To(BeEmpty(), "the instance was expanded, so a webhook answered")
	// TiledProfile and TiledCluster create/update: fail closed.
	extra := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-late", Labels: map[string]string{"facility": "other"}},
		Spec: tiledv1alpha1.TiledProfileSpec{Priority: 20, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"nsls2.bnl.gov/late": "yes"}}}}}
	err := env.Client.Create(ctxT(t), extra.DeepCopy())
	g.Expect(err).To(HaveOccurred(), "a TiledProfile was accepted while the webhooks are down")
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledprofile.tiled.blueskyproject.io"`))
	cl := getCluster(t, g, ns)
	cl.Spec.Instances = cl.Spec.Instances[:len(cl.Spec.Instances)-1]
	err = env.Client.Update(ctxT(t), cl)
	g.Expect(err).To(HaveOccurred(), "a TiledCluster update was accepted while the webhooks are down")
	g.Expect(err.Error()).To(ContainSubstring(`failed calling webhook "vtiledcluster.tiled.blueskyproject.io"`))
	// Deletes are never blocked (the profile delete webhook only warns, and fails open).
	g.Expect(env.Client.Delete(ctxT(t), spare)).To(Succeed(), "a TiledProfile delete was blocked while the webhooks are down")
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	delete(objs, "TiledInstance/standalone")
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty(), "the fleet changed while the operator was down")

	// Up again.
	op2 := startOperator(t, g, ns, hooks())
	waitWebhooks(t, g, ns)
	g.Expect(env.Client.Create(ctxT(t), extra.DeepCopy())).To(Succeed(), "the refused profile is accepted once the webhooks are back")
	cl = getCluster(t, g, ns)
	cl.Spec.Instances = cl.Spec.Instances[:len(cl.Spec.Instances)-1]
	g.Expect(env.Client.Update(ctxT(t), cl)).To(Succeed(), "the refused cluster update is accepted once the webhooks are back")
	// The terse instance written while the webhooks were down is expanded by the controller.
	g.Eventually(func(g Gomega) {
		ti := &tiledv1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "standalone"}, ti)).To(Succeed())
		g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation))
		g.Expect(condition(ti.Status.Conditions, controllers.ConditionStalled)).To(BeNil())
		s := &appsv1.StatefulSet{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: render.NamesFor(ti).Tiled}, s)).To(Succeed())
		g.Expect(s.Spec.Template.Spec.Containers).NotTo(BeEmpty())
	}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	waitStampedOut(t, g, op2, ns, fleetN-1)
	cl = getCluster(t, g, ns)
	removed := c.Spec.Instances[len(c.Spec.Instances)-1].Name
	checkFleet(t, g, cl, removed)
	// The removed beamline's data (Retain, the default) is still there.
	gone := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-" + removed}}
	for _, claim := range []string{render.NamesFor(gone).DataClaim, render.NamesFor(gone).DatabaseClaim} {
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: claim}, &corev1.PersistentVolumeClaim{})).To(Succeed(), "retained claim %s", claim)
	}
}

// waitWebhooks waits until the API server calls the webhooks: a dry-run terse instance comes back
// expanded.
func waitWebhooks(t *testing.T, g Gomega, ns string) {
	g.Eventually(func(g Gomega) {
		probe := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
		g.Expect(env.Client.Create(ctxT(t), probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Provenance).NotTo(BeEmpty())
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

func freePort(g Gomega) int {
	port, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	return port
}

// The fleet is stamped out, the manager stops and a new one starts (a crash, a change of leader):
// the new one sends no write at all, a full resync included.
func testRestartWritesNothing(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-restart", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	objs := checkFleet(t, g, c)
	rvs := fleet.ResourceVersions(objs)
	_ = op.Stop()
	op2 := startOperator(t, g, ns, nil)
	g.Expect(op2.ResyncAll(ctxT(t))).To(Succeed())
	time.Sleep(3 * time.Second)
	g.Expect(fleet.WaitQuiet(ctxT(t), op2.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	all := op2.Traffic.Snapshot()
	t.Logf("a new manager over %d objects: %d writes, %d requests in all", len(objs), all.Writes(), all.Total())
	g.Expect(all.Writes()).To(BeZero(), "writes by a new manager over a fleet already in place:\n%s", all)
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Changed(rvs, fleet.ResourceVersions(objs))).To(BeEmpty())
}

// Children of random instances (seeded) are deleted, some right after the operator created them
// and some once all is quiet: each comes back, and the fleet is exactly as expected again.
func testChildrenDeleted(t *testing.T, g Gomega) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x2545f491))
	ns, _ := newFleet(t, g, "faults-children", nil)
	c := defaultCluster(fleetN)(ns)
	op := startOperator(t, g, ns, nil)
	g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
	deleteSome := func(when string) int {
		objs, err := fleet.Objects(ctxT(t), env.Client, ns)
		g.Expect(err).NotTo(HaveOccurred())
		n := 0
		for k, o := range objs {
			if strings.HasPrefix(k, "TiledInstance/") || rng.IntN(4) != 0 {
				continue
			}
			// Claims and volumes carry protection finalizers; kube-controller-manager (running here)
			// lifts them, as no pod uses them.
			if err := env.Client.Delete(ctxT(t), o); err == nil {
				n++
			}
		}
		t.Logf("deleted %d children %s", n, when)
		return n
	}
	// Early: as soon as about a third of the stamp-out is written.
	g.Expect(fleet.Poll(ctxT(t), 2*time.Millisecond, 5*time.Minute, "a third of the stamp-out", func(context.Context) (bool, error) {
		return op.Traffic.Snapshot().Writes() >= int64(len(expectedKeys(g, c))/3), nil
	})).To(Succeed())
	deleteSome("during the stamp-out")
	waitStampedOut(t, g, op, ns, fleetN)
	g.Eventually(func(g Gomega) { checkFleet(t, g, c) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	// Late: when all is quiet.
	before := op.Traffic.Snapshot()
	n := deleteSome("when quiet")
	g.Eventually(func(g Gomega) { checkFleet(t, g, c) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	d := op.Traffic.Snapshot().Sub(before)
	objectWrites := d.Sum(func(k traffic.Key) bool {
		return k.IsWrite() && !strings.HasSuffix(k.Resource, "/status") && k.Resource != "events"
	})
	t.Logf("%d children deleted when quiet came back with %d object writes", n, objectWrites)
	g.Expect(objectWrites).To(BeNumerically("==", n), "one write per deleted child:\n%s", d)
}

// A Retain beamline is removed and added again under the same name: the same claims and Secret
// (same UIDs, same data), the released label gone, and the fleet exactly as expected.
func testBeamlineReadded(t *testing.T, g Gomega) {
	ns, c := newFleet(t, g, "faults-readd", defaultCluster(fleetN))
	op := startOperator(t, g, ns, nil)
	waitStampedOut(t, g, op, ns, fleetN)
	gone := c.Spec.Instances[1].Name
	claims := dataClaims(t, g, ns, []string{gone})
	names := render.NamesFor(&tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: "nsls2-" + gone, Namespace: ns}})
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

// A fleet of cacheN beamlines is created and deleted three times under one manager: what the
// applier remembers returns to where it started each time, and the heap (this process holds the
// manager) does not grow from one round to the next.
func testCachesFreed(t *testing.T, g Gomega) {
	const rounds = 3
	n := envInt("TILED_FAULTS_CACHE_N", 300)
	ns, _ := newFleet(t, g, "faults-caches", nil)
	op := startOperator(t, g, ns, nil)
	g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, time.Minute)).To(Succeed())
	base := op.Applier.Len()
	heap := make([]uint64, 0, rounds)
	for round := 1; round <= rounds; round++ {
		c := defaultCluster(n)(ns)
		g.Expect(env.Client.Create(ctxT(t), c)).To(Succeed())
		waitStampedOut(t, g, op, ns, n)
		full := op.Applier.Len()
		g.Expect(env.Client.Delete(ctxT(t), getCluster(t, g, ns), client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		g.Eventually(func(g Gomega) {
			var tis tiledv1alpha1.TiledInstanceList
			g.Expect(op.GetClient().List(ctxT(t), &tis, client.InNamespace(ns))).To(Succeed())
			g.Expect(tis.Items).To(BeEmpty())
			g.Expect(op.Applier.Len()).To(BeNumerically("<=", base), "applier records left")
		}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
		g.Expect(fleet.WaitQuiet(ctxT(t), op.Traffic, 2*time.Second, 2*time.Minute)).To(Succeed())
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = append(heap, ms.HeapAlloc)
		t.Logf("round %d: %d beamlines; applier records %d with the fleet, %d after (%d before any); heap after %.1f MiB",
			round, n, full, op.Applier.Len(), base, float64(ms.HeapAlloc)/(1<<20))
	}
	// Flat: the last round ends within 20 % (plus 8 MiB of noise) of the first.
	g.Expect(float64(heap[rounds-1])).To(BeNumerically("<=", 1.2*float64(heap[0])+8*(1<<20)), "heap grows round after round: %v", heap)
}
