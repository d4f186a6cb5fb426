package operator

import (
	"reflect"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
)

// childMeta is the metadata the controllers and the applier read from a cached child.
func childMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: "nsls2-bmm", Namespace: "nsls2", UID: "uid-1", ResourceVersion: "42", Generation: 3,
		Labels:      map[string]string{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue, "app.kubernetes.io/instance": "nsls2-bmm"},
		Annotations: map[string]string{applier.AnnotationIntent: "0123456789abcdef0123456789abcdef"},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "tiled.blueskyproject.io/v1alpha1", Kind: "TiledInstance", Name: "nsls2-bmm", UID: "owner", Controller: ptr.To(true),
		}},
		Finalizers: []string{"kubernetes.io/pvc-protection"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: tiledv1alpha1.FieldOwner, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)},
			{Manager: "ops-console", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{}}`)},
		},
	}
}

// TestTrimTransform: each child kind keeps its metadata (managed fields slimmed as the applier
// expects) and exactly the spec and status fields the controllers read; the Secret, read for its
// data, and kinds that are not children stay whole; trimming twice changes nothing.
func TestTrimTransform(t *testing.T) {
	slimMeta := func() metav1.ObjectMeta {
		m := childMeta()
		out, _ := applier.SlimManagedFields(tiledv1alpha1.FieldOwner)(&corev1.ConfigMap{ObjectMeta: m})
		slim := out.(*corev1.ConfigMap).ObjectMeta
		slim.Annotations = nil // the intent, its only annotation, is kept beside the cache
		return slim
	}
	nfs := &corev1.NFSVolumeSource{Server: "nfs.nsls2.bnl.gov", Path: "/nsls2/data/bmm/proposals", ReadOnly: true}
	claimRef := &corev1.ObjectReference{Namespace: "nsls2", Name: "nsls2-bmm-proposals"}
	stsStatus := appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1}
	secretData := map[string][]byte{"api-key": []byte("secret")}
	for _, tc := range []struct {
		name    string
		in, out func(metav1.ObjectMeta) any
	}{
		{"StatefulSet keeps replicas, its Tiled container's name and image, and status",
			func(m metav1.ObjectMeta) any {
				return &appsv1.StatefulSet{ObjectMeta: m, Spec: appsv1.StatefulSetSpec{
					Replicas: ptr.To(int32(2)), ServiceName: "nsls2-bmm",
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "metrics", Image: "exporter:1",
					}, {
						Name: "tiled", Image: "ghcr.io/bluesky/tiled:0.1.0", Command: []string{"tiled"}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
					}}}},
				}, Status: stsStatus}
			},
			func(m metav1.ObjectMeta) any {
				return &appsv1.StatefulSet{ObjectMeta: m, Spec: appsv1.StatefulSetSpec{
					Replicas: ptr.To(int32(2)),
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "tiled", Image: "ghcr.io/bluesky/tiled:0.1.0"}}}},
				}, Status: stsStatus}
			}},
		{"StatefulSet without a Tiled container keeps none",
			func(m metav1.ObjectMeta) any {
				return &appsv1.StatefulSet{ObjectMeta: m, Spec: appsv1.StatefulSetSpec{
					Replicas: ptr.To(int32(1)),
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}}},
				}, Status: stsStatus}
			},
			func(m metav1.ObjectMeta) any {
				return &appsv1.StatefulSet{ObjectMeta: m, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(1))}, Status: stsStatus}
			}},
		{"ConfigMap loses its data",
			func(m metav1.ObjectMeta) any {
				return &corev1.ConfigMap{ObjectMeta: m, Data: map[string]string{"config.yml": "trees: []"}, BinaryData: map[string][]byte{"x": {1}}}
			},
			func(m metav1.ObjectMeta) any { return &corev1.ConfigMap{ObjectMeta: m} }},
		{"Secret stays whole",
			func(m metav1.ObjectMeta) any {
				return &corev1.Secret{ObjectMeta: m, Data: secretData, Type: corev1.SecretTypeOpaque}
			},
			func(m metav1.ObjectMeta) any {
				return &corev1.Secret{ObjectMeta: m, Data: secretData, Type: corev1.SecretTypeOpaque}
			}},
		{"Service keeps metadata only",
			func(m metav1.ObjectMeta) any {
				return &corev1.Service{ObjectMeta: m, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 8000, TargetPort: intstr.FromInt32(8000)}}}}
			},
			func(m metav1.ObjectMeta) any { return &corev1.Service{ObjectMeta: m} }},
		{"PersistentVolumeClaim keeps metadata only",
			func(m metav1.ObjectMeta) any {
				return &corev1.PersistentVolumeClaim{ObjectMeta: m, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv"},
					Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
			},
			func(m metav1.ObjectMeta) any { return &corev1.PersistentVolumeClaim{ObjectMeta: m} }},
		{"Ingress keeps metadata only",
			func(m metav1.ObjectMeta) any {
				return &networkingv1.Ingress{ObjectMeta: m, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "bmm.nsls2.bnl.gov"}}}}
			},
			func(m metav1.ObjectMeta) any { return &networkingv1.Ingress{ObjectMeta: m} }},
		{"PodDisruptionBudget keeps metadata only",
			func(m metav1.ObjectMeta) any {
				return &policyv1.PodDisruptionBudget{ObjectMeta: m, Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
					Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1}}
			},
			func(m metav1.ObjectMeta) any { return &policyv1.PodDisruptionBudget{ObjectMeta: m} }},
		{"PersistentVolume keeps its claim and NFS source",
			func(m metav1.ObjectMeta) any {
				return &corev1.PersistentVolume{ObjectMeta: m, Spec: corev1.PersistentVolumeSpec{
					ClaimRef: claimRef, PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: nfs},
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, MountOptions: []string{"nfsvers=4.1"},
				}, Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}}
			},
			func(m metav1.ObjectMeta) any {
				return &corev1.PersistentVolume{ObjectMeta: m, Spec: corev1.PersistentVolumeSpec{
					ClaimRef: claimRef, PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: nfs},
				}}
			}},
		{"a TiledInstance stays whole",
			func(m metav1.ObjectMeta) any {
				return &tiledv1alpha1.TiledInstance{ObjectMeta: m, Provenance: map[string]string{"spec.storage.data.size": "default"}}
			},
			func(m metav1.ObjectMeta) any {
				return &tiledv1alpha1.TiledInstance{ObjectMeta: m, Provenance: map[string]string{"spec.storage.data.size": "default"}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			trim := trimTransform()
			got, err := trim(tc.in(childMeta()))
			g.Expect(err).NotTo(HaveOccurred())
			want := tc.out(slimMeta())
			g.Expect(equality.Semantic.DeepEqual(got, want)).To(BeTrue(), "got %+v\nwant %+v", got, want)
			again, err := trim(got)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(equality.Semantic.DeepEqual(again, want)).To(BeTrue(), "trimming twice changed the object")
		})
	}
}

// TestTrimTransformKeepsWhatTheApplierReads: the slimmed managed fields still carry the operator's
// fingerprint and the other writers, so the applier's token and ForeignManagers read the same.
func TestTrimTransformKeepsWhatTheApplierReads(t *testing.T) {
	g := NewWithT(t)
	a := applier.New(nil, tiledv1alpha1.FieldOwner, nil)
	full := &appsv1.StatefulSet{ObjectMeta: childMeta()}
	out, err := trimTransform()(full.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	trimmed := out.(*appsv1.StatefulSet)
	g.Expect(a.ForeignManagers(trimmed)).To(Equal(a.ForeignManagers(full)))
	g.Expect(a.ForeignManagers(trimmed)).To(Equal([]string{"ops-console"}))
	g.Expect(trimmed.ManagedFields[0].FieldsV1.GetRawString()).To(Equal(string(applier.Fingerprint(full.ManagedFields[0].FieldsV1.GetRawBytes()))))
	g.Expect(trimmed.ManagedFields[1].FieldsV1).To(BeNil())
	// The owner reference's flags point at the values every cached object shares.
	g.Expect(trimmed.OwnerReferences[0].Controller).To(BeIdenticalTo(&boolTrue))
	g.Expect(metav1.GetControllerOf(trimmed)).NotTo(BeNil())
	// The intent annotation, out of the map, reads the same from a copy of the cached object.
	g.Expect(trimmed.Annotations).To(BeNil())
	g.Expect(applier.IntentOf(trimmed.DeepCopy())).To(Equal(full.Annotations[applier.AnnotationIntent]))
	runtime.KeepAlive(trimmed)
}

// TestLabelMapsAreShared: cached objects with equal labels hold one map between them, objects with
// other labels another, the labels read the same as before, and the table forgets a map once the
// last object holding it is collected.
func TestLabelMapsAreShared(t *testing.T) {
	g := NewWithT(t)
	transform := trimTransform()
	labels := func(component string) map[string]string {
		return map[string]string{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue, "app.kubernetes.io/component": component,
			"app.kubernetes.io/instance": "nsls2-shared-labels"}
	}
	cached := func(name, component string) *corev1.Service {
		m := childMeta()
		m.Name, m.Labels = name, labels(component)
		out, err := transform(&corev1.Service{ObjectMeta: m})
		g.Expect(err).NotTo(HaveOccurred())
		return out.(*corev1.Service)
	}
	a, b, c := cached("a", "server"), cached("b", "server"), cached("c", "database")
	mapOf := func(s *corev1.Service) uintptr { return reflect.ValueOf(s.Labels).Pointer() }
	g.Expect(mapOf(a)).To(Equal(mapOf(b)), "equal labels share one map")
	g.Expect(mapOf(a)).NotTo(Equal(mapOf(c)), "other labels have their own")
	g.Expect(a.Labels).To(Equal(labels("server")))
	g.Expect(c.Labels).To(Equal(labels("database")))
}

// TestAnnotationMapsAreShared: cached objects whose annotations are equal but for their intent (kept
// beside the cache) hold one annotation map between them; the intents read back apart.
func TestAnnotationMapsAreShared(t *testing.T) {
	g := NewWithT(t)
	transform := trimTransform()
	cached := func(uid types.UID, intent string) *corev1.PersistentVolumeClaim {
		m := childMeta()
		m.UID = uid
		m.Annotations = map[string]string{applier.AnnotationIntent: intent, "pv.kubernetes.io/bind-completed": "yes"}
		out, err := transform(&corev1.PersistentVolumeClaim{ObjectMeta: m})
		g.Expect(err).NotTo(HaveOccurred())
		return out.(*corev1.PersistentVolumeClaim)
	}
	a := cached("uid-a", "0123456789abcdef0123456789abcdef")
	b := cached("uid-b", "fedcba9876543210fedcba9876543210")
	g.Expect(reflect.ValueOf(a.Annotations).Pointer()).To(Equal(reflect.ValueOf(b.Annotations).Pointer()))
	g.Expect(a.Annotations).To(Equal(map[string]string{"pv.kubernetes.io/bind-completed": "yes"}))
	g.Expect(applier.IntentOf(a)).To(Equal("0123456789abcdef0123456789abcdef"))
	g.Expect(applier.IntentOf(b)).To(Equal("fedcba9876543210fedcba9876543210"))
}

// TestSharedMapsFollowTheirHolders: a shared map stays in the table while an object holds it, and
// goes when the last one is collected.
func TestSharedMapsFollowTheirHolders(t *testing.T) {
	g := NewWithT(t)
	s := newSharedMaps()
	hold := func(v string) *metav1.ObjectMeta {
		m := &metav1.ObjectMeta{Labels: map[string]string{"k": v}}
		m.Labels = s.share(m, m.Labels)
		return m
	}
	a, b, c := hold("1"), hold("1"), hold("2")
	g.Expect(s.len()).To(Equal(2))
	collected := func() int {
		runtime.GC()
		return s.len()
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
	// b and c are not used again: the collector may free them.
	g.Eventually(collected).Should(Equal(1), "the map of c goes with c; a still holds the other")
	g.Consistently(collected, "200ms").Should(Equal(1))
	g.Expect(a.Labels).To(Equal(map[string]string{"k": "1"}))
	runtime.KeepAlive(a)
	// Nor a, now.
	g.Eventually(collected).Should(Equal(0))
}
