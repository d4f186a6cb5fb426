package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
)

// TestRefusedSettingsStall: what the webhooks refuse at admission is refused by the controllers too,
// for objects stored while the webhooks were not there (their failure policy, an install without
// them): an NFS export no profile allows, or a value an expression computes that no child could
// hold, leaves the cluster or the standalone instance Stalled, naming the field, within seconds; no
// TiledInstance, claim or PersistentVolume is made for it.
func TestRefusedSettingsStall(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "refused")
	op := startOperator(t, ns)
	smallFleet(t, g, ns, names("a")...)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	hosts := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hosts", Labels: map[string]string{"facility": "test"}},
		Spec: tiledv1alpha1.TiledProfileSpec{Priority: 2, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Expose: &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{Enabled: ptr.To(true),
				HostExpression: "('host' in instance.labels ? instance.labels['host'] : instance.name) + '.example.org'"}},
		}},
	}
	createAll(t, g, hosts)

	stalled := func(obj client.Object, name, reason string, contains ...string) {
		t.Helper()
		start := time.Now()
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
			var conds []metav1.Condition
			switch o := obj.(type) {
			case *tiledv1alpha1.TiledCluster:
				conds = o.Status.Conditions
			case *tiledv1alpha1.TiledInstance:
				conds = o.Status.Conditions
			}
			s := meta.FindStatusCondition(conds, controllers.ConditionStalled)
			g.Expect(s).NotTo(BeNil())
			g.Expect(s.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(s.Reason).To(Equal(reason))
			for _, w := range contains {
				g.Expect(s.Message).To(ContainSubstring(w))
			}
		}, time.Minute, 100*time.Millisecond).Should(Succeed())
		t.Logf("%T %s Stalled (%s) after %v", obj, name, reason, time.Since(start).Round(10*time.Millisecond))
	}
	cluster := func(name string, instance tiledv1alpha1.ClusterInstance) *tiledv1alpha1.TiledCluster {
		return &tiledv1alpha1.TiledCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: tiledv1alpha1.TiledClusterSpec{
				ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
				Instances:       []tiledv1alpha1.ClusterInstance{instance},
			},
		}
	}
	evil := &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{NFS: &tiledv1alpha1.NFSVolumeSource{Server: "evil.example.org", Path: "/export"}}}

	// A cluster's override naming an NFS export no profile allows.
	createAll(t, g, cluster("nfs", tiledv1alpha1.ClusterInstance{Name: "x", Labels: map[string]string{"host": "x"},
		Overrides: &tiledv1alpha1.InstanceTemplate{Storage: evil}}))
	stalled(&tiledv1alpha1.TiledCluster{}, "nfs", controllers.ReasonNotAllowed,
		"spec.storage.data.nfs", "instance/x/overrides sets NFS export evil.example.org:/export")

	// A standalone instance doing the same.
	createAll(t, g, &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alone", Labels: map[string]string{"host": "alone"}},
		Spec: tiledv1alpha1.TiledInstanceSpec{
			ProfileSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
			InstanceTemplate: tiledv1alpha1.InstanceTemplate{Storage: evil},
		},
	})
	stalled(&tiledv1alpha1.TiledInstance{}, "alone", controllers.ReasonNotAllowed, "spec.storage.data.nfs", "evil.example.org:/export")

	// A profile's expression computing, from a beamline's label, a host no Ingress may have.
	createAll(t, g, cluster("hostile", tiledv1alpha1.ClusterInstance{Name: "y", Labels: map[string]string{"host": "Bad_Host"}}))
	stalled(&tiledv1alpha1.TiledCluster{}, "hostile", controllers.ReasonInvalidField,
		"spec.expose.ingress.host", "Bad_Host.example.org", "profile/hosts@1 (expression)", "instance y")

	// A standalone instance's own expression computing a relative NFS path.
	createAll(t, g, &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "relative", Labels: map[string]string{"host": "relative"}},
		Spec: tiledv1alpha1.TiledInstanceSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}},
			InstanceTemplate: tiledv1alpha1.InstanceTemplate{Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{
				NFS: &tiledv1alpha1.NFSVolumeSource{Server: "nfs.example.org", PathExpression: "'data/' + instance.name"}}}},
		},
	})
	stalled(&tiledv1alpha1.TiledInstance{}, "relative", controllers.ReasonInvalidField, "spec.storage.data.nfs.path", "data/relative", "must be an absolute path")

	// Nothing was made for them: no TiledInstance for the clusters, no volume to those exports.
	waitQuiet(t, op)
	for _, name := range []string{"nfs-x", "hostile-y"} {
		g.Expect(exists(t, &tiledv1alpha1.TiledInstance{}, ns, name)).To(BeFalse(), name)
	}
	var pvs corev1.PersistentVolumeList
	g.Expect(env.Client.List(ctxT(t), &pvs)).To(Succeed())
	for _, pv := range pvs.Items {
		if nfs := pv.Spec.NFS; nfs != nil {
			g.Expect(nfs.Server).NotTo(Equal("evil.example.org"), pv.Name)
			g.Expect(nfs.Path).NotTo(HavePrefix("data/"), pv.Name)
		}
	}
	var claims corev1.PersistentVolumeClaimList
	g.Expect(env.Client.List(ctxT(t), &claims, client.InNamespace(ns))).To(Succeed())
	for _, c := range claims.Items {
		g.Expect(c.Labels[tiledv1alpha1.LabelInstance]).NotTo(BeElementOf("alone", "relative"), c.Name)
	}
}
