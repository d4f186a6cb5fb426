package controllers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
)

// The children: read from the cache (list, watch; never a get), written with server-side apply
// (patch, and create when the apply creates), pruned (delete). A Secret is read past the cache
// (get) only when it is an external database's; the instance's own Secret is always rendered, so it
// is never pruned and the operator cannot delete Secrets. test/packaging's
// TestManagerUsesEveryPermission fails on a verb the manager never uses; docs/rbac.md.
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledinstances/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=configmaps;services;persistentvolumeclaims,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// ownerIndex indexes child objects by the UID of their controller.
const ownerIndex = ".metadata.controllerUID"

// podInstanceIndex indexes the operator's pods by the instance they run (app.kubernetes.io/instance).
const podInstanceIndex = ".metadata.labels.instance"

// labelInstanceName is the label naming a pod's TiledInstance (render.Labels).
const labelInstanceName = "app.kubernetes.io/instance"

// labelComponent is the label saying whether a pod is Tiled's or its database's (render.Labels).
const labelComponent = "app.kubernetes.io/component"

// DefaultProbeGrace is how long a container may run without becoming ready before the instance names
// it (reason ProbeFailing): longer than Tiled's and PostgreSQL's readiness probes take to fail
// (30 s and 15 s), short enough that a failing probe is reported within two minutes.
const DefaultProbeGrace = 60 * time.Second

// ServiceMonitorKind is the prometheus-operator kind, outside the scheme: an empty ServiceMonitor,
// read as unstructured. When its CRD exists the operator caches the ServiceMonitors labelled as
// managed by it, whole (operator.NewManager).
func ServiceMonitorKind() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("monitoring.coreos.com/v1")
	u.SetKind("ServiceMonitor")
	return u
}

