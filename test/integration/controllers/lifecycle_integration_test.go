package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/applier"
	objnames "github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// child names one object an instance owns (or uses, for its NFS PersistentVolume).
type child struct {
	obj       client.Object
	resource  string // as the traffic counter names it
	namespace string // "" for cluster-scoped
	name      string
}

func instanceChildren(ns string, n objnames.Objects) []child {
	return []child{
		{&corev1.ConfigMap{}, "configmaps", ns, n.ConfigMap},
		{&corev1.ConfigMap{}, "configmaps", ns, n.PostgresInit},
		{&corev1.Service{}, "services", ns, n.HeadlessService},
		{&corev1.Secret{}, "secrets", ns, n.Secret},
		{&corev1.Service{}, "services", ns, n.Tiled},
		{&corev1.Service{}, "services", ns, n.Postgres},
		{&appsv1.StatefulSet{}, "statefulsets", ns, n.Tiled},
		{&appsv1.StatefulSet{}, "statefulsets", ns, n.Postgres},
		{&corev1.PersistentVolumeClaim{}, "persistentvolumeclaims", ns, n.ReadOnlyClaimName("proposals")},
		{&corev1.PersistentVolume{}, "persistentvolumes", "", n.ReadOnlyVolumeName(ns, "proposals")},
	}
}

func uidOf(t *testing.T, c child) types.UID {
	o := c.obj.DeepCopyObject().(client.Object)
	if !exists(t, o, c.namespace, c.name) {
		return ""
	}
	return o.GetUID()
}

// TestDeletedChildrenComeBack deletes each kind of child of an instance, right after the operator
// created it (before any reconcile has seen it in the cache) and later, when all is quiet: each
// comes back, with one write.
func TestDeletedChildrenComeBack(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "children")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)

	// Later: one kind at a time, when the operator is quiet.
	for _, c := range instanceChildren(ns, fleet.NamesOf(getInstance(t, g, ns, "fleet-a"))) {
		uid := uidOf(t, c)
		g.Expect(uid).NotTo(BeEmpty(), "%s %s", c.resource, c.name)
		before := op.Traffic.Snapshot()
		o := c.obj.DeepCopyObject().(client.Object)
		g.Expect(exists(t, o, c.namespace, c.name)).To(BeTrue())
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok && len(pvc.Finalizers) > 0 {
			pvc.Finalizers = nil // no kubelet here to release the claim's protection
			g.Expect(env.Client.Update(ctxT(t), pvc)).To(Succeed())
		}
		if pv, ok := o.(*corev1.PersistentVolume); ok && len(pv.Finalizers) > 0 {
			pv.Finalizers = nil
			g.Expect(env.Client.Update(ctxT(t), pv)).To(Succeed())
		}
		g.Expect(env.Client.Delete(ctxT(t), o)).To(Succeed())
		g.Eventually(func() types.UID { return uidOf(t, c) }, time.Minute, 100*time.Millisecond).
			ShouldNot(Or(BeEmpty(), Equal(uid)), "%s %s was not recreated", c.resource, c.name)
		waitQuiet(t, op)
		d := op.Traffic.Snapshot().Sub(before)
		g.Expect(d[traffic.Key{Verb: traffic.VerbApply, Resource: c.resource}]).To(Equal(int64(1)),
			"one apply recreates %s %s:\n%s", c.resource, c.name, d)
	}

	// Right after creation: a new beamline's children are deleted as soon as they exist.
	c := getCluster(t, g, ns)
	c.Spec.Instances = append(c.Spec.Instances, tiledv1alpha1.ClusterInstance{Name: "b"})
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	var ti *tiledv1alpha1.TiledInstance
	g.Eventually(func(g Gomega) { ti = getInstance(t, g, ns, "fleet-b") }, time.Minute, 20*time.Millisecond).Should(Succeed())
	first := map[string]types.UID{}
	children := instanceChildren(ns, fleet.NamesOf(ti))
	g.Eventually(func() int {
		for _, c := range children {
			if _, done := first[c.resource+"/"+c.name]; done {
				continue
			}
			o := c.obj.DeepCopyObject().(client.Object)
			if !exists(t, o, c.namespace, c.name) {
				continue
			}
			first[c.resource+"/"+c.name] = o.GetUID()
			o.SetFinalizers(nil)
			_ = env.Client.Update(ctxT(t), o)
			_ = env.Client.Delete(ctxT(t), o)
		}
		return len(first)
	}, time.Minute, 5*time.Millisecond).Should(Equal(len(children)))
	for _, c := range children {
		g.Eventually(func() types.UID { return uidOf(t, c) }, time.Minute, 100*time.Millisecond).
			ShouldNot(Or(BeEmpty(), Equal(first[c.resource+"/"+c.name])), "%s %s deleted right after creation was not recreated", c.resource, c.name)
	}
}

