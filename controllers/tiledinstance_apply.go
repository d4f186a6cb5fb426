package controllers

import (
	"context"
	"errors"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/childset"
	"github.com/bluesky/tiled-operator/controllers/desired"
)

// apply applies every child in order, one after another (package childset), each as the cache
// shows it just before, a conflict tried once more, the first refusal stalling the instance (its
// children depend on those before them); a retained claim or Secret in use again loses its released
// label (retention). Once all are applied it remembers the Secret data it applied (memories.go).
func (r *TiledInstanceReconciler) apply(ctx context.Context, cur *instanceState, in instanceInputs, want *desired.Children) (*childset.Record, error) {
	ti := cur.ti
	gate, err := r.gateRender(ctx, cur, in, want)
	if err != nil {
		return nil, err
	}
	if err := r.gateImages(ctx, cur, in, want, &gate); err != nil {
		return nil, err
	}
	// Dependencies before dependants: a change of Tiled's pod template waits for the managed
	// database and streaming cache it runs against (tiledinstance_dependencies.go).
	if gate, err = r.gateDependencies(ctx, cur, in, want, gate); err != nil {
		return nil, err
	}
	cur.gate = gate
	rec, err := childset.Apply(ctx, r.Applier, childSet{want: want, cur: cur}, childset.Options{
		Group:         client.ObjectKeyFromObject(ti).String(),
		RetryConflict: true,
		Record:        true,
		AfterApply: func(ctx context.Context, current client.Object) error {
			return retention{c: r.Client}.unrelease(ctx, ti, current)
		},
		Skip: gate.skipped,
	})
	var refused *childset.RefusedError
	if errors.As(err, &refused) {
		// Retrying cannot help (e.g. an immutable field of a claim): say so once, and wait for a
		// change of the instance.
		return nil, &stall{reason: ReasonChildRefused, message: refused.Error()}
	}
	if err != nil {
		return nil, renderStall(err)
	}
	cur.unsent = rec.Unsent
	if err := r.applyImageChecks(ctx, cur, gate, rec); err != nil {
		return nil, err
	}
	for _, s := range gate.skips {
		// The StatefulSet waiting for the rollout (or the maintenance window, or a dependency) stays
		// as it is: kept, not pruned.
		rec.Applied[want.Prepared(s.idx).Key] = s.generation
	}
	if gate.event != "" {
		r.renderChangedEvent(ti, gate.event)
	}
	r.memories.secrets.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}, instanceSecrets{uid: ti.UID, data: in.render.SecretData, metrics: in.render.MetricsSecretData})
	return rec, nil
}

// childSet is an instance's desired children as a child set: each one's prepared intent, its object
// rendered again only when one must be sent, and the child as the cache holds it just before its
// apply.
type childSet struct {
	want *desired.Children
	cur  *instanceState
}

func (s childSet) Len() int                        { return s.want.Len() }
func (s childSet) Prepared(i int) applier.Prepared { return s.want.Prepared(i) }

func (s childSet) Build(i int) (runtime.ApplyConfiguration, error) {
	obj, err := s.want.Object(i)
	if err != nil {
		return nil, err
	}
	return client.ApplyConfigurationFromUnstructured(obj), nil
}

func (s childSet) Current(ctx context.Context, i int) (client.Object, error) {
	return s.cur.child(ctx, s.want.Prepared(i).Key)
}

// prune deletes the objects this instance controls that were not applied this time (an Ingress
// turned off, a PodDisruptionBudget no longer needed, a managed database replaced by an external
// one), kind by kind (package childset). Data claims kept by the Retain policy carry no controller
// reference and are never pruned.
func (r *TiledInstanceReconciler) prune(ctx context.Context, cur *instanceState, rec *childset.Record) error {
	ti := cur.ti
	kinds := ChildKinds()
	if r.ServiceMonitorAvailable {
		kinds = append(kinds, ServiceMonitorKind())
	}
	applied := func(k applier.Key) bool { _, ok := rec.Applied[k]; return ok }
	for _, proto := range kinds {
		gvk, err := r.Client.GroupVersionKindFor(proto)
		if err != nil {
			return err
		}
		// ServiceMonitors are not indexed: the cache holds the managed ones only, and of those this
		// instance's are selected by label.
		owned, err := childset.Owned(ctx, r.Client, proto, ti.Namespace, ti.UID, client.MatchingLabels{tiledv1alpha1.LabelAppInstance: ti.Name})
		if err != nil {
			return err
		}
		var opts childset.PruneOptions
		if gvk.Kind == "Job" {
			// A Job's pods go with it (the API's default for Jobs orphans them).
			opts.Propagation = ptr.To(metav1.DeletePropagationBackground)
		}
		if _, err := childset.Prune(ctx, r.Client, r.Applier, gvk, slices.Values(owned), ti.UID, applied, opts); err != nil {
			return err
		}
	}
	return nil
}