// ChildKinds are the namespaced kinds the instance controller owns, watches (through a cache
// restricted to objects labelled as managed by the operator) and prunes. The kinds whose content the
// operator never reads — ConfigMaps, Services, claims, Ingresses, PodDisruptionBudgets: it needs
// their existence, owner, labels, intent annotation and managers — are watched and cached as
// metadata only (metav1.PartialObjectMetadata); the StatefulSet (its status) and the
// Secret (its generated keys) whole.
func ChildKinds() []client.Object {
	return []client.Object{
		metadataOnly(corev1.SchemeGroupVersion.WithKind("ConfigMap")), &corev1.Secret{},
		metadataOnly(corev1.SchemeGroupVersion.WithKind("Service")),
		metadataOnly(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim")),
		&appsv1.StatefulSet{},
		metadataOnly(networkingv1.SchemeGroupVersion.WithKind("Ingress")),
		metadataOnly(policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget")),
	}
}

// metadataOnly is the metadata of an object of the kind gvk: as the cache holds the child kinds it
// does not read the content of.
func metadataOnly(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// metadataOnlyKind says whether the operator caches the child kind gvk as metadata only (ChildKinds).
func metadataOnlyKind(gvk schema.GroupVersionKind) bool { return metadataOnlyKinds[gvk] }

var metadataOnlyKinds = func() map[schema.GroupVersionKind]bool {
	out := map[schema.GroupVersionKind]bool{}
	for _, k := range ChildKinds() {
		if m, ok := k.(*metav1.PartialObjectMetadata); ok {
			out[m.GroupVersionKind()] = true
		}
	}
	return out
}()

// TiledInstanceReconciler renders and applies the objects of each TiledInstance: its ConfigMap,
// Secret, StatefulSet, Services, volumes, optional Ingress, PodDisruptionBudget and ServiceMonitor,
// and its managed database; it prunes the objects it no longer renders and reports readiness.
type TiledInstanceReconciler struct {
	// Client reads from the informer cache.
	Client client.Client
	// APIReader reads past the cache; used only for an external database's Secret, which the
	// operator does not label and so does not cache.
	APIReader client.Reader
	// Applier writes with server-side apply and skips unchanged intents.
	Applier *applier.Applier
	// Recorder sends Events, only on state transitions.
	Recorder events.EventRecorder
	// Builtins are the built-in defaults, used to expand a standalone instance that was stored terse
	// (without the mutating webhook).
	Builtins expansion.Builtins
	// ServiceMonitorAvailable says the ServiceMonitor CRD exists.
	ServiceMonitorAvailable bool
	// ExternalSecretRetry is how long to wait before looking again at a missing or incomplete external
	// database Secret (the operator does not watch Secrets it does not manage); 0 means 10s.
	ExternalSecretRetry time.Duration
	// ExternalSecretRecheck is how often an instance on an external database looks at its Secret
	// again while all is well, so that a Secret deleted or emptied later is reported; 0 means 30s. It
	// costs one GET per such instance per period (instances on a managed database cost nothing idle).
	ExternalSecretRecheck time.Duration
	// Random is the source of generated secrets; nil means crypto/rand.
	Random io.Reader
	// Resync, when not nil, delivers instances to reconcile again (Operator.ResyncAll).
	Resync <-chan event.GenericEvent
	// Concurrency is how many instances reconcile at once; 0 means DefaultInstanceConcurrency. Each reconcile mostly waits on
	// the API server, so a few in flight keep it busy.
	Concurrency int
	// ProbeGrace is how long a running container may stay unready before the instance reports it;
	// 0 means DefaultProbeGrace.
	ProbeGrace time.Duration

	// secrets remembers the Secret data last applied per instance, so that a Secret the cache has not
	// yet seen is never regenerated.
	secrets sync.Map // types.NamespacedName -> instanceSecrets
	// rendered remembers, per instance, the applier's prepared form of the objects its last render
	// gave and the inputs it came from: a reconcile caused by a child's status (the most common kind)
	// has the same inputs, and render is pure, so it need not render nor encode them again. The
	// objects themselves are rendered again only when one must be sent.
	rendered sync.Map // types.NamespacedName -> *renderMemo
}

// renderMemo is an instance's last render: the hash of its inputs and the prepared objects.
type renderMemo struct {
	inputs   [32]byte
	prepared []applier.Prepared
}

// intentSet is the objects one reconcile applies: their prepared form, and the objects themselves,
// rendered at most once and only if one must be sent.
type intentSet struct {
	prepared []applier.Prepared
	render   func() ([]*unstructured.Unstructured, error)
	objects  []*unstructured.Unstructured
}

// object returns the apply configuration of intent i.
func (s *intentSet) object(i int) (runtime.ApplyConfiguration, error) {
	if s.objects == nil {
		objs, err := s.render()
		if err != nil {
			return nil, err
		}
		s.objects = objs
	}
	if len(s.objects) != len(s.prepared) || keyOf(s.objects[i]) != s.prepared[i].Key {
		return nil, fmt.Errorf("the render of %s changed under the same inputs", s.prepared[i].Key)
	}
	return client.ApplyConfigurationFromUnstructured(s.objects[i]), nil
}

func keyOf(u *unstructured.Unstructured) applier.Key {
	return applier.Key{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
}

// intents renders the instance's objects — or, when the inputs are those of its last render, takes
// their prepared form from the memo. A render error is returned as such (the instance stalls).
func (r *TiledInstanceReconciler) intents(key types.NamespacedName, ti, spec *tiledv1alpha1.TiledInstance, in render.Inputs) (*intentSet, error) {
	objects := func() ([]*unstructured.Unstructured, error) {
		objs, err := render.Render(spec, in)
		if err != nil {
			return nil, &renderError{err}
		}
		return InstanceObjects(ti, objs)
	}
	inputs, err := renderInputs(ti, spec, in)
	if err != nil {
		return nil, err
	}
	if m, ok := r.rendered.Load(key); ok && m.(*renderMemo).inputs == inputs {
		return &intentSet{prepared: m.(*renderMemo).prepared, render: objects}, nil
	}
	objs, err := objects()
	if err != nil {
		return nil, err
	}
	prepared := make([]applier.Prepared, len(objs))
	for i, u := range objs {
		if prepared[i], err = applier.Prepare(client.ApplyConfigurationFromUnstructured(u)); err != nil {
			return nil, err
		}
	}
	r.rendered.Store(key, &renderMemo{inputs: inputs, prepared: prepared})
	return &intentSet{prepared: prepared, render: objects, objects: objs}, nil
}

// renderError is an error of render.Render: the instance cannot be rendered.
type renderError struct{ err error }

func (e *renderError) Error() string { return e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

// renderInputs hashes everything the objects of an instance are rendered from: the owner
// (InstanceObjects' controller reference), the expanded instance's name, namespace, labels,
// annotations and spec, and render's other inputs (the Secret's data, an external database's keys,
// whether ServiceMonitors exist).
func renderInputs(ti, spec *tiledv1alpha1.TiledInstance, in render.Inputs) ([32]byte, error) {
	data, err := json.Marshal(struct {
		UID, Name               string
		SpecName, SpecNamespace string
		Labels, Annotations     map[string]string
		Spec                    tiledv1alpha1.TiledInstanceSpec
		In                      render.Inputs
	}{string(ti.UID), ti.Name, spec.Name, spec.Namespace, spec.Labels, spec.Annotations, spec.Spec, in})
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(data), nil
}

// instanceSecrets is the Secret data last applied for the instance with this UID.
type instanceSecrets struct {
	uid  types.UID
	data map[string][]byte
}

// SetupWithManager registers the controller and the owner index of child objects.
func (r *TiledInstanceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	b := ctrl.NewControllerManagedBy(mgr).
		Named("tiledinstance").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.concurrency()}).
		For(&tiledv1alpha1.TiledInstance{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&tiledv1alpha1.TiledProfile{}, profileHandler(r.Client, false))
	for _, obj := range ChildKinds() {
		if err := mgr.GetFieldIndexer().IndexField(ctx, obj, ownerIndex, indexController); err != nil {
			return err
		}
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return err
		}
		b = b.Owns(obj, builder.WithPredicates(notCreated, r.forgetDeleted(gvk)))
	}
	// Retained claims and the Secret under the Retain policy have no owner reference, so the watches
	// above do not map their deletion to the instance; their instance label does.
	for _, obj := range []client.Object{&corev1.Secret{}, metadataOnly(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))} {
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return err
		}
		// The applier hears of the deletion in this handler too, before the enqueue: the handlers
		// of one informer run concurrently, so the Owns watch's may come after the reconcile.
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(labelledInstance), builder.WithPredicates(unownedDeleted, r.forgetDeleted(gvk)))
	}
	// The instances' pods (cached trimmed to their status, see podstatus.Trim): their failures are
	// named on the instance. They belong to the StatefulSets, so they map to the instance by label.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podInstanceIndex, func(o client.Object) []string {
		if n := o.GetLabels()[labelInstanceName]; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return err
	}
	b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(labelledInstance), builder.WithPredicates(podStatusChanged))
	// While its cluster is paused an instance skips its reconciles, pod events included; when the
	// pause ends, each of the cluster's instances looks again at what it missed.
	b = b.Watches(&tiledv1alpha1.TiledCluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterInstances), builder.WithPredicates(unpaused))
	if r.Resync != nil {
		b = b.WatchesRawSource(source.Channel(r.Resync, &handler.EnqueueRequestForObject{}))
	}
	// The cache of PersistentVolumes (NFS volumes the operator creates) starts with the manager, so
	// that reading one never falls through to the API server.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.PersistentVolume{}); err != nil {
		return err
	}
	// A PersistentVolume deleted by anyone comes back at once (it is cluster-scoped, so it has no
	// owner reference to map it back: its claim's namespace and the instance label do).
	pvDeleted := predicate.And(predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}, r.forgetDeleted(corev1.SchemeGroupVersion.WithKind("PersistentVolume")))
	b = b.Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(pvInstance), builder.WithPredicates(pvDeleted))
	return b.Complete(r)
}