// TestRestartWritesNothing stamps out a fleet, stops the operator and starts a new one (as after a
// crash or a change of leader): the new one sends no write and no read beyond its informers' lists,
// because every object carries the hash of the intent it holds.
func TestRestartWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "restart")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a", "b", "c")...)
	waitForStampOut(t, g, op, ns, "fleet", 3)
	sts := &appsv1.StatefulSet{}
	g.Expect(exists(t, sts, ns, fleet.NamesOf(getInstance(t, g, ns, "fleet-a")).Tiled)).To(BeTrue())
	g.Expect(sts.Annotations).To(HaveKey(applier.AnnotationIntent))
	op.stop()

	op2 := startOperator(t, ns)
	g.Expect(op2.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op2)
	after := op2.Traffic.Snapshot()
	t.Logf("after a restart and a full resync:\n%s", after)
	g.Expect(after.Writes()).To(BeZero(), "writes after a restart:\n%s", after)
	g.Expect(after.Sum(func(k traffic.Key) bool { return k.Verb == traffic.VerbGet })).To(BeZero(), "GETs after a restart:\n%s", after)

	// A child someone else edited while the operator was down is applied again, and only it.
	op2.stop()
	s := &appsv1.StatefulSet{}
	g.Expect(exists(t, s, ns, fleet.NamesOf(getInstance(t, g, ns, "fleet-b")).Tiled)).To(BeTrue())
	s.Spec.Template.Annotations["team"] = "edited"
	g.Expect(env.Client.Update(ctxT(t), s, client.FieldOwner("kubectl-edit"))).To(Succeed())
	op3 := startOperator(t, ns)
	g.Eventually(func(g Gomega) {
		g.Expect(exists(t, s, ns, s.Name)).To(BeTrue())
		g.Expect(s.Spec.Template.Annotations).To(HaveKeyWithValue("team", "a"))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	waitQuiet(t, op3)
	d := op3.Traffic.Snapshot()
	g.Expect(d[traffic.Key{Verb: traffic.VerbApply, Resource: "statefulsets"}]).To(Equal(int64(1)), "only the edited StatefulSet:\n%s", d)
}

// TestReaddedBeamlineFindsItsData removes a beamline (its claims are retained and labelled released)
// and adds it again under the same name: the same claims are used, and the label is gone.
func TestReaddedBeamlineFindsItsData(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "readd")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("keep", "x")...)
	waitForStampOut(t, g, op, ns, "fleet", 2)
	n := fleet.NamesOf(getInstance(t, g, ns, "fleet-x"))
	uids := map[string]types.UID{}
	for _, name := range []string{n.DataClaim, n.DatabaseClaim} {
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(exists(t, pvc, ns, name)).To(BeTrue())
		uids[name] = pvc.UID
	}
	secret := &corev1.Secret{}
	g.Expect(exists(t, secret, ns, n.Secret)).To(BeTrue())
	pv := n.ReadOnlyVolumeName(ns, "proposals")
	g.Expect(exists(t, &corev1.PersistentVolume{}, "", pv)).To(BeTrue())

	c := getCluster(t, g, ns)
	c.Spec.Instances = names("keep")
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-x")).To(BeFalse())
		g.Expect(exists(t, &corev1.PersistentVolume{}, "", pv)).To(BeFalse())
		for name := range uids {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(exists(t, pvc, ns, name)).To(BeTrue())
			g.Expect(pvc.Labels).To(HaveKeyWithValue(controllers.LabelReleased, "true"))
		}
	}, time.Minute, 100*time.Millisecond).Should(Succeed())

	c = getCluster(t, g, ns)
	c.Spec.Instances = names("keep", "x")
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(exists(t, &corev1.PersistentVolume{}, "", pv)).To(BeTrue(), "the NFS PersistentVolume comes back")
		for name, uid := range uids {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(exists(t, pvc, ns, name)).To(BeTrue())
			g.Expect(pvc.UID).To(Equal(uid), "claim %s is the same", name)
			g.Expect(pvc.Labels).NotTo(HaveKey(controllers.LabelReleased), "claim %s in use again", name)
			g.Expect(pvc.Labels).To(HaveKeyWithValue(tiledv1alpha1.LabelInstance, "x"), "the operator's own labels stay")
		}
		s := &corev1.Secret{}
		g.Expect(exists(t, s, ns, n.Secret)).To(BeTrue())
		g.Expect(s.UID).To(Equal(secret.UID), "the same Secret")
		g.Expect(s.Data).To(Equal(secret.Data), "the same passwords and API key")
		g.Expect(s.Labels).NotTo(HaveKey(controllers.LabelReleased))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
}

