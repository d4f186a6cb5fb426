package controllers

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/catalog"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// instanceInputs are what an instance's children are rendered from.
type instanceInputs struct {
	// spec is the instance with a complete spec (expanded).
	spec *tiledv1alpha1.TiledInstance
	// external: the instance uses an external database.
	external bool
	// render are render's other inputs: the Secret's data, an external database's keys, whether
	// ServiceMonitors exist, the upgrade procedure's step.
	render render.Inputs
	// upgrade is the upgrade procedure's decision (tiledinstance_upgrade.go).
	upgrade upgrade.Decision
	// restoring: a restore of the instance's database runs (tiledinstance_backup.go), or its
	// catalog is lost (tiledinstance_lostcatalog.go).
	restoring bool
	// claim is the managed database's claim as the lost-catalog stage read it (nil: none, or an
	// external database).
	claim *catalog.Claim
	// window is what spec.maintenance says now (nil: none declared, nothing is gated);
	// heldUpgrade, when not "", is the Tiled upgrade ("from to to") that waits for it
	// (tiledinstance_maintenance.go).
	window      *maintenanceWindow
	heldUpgrade string
	// upgradeFrom and upgradeTo are the images of the upgrade that waits (heldUpgrade).
	upgradeFrom, upgradeTo string
	// claimRecheck: the catalog is lost and its claim is gone; the apply makes it again, and a
	// claim's creation is not watched: look again shortly, to name it and restore into it.
	claimRecheck bool
}

// inputs gathers what the instance's children are rendered from, or the stall that keeps them
// from being rendered: an instance wearing the managed-by label that no cluster controls, a spec
// that cannot be expanded, an external database Secret missing or lacking its key.
func (r *TiledInstanceReconciler) inputs(ctx context.Context, cur *instanceState) (instanceInputs, error) {
	ti := cur.ti
	if ti.Labels[tiledv1alpha1.LabelManagedBy] == tiledv1alpha1.ManagedByValue && metav1.GetControllerOf(ti) == nil {
		// Only the cluster controller makes instances with this label; the admission webhooks skip
		// them (their objectSelector), so one made by hand with it was never checked. Nothing is
		// rendered for it and no cluster counts it.
		return instanceInputs{}, &stall{reason: ReasonNotAMember, message: fmt.Sprintf(
			"TiledInstance %s/%s carries the label %s=%s, which only instances a TiledCluster makes carry, but no TiledCluster controls it: "+
				"nothing is created for it; remove the label to make it a standalone instance (checked at admission)",
			ti.Namespace, ti.Name, tiledv1alpha1.LabelManagedBy, tiledv1alpha1.ManagedByValue)}
	}
	spec, err := r.expanded(ctx, cur)
	if err != nil {
		return instanceInputs{}, &stall{reason: expansionReason(err), message: err.Error()}
	}
	in := instanceInputs{spec: spec, render: render.Inputs{ServiceMonitorAvailable: r.ServiceMonitorAvailable, ToolsImage: r.Builtins.Image(expansion.ImagePostgreSQL)}}
	if in.window, err = maintenanceAt(spec, time.Now()); err != nil {
		return instanceInputs{}, err
	}
	if db := spec.Spec.Database; db != nil && db.External != nil {
		in.external = true
		keys, msg := cur.externalSecretKeys(ctx, spec)
		if msg != "" {
			return instanceInputs{}, &stall{reason: ReasonDatabaseSecret, message: msg,
				database: &tiledv1alpha1.DatabaseStatus{Mode: "External"}, retry: r.externalSecretRetry()}
		}
		in.render.ExternalSecretKeys = keys
	}
	if msg := cur.externalCacheSecretProblem(ctx, spec); msg != "" {
		return instanceInputs{}, &stall{reason: ReasonStreamingCacheSecret, message: msg, retry: r.externalSecretRetry()}
	}
	if in.render.SecretData, err = r.secretData(ctx, cur, spec); err != nil {
		return instanceInputs{}, err
	}
	if in.render.MetricsSecretData, err = r.metricsSecretData(ctx, cur, spec); err != nil {
		return instanceInputs{}, err
	}
	return in, nil
}

// expanded returns the instance with a complete spec: as stored when a cluster stamped it out;
// for a standalone instance, expanded again here from its own fields and its profiles as they are
// now (expansion.Reexpand, as the mutating webhook does), so that it follows profile changes and works without the
// webhook. The result is not written back.
func (r *TiledInstanceReconciler) expanded(ctx context.Context, cur *instanceState) (*tiledv1alpha1.TiledInstance, error) {
	if metav1.GetControllerOf(cur.ti) != nil {
		return cur.ti, nil
	}
	candidates, err := cur.profiles(ctx)
	if err != nil {
		return nil, err
	}
	return expansion.Reexpand(cur.ti, nil, candidates, r.Builtins)
}