func (r *TiledInstanceReconciler) concurrency() int {
	if r.Concurrency > 0 {
		return r.Concurrency
	}
	return DefaultInstanceConcurrency
}

// DefaultInstanceConcurrency is how many TiledInstances the manager reconciles at once.
const DefaultInstanceConcurrency = 4

// unownedDeleted passes the deletion of an object without a controller reference.
var unownedDeleted = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc:  func(e event.DeleteEvent) bool { return metav1.GetControllerOf(e.Object) == nil },
}

// labelledInstance maps an object (a pod, a retained claim or Secret) to the instance named by its
// app.kubernetes.io/instance label.
func labelledInstance(_ context.Context, o client.Object) []reconcile.Request {
	n := o.GetLabels()[labelInstanceName]
	if n == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
}

// unpaused passes a TiledCluster's change from paused to running.
var unpaused = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*tiledv1alpha1.TiledCluster)
		n, ok2 := e.ObjectNew.(*tiledv1alpha1.TiledCluster)
		return ok1 && ok2 && o.Spec.Paused && !n.Spec.Paused
	},
}

// clusterInstances maps a TiledCluster to its instances, from the cache.
func (r *TiledInstanceReconciler) clusterInstances(ctx context.Context, o client.Object) []reconcile.Request {
	var list tiledv1alpha1.TiledInstanceList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{tiledv1alpha1.LabelCluster: o.GetName()},
		client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == o.GetUID() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// pvInstance maps an NFS PersistentVolume to the instance of its claim.
func pvInstance(_ context.Context, o client.Object) []reconcile.Request {
	pv, ok := o.(*corev1.PersistentVolume)
	n := o.GetLabels()[labelInstanceName]
	if !ok || n == "" || pv.Spec.ClaimRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pv.Spec.ClaimRef.Namespace, Name: n}}}
}

// podStatusChanged passes a pod's deletion and the changes of its (trimmed) status: a new pod has no
// status yet, and the kubelet's other updates say nothing the conditions use.
var podStatusChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return !equality.Semantic.DeepEqual(o.Status, n.Status) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	},
}

// forgetDeleted passes a child's deletion on, after telling the applier, so that the reconcile it
// triggers applies the child again even when the cache never showed it after its creation.
func (r *TiledInstanceReconciler) forgetDeleted(gvk schema.GroupVersionKind) predicate.Funcs {
	return predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		r.Applier.Deleted(applier.Key{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
		return true
	}}
}

// notCreated ignores the creation of a child: the operator created it and knows its content; its
// later changes (status, other writers) and its deletion are what need a reconcile.
var notCreated = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}

func indexController(o client.Object) []string {
	if ref := metav1.GetControllerOf(o); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}