// TestAReleaseOutlivesTheRemovedInstancesLastReconcile: the cluster controller releases a removed
// beamline's claims and Secret just before it deletes the instance, and a reconcile of that instance
// can be under way then. That reconcile must leave the label (the instance's own UID is the one the
// release recorded); only another instance of the same name takes it back. The claims are labelled
// here as the release labels them, while the instance stays, and every instance is reconciled again.
func TestAReleaseOutlivesTheRemovedInstancesLastReconcile(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "release-race")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)
	release := func(kind, name string, from types.UID) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{
				"name": name, "namespace": ns,
				"labels":      map[string]any{controllers.LabelReleased: "true"},
				"annotations": map[string]any{controllers.AnnotationReleasedFrom: string(from)},
			},
		}}
		g.Expect(env.Client.Apply(ctxT(t), client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner(tiledv1alpha1.RetentionFieldOwner), client.ForceOwnership)).To(Succeed())
	}
	children := []struct{ kind, name string }{{"PersistentVolumeClaim", n.DataClaim}, {"PersistentVolumeClaim", n.DatabaseClaim}, {"Secret", n.Secret}}
	labelled := func() map[string]string {
		got := map[string]string{}
		for _, c := range children {
			var o client.Object = &corev1.PersistentVolumeClaim{}
			if c.kind == "Secret" {
				o = &corev1.Secret{}
			}
			g.Expect(exists(t, o, ns, c.name)).To(BeTrue())
			got[c.name] = o.GetLabels()[controllers.LabelReleased]
		}
		return got
	}

	// cached waits until the operator's cache shows every child released from the instance from:
	// a resync before that would decide from the old copies, and prove nothing.
	cached := func(from types.UID) {
		g.Eventually(func(g Gomega) {
			for _, c := range children {
				var o client.Object = &corev1.Secret{}
				if c.kind != "Secret" {
					m := &metav1.PartialObjectMetadata{}
					m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(c.kind))
					o = m
				}
				g.Expect(op.GetClient().Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: c.name}, o)).To(Succeed())
				g.Expect(o.GetAnnotations()).To(HaveKeyWithValue(controllers.AnnotationReleasedFrom, string(from)), "%s %s", c.kind, c.name)
			}
		}, 30*time.Second, 20*time.Millisecond).Should(Succeed())
	}

	for _, c := range children {
		release(c.kind, c.name, ti.UID)
	}
	cached(ti.UID)
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op)
	g.Expect(labelled()).To(HaveEach("true"), "the instance that released its claims and Secret took the label back")

	// Released by another instance of the name (the one removed before this one was added): this
	// instance uses them again, and the label goes. Each poll resyncs: the operator may decide
	// from a copy its cache holds from before this release.
	for _, c := range children {
		release(c.kind, c.name, "a-removed-instance")
	}
	g.Eventually(func() map[string]string {
		g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
		return labelled()
	}, time.Minute, 200*time.Millisecond).Should(HaveEach(""), "claims in use again keep the label")
}

