package operator

import (
	"crypto/sha256"
	"runtime"
	"slices"
	"strconv"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/dedupe"
	"github.com/bluesky/tiled-operator/controllers/intern"
)

// Cache transforms of the child kinds. The informer caches hold one copy of every object the
// operator manages, and at a thousand instances that is most of the manager's memory; each kind
// keeps only what the controllers read from the cache, so that the rest is garbage as soon as the
// object is decoded:
//
//   - every kind keeps its whole metadata (name, namespace, uid, resourceVersion, generation,
//     labels, annotations, ownerReferences,
//     deletionTimestamp, finalizers) and its managedFields slimmed by applier.SlimManagedFields
//     (managers, and a fingerprint of the operator's own field set): the applier decides from
//     those whether an intent is already applied, the prune and retention paths from the owner
//     references and labels, the ExternalEdits condition from the managers; the applier's
//     tiled.blueskyproject.io/intent annotation alone is moved out of the annotations into a table
//     beside the cache (applier.StripIntent: its value differs on every object, and a map of one
//     entry costs some 300 bytes), where applier.IntentOf reads it;
//   - StatefulSet: spec.replicas, the name and image of the Tiled container, and the whole status
//     (readiness: observedGeneration, readyReplicas, updatedReplicas); the rest of the pod template
//     and the claim templates are dropped;
//   - ConfigMap, Service, PersistentVolumeClaim, Ingress, PodDisruptionBudget: watched as metadata
//     only (controllers.ChildKinds), so the API server sends no content; were one read typed, its
//     content would be dropped here all the same (a ConfigMap its data, the others spec and status);
//   - TiledInstance: kept whole, but the parts of its spec equal to another cached instance's
//     (pointers, maps, slices) are that instance's (package dedupe);
//   - Secret: kept whole — the instance controller reads its data, so that generated keys and
//     passwords are never generated twice;
//   - PersistentVolume (the NFS volumes): spec.claimRef and spec.nfs (the cluster controller deletes
//     a removed instance's NFS volumes, and maps a deleted volume to its instance, by them).
//
// The trimmed objects are never written back: every write is a server-side apply of a rendered
// intent, and deletes carry only the UID.
func trimTransform() toolscache.TransformFunc {
	slim := applier.SlimManagedFields(tiledv1alpha1.FieldOwner)
	return func(in any) (any, error) {
		in, err := slim(in)
		if err != nil {
			return in, err
		}
		in = trimObject(in)
		internStrings(in)
		return in, nil
	}
}

// internStrings makes the cached objects share one copy of the strings they repeat: label and
// annotation keys and values, owner references, managers, finalizers, and a TiledInstance's
// provenance (every instance of a fleet names the same fields and profiles). Decoding gives each
// object its own copies; at a thousand instances they are megabytes of the same few hundred strings.
func internStrings(obj any) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	o.SetNamespace(intern.String(o.GetNamespace()))
	if m, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		if om, ok := m.GetObjectMeta().(*metav1.ObjectMeta); ok {
			om.Labels = labelSets.share(om, om.Labels)
			// The intent annotation differs on every object: kept beside the object, not in a map
			// of its own (applier.IntentOf reads it back).
			applier.StripIntent(om)
			// What is left is mostly the same on every instance's object of a kind (a retention
			// policy, kube-controller-manager's binding marks on claims and volumes): shared too.
			om.Annotations = annotationSets.share(om, om.Annotations)
		}
	} else {
		o.SetLabels(internMap(o.GetLabels()))
		o.SetAnnotations(internMap(o.GetAnnotations()))
	}
	refs := o.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = intern.String(refs[i].APIVersion), intern.String(refs[i].Kind)
		// The children of one instance name the same owner.
		refs[i].Name, refs[i].UID = intern.String(refs[i].Name), types.UID(intern.String(string(refs[i].UID)))
		// Decoding allocates each flag on its own (8 bytes, twice per reference).
		refs[i].Controller, refs[i].BlockOwnerDeletion = sharedBool(refs[i].Controller), sharedBool(refs[i].BlockOwnerDeletion)
	}
	mf := o.GetManagedFields()
	for i := range mf {
		mf[i].Manager, mf[i].APIVersion = intern.String(mf[i].Manager), intern.String(mf[i].APIVersion)
		mf[i].FieldsType, mf[i].Subresource = intern.String(mf[i].FieldsType), intern.String(mf[i].Subresource)
		mf[i].Operation = metav1.ManagedFieldsOperationType(intern.String(string(mf[i].Operation)))
	}
	fin := o.GetFinalizers()
	for i := range fin {
		fin[i] = intern.String(fin[i])
	}
	if ti, ok := obj.(*tiledv1alpha1.TiledInstance); ok {
		// Instances of the same profiles and overrides have the same provenance.
		ti.Provenance = provenanceSets.share(&ti.ObjectMeta, ti.Provenance)
		// Most of every instance's spec equals every other's: one copy of each part (package dedupe).
		instanceParts.Share(&ti.Spec)
	}
}