// Reconcile renders and applies one instance's objects.
func (r *TiledInstanceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx).WithValues("instance", req.String())
	ti := &tiledv1alpha1.TiledInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, ti); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: what was remembered for it goes too.
			r.secrets.Delete(req.NamespacedName)
			r.rendered.Delete(req.NamespacedName)
			r.Applier.ForgetGroup(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ti.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if paused, err := r.clusterPaused(ctx, ti); err != nil || paused {
		return ctrl.Result{}, err
	}
	status := ti.Status.DeepCopy()
	status.ObservedGeneration = ti.Generation
	if ti.Labels[tiledv1alpha1.LabelManagedBy] == tiledv1alpha1.ManagedByValue && metav1.GetControllerOf(ti) == nil {
		// Only the cluster controller makes instances with this label; the admission webhooks skip
		// them (their objectSelector), so one made by hand with it was never checked. Nothing is
		// rendered for it and no cluster counts it.
		return ctrl.Result{}, r.stalled(ctx, ti, status, ReasonNotAMember, fmt.Sprintf(
			"TiledInstance %s/%s carries the label %s=%s, which only instances a TiledCluster makes carry, but no TiledCluster controls it: "+
				"nothing is created for it; remove the label to make it a standalone instance (checked at admission)",
			ti.Namespace, ti.Name, tiledv1alpha1.LabelManagedBy, tiledv1alpha1.ManagedByValue))
	}

	spec, err := r.expanded(ctx, ti)
	if err != nil {
		return ctrl.Result{}, r.stalled(ctx, ti, status, expansionReason(err), err.Error())
	}

	in := render.Inputs{ServiceMonitorAvailable: r.ServiceMonitorAvailable}
	names := render.NamesFor(spec)
	mode := "Managed"
	if db := spec.Spec.Database; db != nil && db.External != nil {
		mode = "External"
		keys, msg := r.externalSecretKeys(ctx, spec)
		if msg != "" {
			status.Database = &tiledv1alpha1.DatabaseStatus{Mode: mode}
			retry := r.ExternalSecretRetry
			if retry == 0 {
				retry = 10 * time.Second
			}
			return ctrl.Result{RequeueAfter: retry}, r.stalled(ctx, ti, status, ReasonDatabaseSecret, msg)
		}
		in.ExternalSecretKeys = keys
	}

	data, err := r.secretData(ctx, spec, names.Secret)
	if err != nil {
		return ctrl.Result{}, err
	}
	in.SecretData = data
	intents, err := r.intents(req.NamespacedName, ti, spec, in)
	var renderErr *renderError
	if errors.As(err, &renderErr) {
		return ctrl.Result{}, r.stalled(ctx, ti, status, ReasonRenderFailed, renderErr.Error())
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	applied, unsent, unseen, err := r.applyAll(ctx, ti, intents)
	if errors.As(err, &renderErr) {
		return ctrl.Result{}, r.stalled(ctx, ti, status, ReasonRenderFailed, renderErr.Error())
	}
	var refused *childRefusedError
	if errors.As(err, &refused) {
		// Retrying cannot help (e.g. an immutable field of a claim): say so once, and wait for a
		// change of the instance.
		return ctrl.Result{}, r.stalled(ctx, ti, status, ReasonChildRefused, refused.Error())
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	r.secrets.Store(req.NamespacedName, instanceSecrets{uid: ti.UID, data: data})
	if err := r.prune(ctx, ti, applied); err != nil {
		return ctrl.Result{}, err
	}

	// Status from what the cache shows: the StatefulSets' readiness, the pods' statuses, and fields
	// other writers manage.
	obs, recheck, err := r.observe(ctx, ti, spec, mode == "External", applied, unsent)
	if err != nil {
		return ctrl.Result{}, err
	}
	status = instanceStatus(&ti.Status, obs)
	logger.V(1).Info("reconciled", "applied", len(applied), "ready", status.ReadyReplicas)
	var result ctrl.Result
	if mode == "External" {
		result.RequeueAfter = r.ExternalSecretRecheck
		if result.RequeueAfter == 0 {
			result.RequeueAfter = 30 * time.Second
		}
	}
	if recheck > 0 {
		// A container not ready yet reaches the grace period then, with no pod update to say so.
		recheck += time.Second
		if result.RequeueAfter == 0 || recheck < result.RequeueAfter {
			result.RequeueAfter = recheck
		}
	}
	if unseen > 0 && (result.RequeueAfter == 0 || unseen < result.RequeueAfter) {
		// A child just created is not in the cache yet: look again once the cache must show it,
		// in case it was deleted before it ever did.
		result.RequeueAfter = unseen
	}
	sent, err := r.writeStatus(ctx, ti, status)
	if err != nil || !sent {
		return result, err
	}
	// Events mark transitions only: sent once, when the status that records them is written.
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionReady); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, ReasonReady, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionStalled); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionDatabaseReady); changed && c.Status == metav1.ConditionFalse && c.Reason != ReasonWaitingForDatabase {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionExternalEdits); changed {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, ReasonFieldsManaged, "Reconcile",
			"%s; operator-owned fields are restored at the next change, other fields are left alone", c.Message)
	}
	return result, nil
}