// secretData returns the complete data of the instance's Secret: what exists (in the cache, or last
// applied when the cache has not caught up) plus newly generated values for missing keys only.
func (r *TiledInstanceReconciler) secretData(ctx context.Context, cur *instanceState, spec *tiledv1alpha1.TiledInstance) (map[string][]byte, error) {
	return r.completeSecretData(ctx, cur, spec, names.For(spec.Namespace, spec.Name).Secret,
		func(s instanceSecrets) map[string][]byte { return s.data }, render.GenerateSecretData)
}

// metricsSecretData returns the complete data of the instance's metrics Secret, as secretData does
// for its Secret: the existing token, or a new one when a ServiceMonitor is asked for and none exists
// (render.GenerateMetricsSecretData). Without a ServiceMonitor it is the existing data, nil when there
// is none: a metrics Secret once made stays rendered, as the operator has no permission to delete
// (prune) Secrets (render.MetricsSecret).
func (r *TiledInstanceReconciler) metricsSecretData(ctx context.Context, cur *instanceState, spec *tiledv1alpha1.TiledInstance) (map[string][]byte, error) {
	data, err := r.completeSecretData(ctx, cur, spec, names.For(spec.Namespace, spec.Name).MetricsSecret,
		func(s instanceSecrets) map[string][]byte { return s.metrics }, render.GenerateMetricsSecretData)
	if err != nil || len(data) == 0 {
		return nil, err
	}
	return data, nil
}

// completeSecretData is the data of the instance's Secret name as the cache holds it, or, when the
// cache has not yet seen it, as last applied for this instance (remembered picks it from memory),
// with what generate returns for the keys missing from it: existing values are never regenerated.
func (r *TiledInstanceReconciler) completeSecretData(ctx context.Context, cur *instanceState, spec *tiledv1alpha1.TiledInstance,
	name string, remembered func(instanceSecrets) map[string][]byte,
	generate func(*tiledv1alpha1.TiledInstance, map[string][]byte, io.Reader) (map[string][]byte, error)) (map[string][]byte, error) {
	existing := map[string][]byte{}
	data, err := cur.secret(ctx, name)
	switch {
	case err == nil:
		for k, v := range data {
			existing[k] = v
		}
	case apierrors.IsNotFound(err):
		key := types.NamespacedName{Namespace: spec.Namespace, Name: spec.Name}
		if prev, ok := r.memories.secrets.load(key); ok && prev.uid == spec.UID {
			for k, v := range remembered(prev) {
				existing[k] = v
			}
		}
	default:
		return nil, err
	}
	gen, err := generate(spec, existing, r.random())
	if err != nil {
		return nil, fmt.Errorf("generating the Secret %s of %s/%s: %w", name, spec.Namespace, spec.Name, err)
	}
	for k, v := range gen {
		existing[k] = v
	}
	return existing, nil
}

func (r *TiledInstanceReconciler) random() io.Reader {
	if r.Random != nil {
		return r.Random
	}
	return rand.Reader
}

// desire returns the children the instance wants (package desired, which keeps the prepared form
// of the last render per instance); a render error stalls the instance.
func (r *TiledInstanceReconciler) desire(cur *instanceState, in instanceInputs) (*desired.Children, error) {
	in.render.CatalogExpected = catalogExpected(&cur.ti.Status)
	want, err := r.memories.rendered.Render(cur.ti, in.spec, in.render)
	if err != nil {
		return nil, renderStall(err)
	}
	return want, nil
}

// renderStall is err as a stall when it is a render error (the instance cannot be rendered as it
// is), err itself otherwise.
func renderStall(err error) error {
	var renderErr *desired.RenderError
	if errors.As(err, &renderErr) {
		return &stall{reason: ReasonRenderFailed, message: renderErr.Error()}
	}
	return err
}

// externalSecretRetry is how often a stall for a missing external Secret (the database's, the
// streaming cache's) looks again: Secrets the operator does not own are not watched.
func (r *TiledInstanceReconciler) externalSecretRetry() time.Duration {
	if r.ExternalSecretRetry == 0 {
		return 10 * time.Second
	}
	return r.ExternalSecretRetry
}