// TestMembershipIsTheControllerReference: a cluster never adopts a TiledInstance of a name it wants
// that someone else made (it stalls naming both), and an instance wearing the operator's labels
// without a controlling cluster is refused by the instance controller and counted by no cluster.
func TestMembershipIsTheControllerReference(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "members")
	op := startOperator(t, ns)
	byHand := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-b"}}
	impostor := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-z", Labels: map[string]string{
		tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue, tiledv1alpha1.LabelCluster: "fleet", tiledv1alpha1.LabelInstance: "z",
	}}}
	createAll(t, g, byHand, impostor)
	smallFleet(t, g, ns, names("a", "b")...)

	g.Eventually(func(g Gomega) {
		c := getCluster(t, g, ns)
		st := meta.FindStatusCondition(c.Status.Conditions, controllers.ConditionStalled)
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Message).To(ContainSubstring("fleet-b (NameTaken: a TiledInstance of that name exists and has no controller (made by hand)"))
		g.Expect(c.Status.ReadyInstances+c.Status.UpdatedInstances).To(BeNumerically("<=", 2), "the impostor is not counted")
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	g.Expect(exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-a")).To(BeTrue(), "the other beamline goes on")
	b := getInstance(t, g, ns, "fleet-b")
	g.Expect(b.OwnerReferences).To(BeEmpty(), "the hand-made instance was adopted")

	condition(t, g, ns, "fleet-z", controllers.ConditionStalled, metav1.ConditionTrue, controllers.ReasonNotAMember, time.Minute,
		"no TiledCluster controls it")
	g.Expect(exists(t, &appsv1.StatefulSet{}, ns, fleet.NamesOf(impostor).Tiled)).To(BeFalse(), "something was rendered for the impostor")
	waitQuiet(t, op)
}

// TestAFailedDeleteTakesItsReleaseBack: the cluster's prune labels a removed beamline's claims and
// Secret released, then deletes its instance; when that delete fails (here a ValidatingAdmission
// Policy of the real API server refuses it), the instance stays and the release is taken back at
// once. Listed again before the delete is retried, the beamline's claims are not left labelled as
// released (the instance controller never removes a release its own instance made). Once the
// delete is allowed, the removal releases and deletes as usual.
func TestAFailedDeleteTakesItsReleaseBack(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "release-undo")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	ti := getInstance(t, g, ns, "fleet-a")
	n := fleet.NamesOf(ti)

	// The API server refuses to delete the instance.
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{tiledv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"tiledinstances"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "oldObject.metadata.namespace != '" + ns + "'", Message: "test: instances of this namespace are not deleted"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	g.Expect(env.Client.Create(ctxT(t), policy)).To(Succeed())
	g.Expect(env.Client.Create(ctxT(t), binding)).To(Succeed())
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), policy)
	})
	// The policy takes effect once the API server has loaded it: a dry-run delete of the instance
	// is refused.
	g.Eventually(func() string {
		err := env.Client.Delete(ctxT(t), ti.DeepCopy(), client.DryRunAll)
		if err == nil {
			return ""
		}
		return err.Error()
	}, 30*time.Second, 100*time.Millisecond).Should(ContainSubstring("not deleted"))

	claims := []string{n.DataClaim, n.DatabaseClaim}
	released := func() map[string]string {
		got := map[string]string{}
		for _, name := range claims {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(exists(t, pvc, ns, name)).To(BeTrue())
			got[name] = pvc.Labels[controllers.LabelReleased]
		}
		s := &corev1.Secret{}
		g.Expect(exists(t, s, ns, n.Secret)).To(BeTrue())
		got[n.Secret] = s.Labels[controllers.LabelReleased]
		return got
	}

	// Removed: the prune's delete is refused, again and again; the claims are never left released.
	since := time.Now()
	c := getCluster(t, g, ns)
	c.Spec.Instances = nil
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() int64 {
		return op.Traffic.Snapshot().Sum(func(k traffic.Key) bool {
			return k.Verb == traffic.VerbDelete && k.Resource == "tiledinstances"
		})
	}, 30*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 1), "the prune tries to delete the instance (and is refused)")
	g.Expect(exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-a")).To(BeTrue())
	// Each retry of the prune releases and, its delete refused, takes the release back: the claims
	// are labelled only between the two.
	g.Eventually(released, 10*time.Second, 100*time.Millisecond).Should(HaveEach(""), "a release whose delete failed was not taken back")
	t.Logf("the delete was refused and the release taken back within %s", time.Since(since).Round(time.Millisecond))

	// Listed again: the same instance serves on with its claims unreleased.
	c = getCluster(t, g, ns)
	c.Spec.Instances = names("a")
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	waitQuiet(t, op)
	g.Expect(getInstance(t, g, ns, "fleet-a").UID).To(Equal(ti.UID))
	g.Eventually(released, 10*time.Second, 100*time.Millisecond).Should(HaveEach(""))
	g.Consistently(released, 2*time.Second, 100*time.Millisecond).Should(HaveEach(""), "the beamline listed again, its claims stay unreleased")

	// The delete allowed: removed again, released and gone.
	g.Expect(env.Client.Delete(ctxT(t), binding)).To(Succeed())
	g.Expect(env.Client.Delete(ctxT(t), policy)).To(Succeed())
	c = getCluster(t, g, ns)
	c.Spec.Instances = nil
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() bool { return exists(t, &tiledv1alpha1.TiledInstance{}, ns, "fleet-a") }, time.Minute, 100*time.Millisecond).Should(BeFalse())
	g.Expect(released()).To(HaveEach("true"))
}