// observe gathers what the instance's status is computed from (instanceStatus): the StatefulSets
// from the cache, the generations the applier produced, what the pods' statuses say and the fields
// other writers manage; and when to look again (a container not ready yet reaches the probe grace
// period then, with no pod update to say so).
func (r *TiledInstanceReconciler) observe(ctx context.Context, ti, spec *tiledv1alpha1.TiledInstance, external bool,
	applied map[applier.Key]int64, unsent cachedChildren) (observedInstance, time.Duration, error) {
	names := render.NamesFor(spec)
	obs := observedInstance{
		Generation: ti.Generation, Namespace: ti.Namespace, TiledName: names.Tiled, Replicas: 1,
		TiledApplied: applied[stsKey(ti.Namespace, names.Tiled)],
		External:     external,
		PostgresPod:  names.Postgres + "-0", PostgresApplied: applied[stsKey(ti.Namespace, names.Postgres)],
		IngressHostWithoutEnabled: expansion.IngressHostWithoutEnabled(&spec.Spec.InstanceTemplate),
		ExternalEdits:             r.externalEdits(ctx, applied, unsent),
	}
	if t := spec.Spec.Tiled; t != nil {
		obs.Image = &t.Image
		if t.Replicas != nil {
			obs.Replicas = *t.Replicas
		}
	}
	obs.Tiled = r.statefulSet(ctx, unsent, stsKey(ti.Namespace, names.Tiled))
	serverPods, dbPods, err := r.pods(ctx, ti)
	if err != nil {
		return obs, 0, err
	}
	grace := r.ProbeGrace
	if grace == 0 {
		grace = DefaultProbeGrace
	}
	now := time.Now()
	var recheck time.Duration
	obs.ServerProblem, recheck = podstatus.Diagnose(serverPods, now, grace)
	if !obs.External {
		obs.Postgres = r.statefulSet(ctx, unsent, stsKey(ti.Namespace, names.Postgres))
		var dbRecheck time.Duration
		obs.DatabaseProblem, dbRecheck = podstatus.Diagnose(dbPods, now, grace)
		if dbRecheck > 0 && (recheck == 0 || dbRecheck < recheck) {
			recheck = dbRecheck
		}
	}
	return obs, recheck, nil
}

// statefulSet returns the StatefulSet k as cached (from unsent when this reconcile read it and sent
// nothing), or nil when the cache does not hold it.
func (r *TiledInstanceReconciler) statefulSet(ctx context.Context, unsent cachedChildren, k applier.Key) *appsv1.StatefulSet {
	if sts, ok := unsent[k].(*appsv1.StatefulSet); ok {
		return sts
	}
	sts := &appsv1.StatefulSet{}
	if r.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, sts) != nil {
		return nil
	}
	return sts
}

// pods returns the instance's Tiled pods and database pods from the cache (the cache's own objects:
// read only).
func (r *TiledInstanceReconciler) pods(ctx context.Context, ti *tiledv1alpha1.TiledInstance) (server, database []corev1.Pod, err error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(ti.Namespace), client.MatchingFields{podInstanceIndex: ti.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	for _, p := range list.Items {
		switch p.Labels[labelComponent] {
		case render.ComponentServer:
			server = append(server, p)
		case render.ComponentDatabase:
			database = append(database, p)
		}
	}
	return server, database, nil
}

// setDatabaseCondition sets DatabaseReady for a managed database: True when its StatefulSet is
// ready; otherwise False with what its pod's status says is wrong, or DatabaseUnavailable when it was
// ready before (an outage), or WaitingForDatabase while it starts.
func setDatabaseCondition(status *tiledv1alpha1.TiledInstanceStatus, generation int64, ready bool, problem *podstatus.Problem, pod string) {
	prev := meta.FindStatusCondition(status.Conditions, ConditionDatabaseReady)
	switch {
	case ready:
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionTrue, ReasonReady,
			fmt.Sprintf("PostgreSQL pod %s accepts connections", pod))
	case problem != nil:
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionFalse, problem.Reason, problem.Message)
	case prev != nil && (prev.Status == metav1.ConditionTrue || prev.Reason == ReasonDatabaseUnavailable):
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionFalse, ReasonDatabaseUnavailable,
			fmt.Sprintf("PostgreSQL pod %s is not ready: the database does not accept connections; Tiled's requests that need it fail until it is back", pod))
	default:
		setCondition(&status.Conditions, generation, ConditionDatabaseReady, metav1.ConditionFalse, ReasonWaitingForDatabase,
			fmt.Sprintf("waiting for PostgreSQL pod %s to accept connections", pod))
	}
}

// expanded returns the instance with a complete spec: as stored when a cluster stamped it out;
// for a standalone instance, expanded again here from its own fields and its profiles as they are
// now (expansion.Reexpand, as the mutating webhook does), so that it follows profile changes and works without the
// webhook. The result is not written back.
func (r *TiledInstanceReconciler) expanded(ctx context.Context, ti *tiledv1alpha1.TiledInstance) (*tiledv1alpha1.TiledInstance, error) {
	if metav1.GetControllerOf(ti) != nil {
		return ti, nil
	}
	var list tiledv1alpha1.TiledProfileList
	if err := r.Client.List(ctx, &list, client.InNamespace(ti.Namespace)); err != nil {
		return nil, err
	}
	return expansion.Reexpand(ti, nil, list.Items, r.Builtins)
}