// instanceParts holds the parts of the cached TiledInstances' specs.
var instanceParts = dedupe.New()

// sharedBool is a pointer to one true or one false that every cached object shares (never written:
// the cache hands out deep copies), or nil for nil.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &boolTrue
	default:
		return &boolFalse
	}
}

var boolTrue, boolFalse = true, false

// labelSets, annotationSets and provenanceSets share label maps, annotation maps and TiledInstance
// provenance maps among the cached objects.
var labelSets, annotationSets, provenanceSets = newSharedMaps(), newSharedMaps(), newSharedMaps()

// sharedMaps gives cached objects whose labels are equal one map between them: the children of an
// instance carry the same labels but for their component (server or database), so a thousand
// instances' sixteen thousand children need about two thousand maps, not sixteen thousand (a small
// map costs some 300 bytes, however few its entries). A map is counted by the objects that hold it
// and forgotten when the last of them is collected (runtime.AddCleanup), so the table follows the
// cache. The maps are never written: the cache hands out deep copies, and the event handlers only
// read.
type sharedMaps struct {
	mu   sync.Mutex
	maps map[[sha256.Size]byte]*sharedMap
}

type sharedMap struct {
	key  [sha256.Size]byte
	m    map[string]string
	refs int
}

func newSharedMaps() *sharedMaps { return &sharedMaps{maps: map[[sha256.Size]byte]*sharedMap{}} }

// share returns the shared map equal to m (a copy of m, interned, if it is the first of its kind),
// counting holder (the metadata of the object that will hold it) as one of its users until it is
// collected.
func (s *sharedMaps) share(holder *metav1.ObjectMeta, m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	// The table is keyed by a hash of the canonical encoding (32 bytes), not the encoding itself
	// (hundreds of bytes for a child's labels): there are thousands of distinct sets at a thousand
	// instances.
	key := sha256.Sum256(mapKey(m))
	s.mu.Lock()
	e, ok := s.maps[key]
	if !ok {
		e = &sharedMap{key: key, m: internMap(m)}
		s.maps[key] = e
	}
	e.refs++
	s.mu.Unlock()
	runtime.AddCleanup(holder, s.release, e)
	return e.m
}

func (s *sharedMaps) release(e *sharedMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.refs--; e.refs <= 0 && s.maps[e.key] == e {
		delete(s.maps, e.key)
	}
}

// len is the number of distinct maps shared.
func (s *sharedMaps) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.maps)
}

// mapKey is a canonical encoding of m: its entries sorted by key, each string length-prefixed.
func mapKey(m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 8
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
		v := m[k]
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return b
}

// internMap returns m with its keys and values interned (a new map of the same size).
func internMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern.String(k)] = intern.String(v)
	}
	return out
}

// tiledContainer is the name of the Tiled StatefulSet's Tiled container (render), the one container
// whose image the controllers read from the cache.
const tiledContainer = "tiled"

// trimObject drops the fields of a child object the controllers never read from the cache (see
// trimTransform); other objects are returned as they are. It changes obj in place and is idempotent.
func trimObject(obj any) any {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		// The Tiled container's name and image stay: the upgrade procedure compares the image the
		// Tiled pods run with the spec's. It reads no other container (a Container is 400 bytes
		// before its strings, and every instance has three StatefulSets).
		var containers []corev1.Container
		for _, c := range o.Spec.Template.Spec.Containers {
			if c.Name == tiledContainer {
				containers = append(containers, corev1.Container{Name: c.Name, Image: c.Image})
			}
		}
		o.Spec = appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas}
		o.Spec.Template.Spec.Containers = containers
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
	case *corev1.Service:
		o.Spec, o.Status = corev1.ServiceSpec{}, corev1.ServiceStatus{}
	case *corev1.PersistentVolumeClaim:
		o.Spec, o.Status = corev1.PersistentVolumeClaimSpec{}, corev1.PersistentVolumeClaimStatus{}
	case *networkingv1.Ingress:
		o.Spec, o.Status = networkingv1.IngressSpec{}, networkingv1.IngressStatus{}
	case *policyv1.PodDisruptionBudget:
		o.Spec, o.Status = policyv1.PodDisruptionBudgetSpec{}, policyv1.PodDisruptionBudgetStatus{}
	case *corev1.PersistentVolume:
		o.Spec = corev1.PersistentVolumeSpec{
			ClaimRef:               o.Spec.ClaimRef,
			PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: o.Spec.NFS},
		}
		o.Status = corev1.PersistentVolumeStatus{}
	}
	return obj
}
