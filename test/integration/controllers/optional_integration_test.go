package controllers_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// TestOptionalObjects: a ServiceMonitor when its CRD exists and monitoring asks for it, a
// PodDisruptionBudget when replicas > 1, an Ingress when enabled — and each is pruned when no longer
// wanted.
func TestOptionalObjects(t *testing.T) {
	g := NewWithT(t)
	installServiceMonitorCRD(t, g)

	ns := newNamespace(t, g, "optional")
	op := startOperator(t, ns) // after the CRD: the operator looks for it at start
	withAll := tiledv1alpha1.ClusterInstance{Name: "a", Overrides: &tiledv1alpha1.InstanceTemplate{
		Tiled:      &tiledv1alpha1.TiledServerSpec{Replicas: ptr.To[int32](2)},
		Storage:    &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}},
		Monitoring: &tiledv1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true)},
		Expose:     &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{Enabled: ptr.To(true), Host: "a.example.org"}},
	}}
	smallFleet(t, g, ns, withAll)
	waitForStampOut(t, g, op, ns, "fleet", 1)
	n := fleet.NamesOf(getInstance(t, g, ns, "fleet-a"))
	sm := &unstructured.Unstructured{}
	sm.SetGroupVersionKind(schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"})
	g.Expect(exists(t, sm, ns, n.Tiled)).To(BeTrue(), "ServiceMonitor")
	g.Expect(exists(t, &policyv1.PodDisruptionBudget{}, ns, n.Tiled)).To(BeTrue(), "PodDisruptionBudget")
	g.Expect(exists(t, &networkingv1.Ingress{}, ns, n.Tiled)).To(BeTrue(), "Ingress")

	// No longer wanted: pruned (the claim keeps its access modes, which cannot change).
	c := getCluster(t, g, ns)
	c.Spec.Instances[0].Overrides = &tiledv1alpha1.InstanceTemplate{
		Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}},
	}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func() []string {
		var left []string
		if exists(t, sm.DeepCopy(), ns, n.Tiled) {
			left = append(left, "ServiceMonitor")
		}
		if exists(t, &policyv1.PodDisruptionBudget{}, ns, n.Tiled) {
			left = append(left, "PodDisruptionBudget")
		}
		if exists(t, &networkingv1.Ingress{}, ns, n.Tiled) {
			left = append(left, "Ingress")
		}
		return left
	}, time.Minute, 250*time.Millisecond).Should(BeEmpty())

	// A host without enabled: no Ingress, and the instance says why (decided: only enabled: true
	// creates one, so a profile can give every beamline a host and let each opt in).
	c = getCluster(t, g, ns)
	c.Spec.Instances[0].Overrides = &tiledv1alpha1.InstanceTemplate{
		Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}},
		Expose:  &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{ClassName: "nginx", HostExpression: "instance.name + '.example.org'"}},
	}
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		ic := meta.FindStatusCondition(getInstance(t, g, ns, "fleet-a").Status.Conditions, controllers.ConditionIngressEnabled)
		g.Expect(ic).NotTo(BeNil())
		g.Expect(ic.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ic.Reason).To(Equal(controllers.ReasonHostWithoutEnabled))
		g.Expect(ic.Message).To(ContainSubstring("set enabled: true"))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(exists(t, &networkingv1.Ingress{}, ns, n.Tiled)).To(BeFalse())
	c = getCluster(t, g, ns)
	c.Spec.Instances[0].Overrides.Expose.Ingress.Enabled = ptr.To(true)
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(exists(t, &networkingv1.Ingress{}, ns, n.Tiled)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(getInstance(t, g, ns, "fleet-a").Status.Conditions, controllers.ConditionIngressEnabled)).To(BeNil())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())

	// A change the API server refuses on an existing object (a claim's access modes are immutable):
	// the instance is Stalled with the API server's reason, and the operator does not retry in a loop.
	c = getCluster(t, g, ns)
	c.Spec.Instances[0].Overrides = nil
	g.Expect(env.Client.Update(ctxT(t), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := meta.FindStatusCondition(getInstance(t, g, ns, "fleet-a").Status.Conditions, controllers.ConditionStalled)
		g.Expect(s).NotTo(BeNil())
		g.Expect(s.Reason).To(Equal(controllers.ReasonChildRefused))
		g.Expect(s.Message).To(And(ContainSubstring("PersistentVolumeClaim/"+ns+"/"+n.DataClaim), ContainSubstring("immutable")))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	before := op.Traffic.Snapshot()
	time.Sleep(5 * time.Second)
	g.Expect(op.Traffic.Snapshot().Sub(before).Total()).To(BeZero(), "the operator retries a refused change")
}

// installServiceMonitorCRD installs prometheus-operator's ServiceMonitor CRD (testdata) if it is not
// there yet, and waits until it is served. It stays for the rest of the package's tests.
func installServiceMonitorCRD(t *testing.T, g Gomega) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "servicemonitor-crd.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(yaml.Unmarshal(data, crd)).To(Succeed())
	if err := env.Client.Create(ctxT(t), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	g.Expect(env.WaitForResource(ctxT(t), schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"})).To(Succeed())
}