// clusterPaused reports whether the instance's TiledCluster is paused: then nothing is written.
func (r *TiledInstanceReconciler) clusterPaused(ctx context.Context, ti *tiledv1alpha1.TiledInstance) (bool, error) {
	ref := metav1.GetControllerOf(ti)
	if ref == nil || ref.Kind != "TiledCluster" {
		return false, nil
	}
	// The cache's own clusters, not a copy: a Get would copy the whole cluster, a thousand
	// beamlines' spec, on every reconcile of every one of its instances, to read one field.
	var clusters tiledv1alpha1.TiledClusterList
	if err := r.Client.List(ctx, &clusters, client.InNamespace(ti.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	for i := range clusters.Items {
		if c := &clusters.Items[i]; c.Name == ref.Name {
			return c.UID == ref.UID && c.Spec.Paused, nil
		}
	}
	return false, nil
}

// secretData returns the complete data of the instance's Secret: what exists (in the cache, or last
// applied when the cache has not caught up) plus newly generated values for missing keys only.
func (r *TiledInstanceReconciler) secretData(ctx context.Context, ti *tiledv1alpha1.TiledInstance, name string) (map[string][]byte, error) {
	existing := map[string][]byte{}
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ti.Namespace, Name: name}, s)
	switch {
	case err == nil:
		for k, v := range s.Data {
			existing[k] = v
		}
	case apierrors.IsNotFound(err):
		if prev, ok := r.secrets.Load(client.ObjectKeyFromObject(ti)); ok && prev.(instanceSecrets).uid == ti.UID {
			for k, v := range prev.(instanceSecrets).data {
				existing[k] = v
			}
		}
	default:
		return nil, err
	}
	random := r.Random
	if random == nil {
		random = rand.Reader
	}
	gen, err := render.GenerateSecretData(ti, existing, random)
	if err != nil {
		return nil, fmt.Errorf("generating the secrets of %s/%s: %w", ti.Namespace, ti.Name, err)
	}
	for k, v := range gen {
		existing[k] = v
	}
	return existing, nil
}

// externalSecretKeys reads the external database's Secret and returns its keys, or a message naming
// what is missing.
func (r *TiledInstanceReconciler) externalSecretKeys(ctx context.Context, ti *tiledv1alpha1.TiledInstance) ([]string, string) {
	ref := ti.Spec.Database.External.URISecretRef
	if ref == nil || ref.Name == "" {
		return nil, "spec.database.external.uriSecretRef is not set"
	}
	key := ref.Key
	if key == "" {
		key = "uri"
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ti.Namespace, Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("the external database Secret %s/%s (spec.database.external.uriSecretRef) does not exist", ti.Namespace, ref.Name)
		}
		return nil, fmt.Sprintf("reading the external database Secret %s/%s: %v", ti.Namespace, ref.Name, err)
	}
	if len(s.Data[key]) == 0 {
		return nil, fmt.Sprintf("the external database Secret %s/%s has no key %q (spec.database.external.uriSecretRef.key)", ti.Namespace, ref.Name, key)
	}
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, ""
}

// applyAll applies every rendered object, owned by the instance (except retained data claims), and
// returns the generation each has by key, the children it read from the cache and did not send
// (unsent), and how soon to look again for a child just created that the cache does not show yet.
func (r *TiledInstanceReconciler) applyAll(ctx context.Context, ti *tiledv1alpha1.TiledInstance, intents *intentSet) (applied map[applier.Key]int64, unsent cachedChildren, unseen time.Duration, err error) {
	applied = map[applier.Key]int64{}
	unsent = cachedChildren{}
	group := client.ObjectKeyFromObject(ti).String()
	for i, p := range intents.prepared {
		current, err := r.currentByKey(ctx, p.Key)
		if err != nil {
			return nil, nil, 0, err
		}
		build := func() (runtime.ApplyConfiguration, error) { return intents.object(i) }
		res, err := r.Applier.ApplyPrepared(ctx, p, build, current, applier.Group(group))
		if apierrors.IsConflict(err) {
			// A conflict can be a race with another writer: one more try before calling it a refusal.
			res, err = r.Applier.ApplyPrepared(ctx, p, build, current, applier.Group(group))
		}
		if reason := refusal(err); reason != "" {
			return nil, nil, 0, &childRefusedError{Key: res.Key, Reason: reason, Err: err}
		}
		if err != nil {
			return nil, nil, 0, err
		}
		applied[res.Key] = res.Generation
		if !res.Sent && current != nil {
			unsent[res.Key] = current
		}
		if res.Recheck > 0 && (unseen == 0 || res.Recheck < unseen) {
			unseen = res.Recheck
		}
		if err := r.unrelease(ctx, current); err != nil {
			return nil, nil, 0, err
		}
	}
	return applied, unsent, unseen, nil
}

