package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/profiles"
)

// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledprofiles/status,verbs=patch

// ConditionValid is the condition of a TiledProfile: True when its expressions compile and
// type-check and its values are ones the schema and the API server accept.
const ConditionValid = "Valid"

// Reasons of the Valid condition.
const (
	// ReasonValid: the profile passes every check.
	ReasonValid = "Valid"
	// ReasonExpressionInvalid: a CEL expression does not compile, or computes the wrong type.
	ReasonExpressionInvalid = "ExpressionInvalid"
	// ReasonSchemaInvalid: a field the schema does not declare, or a value the schema or the API
	// server would refuse on the objects made from it.
	ReasonSchemaInvalid = "SchemaInvalid"
)

// ProfileValidity checks a profile on its own, as its admission webhook does (expansion.CheckProfile),
// and says so as the status, reason and message of its Valid condition. An error is returned only
// when the check itself could not run (the engine could not be built), not for an invalid profile.
func ProfileValidity(p *tiledv1alpha1.TiledProfile) (metav1.ConditionStatus, string, string, error) {
	err := expansion.CheckProfile(p)
	if err == nil {
		return metav1.ConditionTrue, ReasonValid, "the profile's expressions compile and its values are valid", nil
	}
	var (
		expr    *expansion.ExpressionError
		unknown *expansion.UnknownFieldError
		invalid *expansion.InvalidFieldError
	)
	switch {
	case errors.As(err, &expr):
		return metav1.ConditionFalse, ReasonExpressionInvalid, err.Error(), nil
	case errors.As(err, &unknown), errors.As(err, &invalid):
		return metav1.ConditionFalse, ReasonSchemaInvalid, err.Error(), nil
	}
	return "", "", "", fmt.Errorf("checking profile %s/%s: %w", p.Namespace, p.Name, err)
}

// validity is the outcome of ProfileValidity.
type validity struct {
	status          metav1.ConditionStatus
	reason, message string
}

// profileStatus computes the status of a profile from its current status (whose conditions keep
// their lastTransitionTime when their status does not change), the verdict on its spec and the
// clusters and instances of its namespace. It is pure.
func profileStatus(p *tiledv1alpha1.TiledProfile, v validity, clusters []tiledv1alpha1.TiledCluster, instances []tiledv1alpha1.TiledInstance) *tiledv1alpha1.TiledProfileStatus {
	status := p.Status.DeepCopy()
	status.ObservedGeneration = p.Generation
	setCondition(&status.Conditions, p.Generation, ConditionValid, v.status, v.reason, v.message)
	byClusters, byInstances := profiles.SelectedBy(p, clusters, instances)
	status.SelectedByClusters, status.SelectedByInstances = int32(byClusters), int32(byInstances)
	return status
}

// TiledProfileReconciler reports in each TiledProfile's status whether it is valid and how many
// TiledClusters and standalone TiledInstances select it.
type TiledProfileReconciler struct {
	// Client reads from the informer cache.
	Client client.Client
	// Applier writes the status with server-side apply.
	Applier *applier.Applier
	// Recorder sends Events, only on state transitions.
	Recorder events.EventRecorder
	// Resync, when not nil, delivers profiles to reconcile again (Operator.ResyncAll).
	Resync <-chan event.GenericEvent

	// memories are what the controller keeps per profile between reconciles (memories.go).
	memories profileMemories
}

type verdict struct {
	uid        types.UID
	generation int64
	validity
}

// SetupWithManager registers the controller: it watches TiledProfiles (spec and labels), and
// TiledClusters and standalone TiledInstances to count again the profiles of their namespace when
// their selectors may have changed.
func (r *TiledProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("tiledprofile").
		For(&tiledv1alpha1.TiledProfile{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&tiledv1alpha1.TiledCluster{}, r.recount(func(o client.Object) bool { return true }),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&tiledv1alpha1.TiledInstance{}, r.recount(standalone), builder.WithPredicates(selectorChanged))
	if r.Resync != nil {
		b = b.WatchesRawSource(source.Channel(r.Resync, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// standalone is true for a TiledInstance with its own profileSelector: the only instances that
// select profiles themselves.
func standalone(o client.Object) bool {
	ti, ok := o.(*tiledv1alpha1.TiledInstance)
	return ok && ti.Spec.ProfileSelector != nil
}

// selectorChanged passes the creation and deletion of standalone instances, and the updates that
// change an instance's profileSelector: the instance events that can change a profile's count. The
// status updates of the many instances stamped out by clusters never reach the profiles.
var selectorChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return standalone(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return standalone(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*tiledv1alpha1.TiledInstance)
		n, ok2 := e.ObjectNew.(*tiledv1alpha1.TiledInstance)
		return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Spec.ProfileSelector, n.Spec.ProfileSelector)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// recount maps an event of a cluster or instance (for which relevant is true) to every profile of
// its namespace.
func (r *TiledProfileReconciler) recount(relevant func(client.Object) bool) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		if !relevant(o) {
			return nil
		}
		var list tiledv1alpha1.TiledProfileList
		if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return reqs
	})
}

// Reconcile checks one TiledProfile, counts who selects it, and writes its status when it changed.
func (r *TiledProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &tiledv1alpha1.TiledProfile{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.memories.forget(r.Applier, req.NamespacedName) // gone: what was remembered of it goes too
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	v, err := r.check(p)
	if err != nil {
		return ctrl.Result{}, err
	}
	var clusters tiledv1alpha1.TiledClusterList
	if err := r.Client.List(ctx, &clusters, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
		return ctrl.Result{}, err
	}
	var instances tiledv1alpha1.TiledInstanceList
	// The cache's own instances, not copies (a profile selected by a thousand of them): read only.
	if err := r.Client.List(ctx, &instances, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	status := profileStatus(p, v, clusters.Items, instances.Items)
	if equality.Semantic.DeepEqual(&p.Status, status) {
		return ctrl.Result{}, nil
	}
	res, err := applyStatus(ctx, r.Applier, p, "TiledProfile", status)
	if err != nil || !res.Sent {
		return ctrl.Result{}, err
	}
	// Events mark transitions only: sent once, when the status that records them is written.
	before := meta.FindStatusCondition(p.Status.Conditions, ConditionValid)
	switch {
	case v.status == metav1.ConditionFalse && (before == nil || before.Status != metav1.ConditionFalse):
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v.reason, "Check", "%s", v.message)
	case v.status == metav1.ConditionTrue && before != nil && before.Status == metav1.ConditionFalse:
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, v.reason, "Check", "%s", v.message)
	}
	return ctrl.Result{}, nil
}

// check returns the verdict on the profile's current generation, checking it only once.
func (r *TiledProfileReconciler) check(p *tiledv1alpha1.TiledProfile) (validity, error) {
	key := client.ObjectKeyFromObject(p)
	if v, ok := r.memories.verdicts.load(key); ok && v.uid == p.UID && v.generation == p.Generation {
		return v.validity, nil
	}
	status, reason, message, err := ProfileValidity(p)
	if err != nil {
		return validity{}, err
	}
	v := validity{status: status, reason: reason, message: message}
	r.memories.verdicts.store(key, &verdict{uid: p.UID, generation: p.Generation, validity: v})
	return v, nil
}
