package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/controllers/inplace"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// restoreInPlace is the stage between the lost catalog and the upgrade: a restore of the instance's
// databases from one of its backups while it serves, requested by the annotation
// tiled.blueskyproject.io/restore (`kubectl tiled restore`); package inplace decides. busy says what
// else holds the instance's lifecycle ("" nothing: the bootstrap restore or a lost catalog, seen by
// the stages before; an upgrade is read here from status.upgrade): a new request is then refused.
// Each new phase is recorded in status.inPlaceRestore, with the Restored condition and its Event,
// before its step is applied, so that a restarted operator carries on and a request is acted on
// once (the memories keep what was written until the cache shows it). It reports whether the
// restore holds the lifecycle: the upgrade stage then waits.
func (r *TiledInstanceReconciler) restoreInPlace(ctx context.Context, cur *instanceState, in *instanceInputs, busy string) (bool, error) {
	ti, spec := cur.ti, in.spec
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	if w, ok := r.memories.upgrades.load(key); ok {
		w.apply(&r.memories, ti) // what was written and the cache does not show yet
	}
	o := inplace.Observed{
		Instance: ti.Namespace + "/" + ti.Name, Name: ti.Name,
		Request: inplace.RequestOf(ti.Annotations), Status: ti.Status.InPlaceRestore,
		Busy: busy, Target: render.BackupTarget(spec),
		ToolsImage: r.Builtins.Image(expansion.ImagePostgreSQL), Now: time.Now(),
	}
	if c := meta.FindStatusCondition(ti.Status.Conditions, inplace.ConditionRestored); c != nil {
		// The last restore's outcome holds at every generation: the status stage writes it current.
		c.ObservedGeneration = ti.Generation
	}
	if r := o.Request; !inplace.Active(o.Status) && (r == nil || o.Status != nil && o.Status.Request == r.ID) {
		return false, nil // nothing new asked, nothing under way: nothing is read
	}
	if u := ti.Status.Upgrade; o.Busy == "" && u != nil {
		o.Busy = fmt.Sprintf("an upgrade of Tiled %s -> %s (status.upgrade.phase %s)", orUnknown(u.FromVersion, u.FromImage), orUnknown(u.ToVersion, u.ToImage), u.Phase)
	}
	if b := ti.Status.Backup; b != nil {
		o.Available = b.Available
	}
	if t := spec.Spec.Tiled; t != nil {
		o.Version, _ = tiledversion.Of(t.Image, t.Version)
	}
	n := names.For(spec.Namespace, spec.Name)
	if sts := cur.statefulSet(ctx, stsKey(ti.Namespace, n.Tiled)); sts != nil {
		o.ServingImage = containerImage(sts, "tiled")
		// The version that serves (an upgrade held for its maintenance window has not run yet): as
		// its pods reported it, else as its image says.
		if v := ti.Status.Version; v != "" {
			o.Version = v
		} else if v, ok := tiledversion.Of(o.ServingImage, ""); ok && o.ServingImage != "" {
			o.Version = v
		}
		o.ServerReady = sts.Spec.Replicas != nil && *sts.Spec.Replicas > 0 && statefulSetReadyAt(sts, sts.Generation, *sts.Spec.Replicas)
	}
	var cachePods []corev1.Pod
	if st := o.Status; inplace.Active(st) {
		pods, err := cur.pods(ctx)
		if err != nil {
			return false, err
		}
		o.ServerPods = len(pods.server)
		o.ManagedCache = render.ManagedCacheEnabled(spec)
		cachePods = pods.cache
		if step := inplace.CurrentStep(o, st); step != nil {
			j, err := cur.job(ctx, step.JobName(spec, in.render))
			if err != nil {
				return false, err
			}
			o.Job = j
		}
	}
	if st := o.Status; o.Job == nil && (o.Request != nil && (st == nil || st.Request != o.Request.ID) || st != nil && st.Phase == tiledv1alpha1.InPlaceRestoreBackingUp) {
		// The backup does not start beside a scheduled one, whose pruning could take the backup
		// about to be restored.
		var err error
		if o.ScheduledBackup, err = cur.runningScheduledBackup(ctx); err != nil {
			return false, err
		}
	}
	d := inplace.Decide(o)
	if d.Active && busy == "" {
		// (A lost catalog found while a restore runs keeps the lifecycle it asks for: Tiled is not
		// started on it; the restore waits.)
		in.render.Lifecycle = d.Lifecycle
		if err := keepBackupClaim(ctx, cur, n, &in.render); err != nil {
			return false, err
		}
		in.upgrade = upgrade.Decision{Lifecycle: d.Lifecycle}
		if s := d.Stall; s != nil {
			in.upgrade.Stall = &upgrade.Condition{Reason: s.Reason, Message: s.Message}
		} else if p := d.Progress; p != nil {
			in.upgrade.Progress = &upgrade.Condition{Reason: p.Reason, Message: p.Message}
		}
	}
	if !d.Changed {
		return d.Active && busy == "", nil
	}
	if d.FlushCache {
		// Emptied before the phase that starts Tiled is recorded: a write that fails empties it
		// again, Tiled still stopped.
		if err := r.flushCache(ctx, cachePods); err != nil {
			return false, err
		}
	}
	status := ti.Status.DeepCopy()
	status.InPlaceRestore = d.Status
	folded := false
	if st := o.Status; st != nil && st.Phase == tiledv1alpha1.InPlaceRestoreBackingUp && o.Job != nil && (o.Job.Complete || o.Job.Failed) && o.Request != nil && o.Request.ID == st.Request {
		// The backup of the databases as they were ended: recorded as a scheduled one is, so that
		// `kubectl tiled backups` lists it at once.
		step := inplace.CurrentStep(o, st)
		status.Backup = backup.UpgradeBackup(status.Backup, o.Target, backupJob(step.JobName(spec, in.render), *o.Job), st.PreRestoreBackup)
		folded = true
	}
	if c := d.Condition; c != nil {
		setCondition(&status.Conditions, ti.Generation, inplace.ConditionRestored, c.Status, c.Reason, c.Message)
	}
	switch {
	case busy != "":
		// What holds the lifecycle says what the instance is doing.
	case d.Stall != nil:
		setStalled(&status.Conditions, ti.Generation, d.Stall.Reason, d.Stall.Message)
	case d.Progress != nil:
		removeCondition(&status.Conditions, ConditionStalled)
		setReconciling(&status.Conditions, ti.Generation, d.Progress.Reason, d.Progress.Message)
	}
	sent, err := r.writeStatus(ctx, ti, status)
	if err != nil {
		return false, err
	}
	r.lifecycleWritten(ti, status, folded, sent, d.Event, "Restore")
	return d.Active && busy == "", nil
}

// flushCache empties the managed streaming cache by deleting its pods (the cache's own objects,
// from the cache: each deleted at the UID and resourceVersion read); its StatefulSet makes the pod
// again on a new emptyDir. A pod already gone, or changed since it was read, is left to the next
// reconcile.
func (r *TiledInstanceReconciler) flushCache(ctx context.Context, pods []corev1.Pod) error {
	for i := range pods {
		p := pods[i].DeepCopy()
		if p.DeletionTimestamp != nil {
			continue
		}
		uid, rv := p.UID, p.ResourceVersion
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func orUnknown(version, image string) string {
	if version != "" {
		return version
	}
	return image
}
