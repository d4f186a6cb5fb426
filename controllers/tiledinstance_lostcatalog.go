package controllers

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/catalog"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// lostCatalog is the stage between restore and upgrade: package catalog decides whether the
// instance's catalog is lost (its database claim is not the one the catalog lived on, or a Tiled
// pod's migrate step found the catalog database empty) and what that asks: Tiled stopped, scheduled
// backups suspended, the restore of the newest whole backup under spec.backup.onCatalogLost
// RestoreLatest. A change of status.catalogLost is recorded, with its condition and its one Event,
// before anything is applied, so that a restarted operator carries on where this one stopped. It
// reports whether the loss owns the instance's lifecycle (the upgrade stage then waits), and leaves
// in in.claim the database claim it read (the status stage records its UID once the catalog exists).
func (r *TiledInstanceReconciler) lostCatalog(ctx context.Context, cur *instanceState, in *instanceInputs) (bool, error) {
	ti, spec := cur.ti, in.spec
	n := names.For(spec.Namespace, spec.Name)
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	if w, ok := r.memories.upgrades.load(key); ok {
		w.apply(&r.memories, ti) // what was written and the cache does not show yet
	}
	o := catalog.Observed{
		Instance: ti.Namespace + "/" + ti.Name, Name: ti.Name,
		Managed:   spec.Spec.Database != nil && spec.Spec.Database.Managed != nil,
		ClaimName: n.DatabaseClaim,
		Database:  ti.Status.Database, Lost: ti.Status.CatalogLost,
		Target:       render.BackupTarget(spec),
		NewestBackup: catalog.NewestBackup(ti.Status.Backup),
		Accept:       ti.Annotations[tiledv1alpha1.AnnotationAcceptCatalogLoss],
		ToolsImage:   r.Builtins.Image(expansion.ImagePostgreSQL),
		Now:          time.Now(),
	}
	if b := spec.Spec.Backup; b != nil {
		o.Policy = b.OnCatalogLost
	}
	if t := spec.Spec.Tiled; t != nil {
		o.Version, _ = tiledversion.Of(t.Image, t.Version)
	}
	if o.Managed {
		claim, err := cur.child(ctx, applier.Key{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: ti.Namespace, Name: n.DatabaseClaim})
		if err != nil {
			return false, err
		}
		if claim != nil {
			o.Claim = &catalog.Claim{UID: string(claim.GetUID()), Terminating: claim.GetDeletionTimestamp() != nil}
		}
		in.claim = o.Claim
	}
	if o.Database == nil || o.Database.CatalogRevision == "" && o.Lost == nil {
		return false, nil // no catalog yet: a new instance starts as it always did
	}
	pods, err := cur.pods(ctx)
	if err != nil {
		return false, err
	}
	o.EmptyReported = emptyCatalogReported(pods.server)
	if l := o.Lost; l != nil && l.RestoreCompletionTime != nil {
		o.Reported = revisionReportedSince(pods.server, l.RestoreCompletionTime.Time)
	}
	d := catalog.Decide(o)
	if l := d.Lifecycle; l != nil && l.Step != nil {
		j, err := cur.job(ctx, l.Step.JobName(spec, in.render))
		if err != nil {
			return false, err
		}
		if j != nil {
			bj := backupJob(l.Step.JobName(spec, in.render), *j)
			o.Job = &bj
			d = catalog.Decide(o)
		}
	}
	if d.Lifecycle != nil {
		in.render.Lifecycle = d.Lifecycle
		// The upgrade stage, which keeps it otherwise, does not run while the loss is handled.
		if err := keepBackupClaim(ctx, cur, n, &in.render); err != nil {
			return false, err
		}
	}
	in.claimRecheck = d.Lost != nil && o.Managed && o.Claim == nil
	in.upgrade = upgrade.Decision{Lifecycle: d.Lifecycle}
	if s := d.Stall; s != nil {
		in.upgrade.Stall = &upgrade.Condition{Reason: s.Reason, Message: s.Message}
	} else if p := d.Progress; p != nil {
		in.upgrade.Progress = &upgrade.Condition{Reason: p.Reason, Message: p.Message}
	}
	if d.Changed {
		status := ti.Status.DeepCopy()
		status.CatalogLost = d.Lost
		if status.Database == nil {
			status.Database = &tiledv1alpha1.DatabaseStatus{}
		}
		if d.ClaimUID != "" {
			status.Database.ClaimUID = d.ClaimUID
		}
		if d.ForgetCatalog {
			status.Database.CatalogRevision = ""
		}
		switch {
		case d.Stall != nil:
			setStalled(&status.Conditions, ti.Generation, d.Stall.Reason, d.Stall.Message)
		case d.Progress != nil:
			removeCondition(&status.Conditions, ConditionStalled)
			setReconciling(&status.Conditions, ti.Generation, d.Progress.Reason, d.Progress.Message)
		default:
			removeCondition(&status.Conditions, ConditionStalled) // the status stage says what follows
		}
		sent, err := r.writeStatus(ctx, ti, status)
		if err != nil {
			return false, err
		}
		r.memories.upgrades.store(key, written(ti, status))
		ti.Status = *status
		if e := d.Event; e != nil && sent {
			typ := corev1.EventTypeNormal
			if e.Warning {
				typ = corev1.EventTypeWarning
			}
			r.Recorder.Eventf(ti, nil, typ, e.Reason, "CatalogLost", "%s", eventNote(e.Message))
		}
	}
	return d.Lost != nil && d.Lifecycle != nil, nil
}

// catalogExpected says the instance had a catalog: its ConfigMap then tells the migrate step never
// to initialise one (render.CatalogExpectedKey).
func catalogExpected(st *tiledv1alpha1.TiledInstanceStatus) bool {
	return st.CatalogLost != nil || st.Database != nil && st.Database.CatalogRevision != ""
}

// emptyCatalogReported says a Tiled pod's migrate step refused an empty catalog database where the
// instance had a catalog: its last or current run ended with entrypoint.py's report
// {"catalogLost": true, ...}.
func emptyCatalogReported(server []corev1.Pod) bool {
	for i := range server {
		for _, cs := range server[i].Status.InitContainerStatuses {
			if cs.Name != "migrate" {
				continue
			}
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t != nil && t.ExitCode != 0 && strings.Contains(t.Message, `"catalogLost":true`) {
					return true
				}
			}
		}
	}
	return false
}

// revisionReportedSince is the catalog revision the migrate step of the newest Tiled pod created
// after since reported ("" when none did yet).
func revisionReportedSince(server []corev1.Pod, since time.Time) string {
	var after []corev1.Pod
	for _, p := range server {
		if !p.CreationTimestamp.Time.Before(since) {
			after = append(after, p)
		}
	}
	if r := reportOf(after); r != nil && r.Catalog != nil {
		return r.Catalog.Rev()
	}
	return ""
}