// cachedChildren are children as this reconcile read them from the cache, by key: those it did not
// send, which are as the cache showed them a moment ago. Reading them again later in the same
// reconcile (status, external edits) would only copy them once more.
type cachedChildren map[applier.Key]client.Object

// cachedChild returns the child k from c, or reads it from the cache.
func (r *TiledInstanceReconciler) cachedChild(ctx context.Context, c cachedChildren, k applier.Key) (client.Object, error) {
	if o, ok := c[k]; ok {
		return o, nil
	}
	return r.currentByKey(ctx, k)
}

// unrelease removes the released label from a retained claim or Secret the instance uses again (a
// beamline removed and re-added under the same name), with the field owner that set it: an apply of
// nothing under that owner drops the label and touches no other field.
func (r *TiledInstanceReconciler) unrelease(ctx context.Context, current client.Object) error {
	var kind string
	switch c := current.(type) {
	case *metav1.PartialObjectMetadata:
		if c.GroupVersionKind() != corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim") {
			return nil
		}
		kind = "PersistentVolumeClaim"
	case *corev1.Secret:
		kind = "Secret"
	default:
		return nil
	}
	if current.GetLabels()[LabelReleased] == "" {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": kind,
		"metadata": map[string]any{"name": current.GetName(), "namespace": current.GetNamespace()},
	}}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(tiledv1alpha1.RetentionFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("removing the label %s from the %s %s/%s, in use again: %w", LabelReleased, kind, current.GetNamespace(), current.GetName(), err)
	}
	return nil
}

// childRefusedError is a child object the API server refuses in a way no retry can mend: invalid
// (such as the access modes or storage class of an existing claim), forbidden, a request it cannot
// even turn into a patch, or a conflict that outlived a retry.
type childRefusedError struct {
	Key    applier.Key
	Reason string
	Err    error
}

func (e *childRefusedError) Error() string {
	return fmt.Sprintf("the API server refuses the change to %s (%s; objects before it in order were applied, the rest are left as they were); "+
		"revert the setting, or delete the object if it may be recreated: %v", e.Key, e.Reason, e.Err)
}

// refusal classifies an apply error as a refusal that retrying cannot mend, and names its kind; ""
// for success and for errors worth retrying (timeouts, the API server unavailable, throttling).
func refusal(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsBadRequest(err):
		return "bad request"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsRequestEntityTooLargeError(err):
		return "too large"
	case strings.Contains(err.Error(), "failed to create typed patch object"),
		strings.Contains(err.Error(), "duplicate entries for key"):
		// The apply cannot be merged with the object's schema (e.g. two entries of a keyed list
		// with the same key): the API server answers 500, but the same request fails every time.
		return "not mergeable"
	}
	return ""
}

// InstanceObjects returns the objects the controller applies for an instance, in order: the rendered
// objects, each controller-owned by the instance except, under the Retain policy, the data and
// database claims and the Secret (the database's password, the API key), which outlive it.
func InstanceObjects(ti *tiledv1alpha1.TiledInstance, objs *render.Objects) ([]*unstructured.Unstructured, error) {
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(ti, tiledv1alpha1.GroupVersion.WithKind("TiledInstance"))}
	retained := map[any]bool{}
	if render.Retained(ti) {
		for _, c := range objs.Claims {
			retained[c] = true
		}
		// The Secret goes with the data: the database on a retained claim only opens with the
		// password in it, and clients keep their API key when the beamline comes back.
		if objs.Secret != nil {
			retained[objs.Secret] = true
		}
	}
	all := objs.All()
	out := make([]*unstructured.Unstructured, 0, len(all))
	for _, o := range all {
		u, err := toUnstructured(o)
		if err != nil {
			return nil, err
		}
		if u.GetNamespace() != "" && !retained[o] {
			u.SetOwnerReferences(owner)
		}
		out = append(out, u)
	}
	return out, nil
}

// current returns the object as the cache holds it, or nil.
func (r *TiledInstanceReconciler) current(ctx context.Context, u *unstructured.Unstructured) (client.Object, error) {
	gvk := u.GroupVersionKind()
	var obj runtime.Object
	var err error
	if metadataOnlyKind(gvk) {
		obj = metadataOnly(gvk)
	} else {
		obj, err = r.Client.Scheme().New(gvk)
	}
	if err != nil {
		// Kinds outside the scheme (ServiceMonitor) are read as unstructured.
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		obj = cur
	}
	co := obj.(client.Object)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: u.GetNamespace(), Name: u.GetName()}, co); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	return co, nil
}

// prune deletes objects this instance controls that were not rendered this time (an Ingress turned
// off, a PodDisruptionBudget no longer needed, a managed database replaced by an external one). Data
// claims kept by the Retain policy carry no controller reference and are never pruned.
func (r *TiledInstanceReconciler) prune(ctx context.Context, ti *tiledv1alpha1.TiledInstance, applied map[applier.Key]int64) error {
	kinds := ChildKinds()
	if r.ServiceMonitorAvailable {
		kinds = append(kinds, ServiceMonitorKind())
	}
	for _, proto := range kinds {
		gvk, err := r.Client.GroupVersionKindFor(proto)
		if err != nil {
			return err
		}
		owned, err := r.listOwned(ctx, proto, ti)
		if err != nil {
			return err
		}
		for _, o := range owned {
			key := applier.Key{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}
			if _, ok := applied[key]; ok || !o.GetDeletionTimestamp().IsZero() {
				continue
			}
			uid := o.GetUID()
			if err := r.Client.Delete(ctx, o, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("pruning %s: %w", key, err)
			}
			r.Applier.Forget(key)
		}
	}
	return nil
}

// listOwned lists, from the cache, the objects of proto's kind whose controller is ti: the cache's
// own objects, not copies, so they are read only (prune reads their names, UIDs and deletion
// timestamps, and deletes by UID).
func (r *TiledInstanceReconciler) listOwned(ctx context.Context, proto client.Object, ti *tiledv1alpha1.TiledInstance) ([]client.Object, error) {
	var list client.ObjectList
	switch p := proto.(type) {
	case *metav1.PartialObjectMetadata:
		ml := &metav1.PartialObjectMetadataList{}
		ml.SetGroupVersionKind(p.GroupVersionKind().GroupVersion().WithKind(p.Kind + "List"))
		list = ml
	case *corev1.Secret:
		list = &corev1.SecretList{}
	case *appsv1.StatefulSet:
		list = &appsv1.StatefulSetList{}
	case *unstructured.Unstructured:
		// ServiceMonitors: not in the scheme, not indexed; the cache holds the managed ones only, and
		// of those this instance's are selected by label.
		ul := &unstructured.UnstructuredList{}
		ul.SetGroupVersionKind(p.GroupVersionKind().GroupVersion().WithKind(p.GetKind() + "List"))
		if err := r.Client.List(ctx, ul, client.InNamespace(ti.Namespace), client.MatchingLabels{"app.kubernetes.io/instance": ti.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		var out []client.Object
		for i := range ul.Items {
			if ref := metav1.GetControllerOf(&ul.Items[i]); ref != nil && ref.UID == ti.UID {
				out = append(out, &ul.Items[i])
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("no list type for %T", proto)
	}
	if err := r.Client.List(ctx, list, client.InNamespace(ti.Namespace), client.MatchingFields{ownerIndex: string(ti.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		out = append(out, it.(client.Object))
	}
	return out, nil
}

// externalEdits lists the applied objects (from the cache) that have spec or metadata fields
// managed by a writer other than the operator.
func (r *TiledInstanceReconciler) externalEdits(ctx context.Context, applied map[applier.Key]int64, unsent cachedChildren) string {
	var found []string
	keys := make([]applier.Key, 0, len(applied))
	for k := range applied {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		cur, err := r.cachedChild(ctx, unsent, k)
		if err != nil || cur == nil {
			continue
		}
		if managers := r.Applier.ForeignManagers(cur); len(managers) > 0 {
			found = append(found, fmt.Sprintf("%s/%s has fields managed by %s", k.Kind, k.Name, strings.Join(managers, ", ")))
		}
	}
	return strings.Join(found, "; ")
}

func (r *TiledInstanceReconciler) currentByKey(ctx context.Context, k applier.Key) (client.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(k.APIVersion)
	u.SetKind(k.Kind)
	u.SetNamespace(k.Namespace)
	u.SetName(k.Name)
	return r.current(ctx, u)
}

// stalled reports a failure that needs a person: Stalled=True, Ready=False, no Reconciling. The
// objects already applied stay as they are.
func (r *TiledInstanceReconciler) stalled(ctx context.Context, ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus, reason, msg string) error {
	setStalled(&status.Conditions, ti.Generation, reason, msg)
	sent, err := r.writeStatus(ctx, ti, status)
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionStalled); changed && sent {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", c.Message)
	}
	return err
}

// writeStatus applies the status when it differs from the one in the cache (and from the last one
// applied), and reports whether it sent it.
func (r *TiledInstanceReconciler) writeStatus(ctx context.Context, ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus) (bool, error) {
	if equality.Semantic.DeepEqual(&ti.Status, status) {
		return false, nil
	}
	return applyStatus(ctx, r.Applier, ti, "TiledInstance", status)
}

func stsKey(namespace, name string) applier.Key {
	return applier.Key{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: namespace, Name: name}
}

// toUnstructured converts an apply configuration (or unstructured object) to unstructured.
func toUnstructured(o any) (*unstructured.Unstructured, error) {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u.DeepCopy(), nil
	}
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return nil, err
	}
	if _, ok := u.Object["metadata"].(map[string]any); !ok {
		u.Object["metadata"] = map[string]any{}
	}
	return u, nil
}

// trimIntent drops from an intent built from a typed object the fields the operator never sets,
// which the typed object's JSON carries anyway: the status and metadata.creationTimestamp (null).
func trimIntent(u *unstructured.Unstructured) {
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
}
