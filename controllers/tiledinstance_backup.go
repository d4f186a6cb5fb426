package controllers

import (
	"context"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// The backup CronJob of each instance with a backup target (render.BackupCronJob); its Jobs are the
// kube-controller-manager's, read (cached, labelled) for their results.
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=list;watch;create;patch;delete

// restore is the stage before upgrade for an instance with spec.backup.restoreFrom and no restore
// recorded (package backup's Restore): Tiled stays stopped while a Job restores its empty databases
// from the backup; the end is recorded in status.backup.restore, once, before Tiled starts. It
// reports whether the restore is under way (or stalled): the upgrade stage then waits.
func (r *TiledInstanceReconciler) restore(ctx context.Context, cur *instanceState, in *instanceInputs) (bool, error) {
	ti, spec := cur.ti, in.spec
	b := spec.Spec.Backup
	var recorded *tiledv1alpha1.RestoreRecord
	if ti.Status.Backup != nil {
		recorded = ti.Status.Backup.Restore
	}
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	if w, ok := r.memories.upgrades.load(key); ok && recorded == nil && w.uid == ti.UID {
		recorded = w.restore // written, and the cache has not caught up
	}
	if b == nil || b.RestoreFrom == "" || recorded != nil {
		return false, nil
	}
	o := backup.RestoreObserved{Instance: ti.Namespace + "/" + ti.Name, Spec: spec, ToolsImage: r.Builtins.Image(expansion.ImagePostgreSQL), Now: time.Now()}
	if t := spec.Spec.Tiled; t != nil {
		o.Version, _ = tiledversion.Of(t.Image, t.Version)
	}
	step := &render.Step{Kind: render.StepBootstrap, Backup: b.RestoreFrom, FromVersion: o.Version}
	j, err := cur.job(ctx, step.JobName(spec, in.render))
	if err != nil {
		return false, err
	}
	if sts := cur.statefulSet(ctx, stsKey(ti.Namespace, names.For(spec.Namespace, spec.Name).Tiled)); sts != nil {
		o.Serving = sts.Spec.Replicas != nil && *sts.Spec.Replicas > 0
	}
	if j != nil {
		bj := backupJob(step.JobName(spec, in.render), *j)
		o.Job = &bj
	}
	d := backup.Restore(o, recorded)
	if d.Record == nil {
		in.render.Lifecycle = d.Lifecycle
		in.upgrade = upgrade.Decision{Lifecycle: d.Lifecycle}
		if s := d.Stall; s != nil {
			in.upgrade.Stall = &upgrade.Condition{Reason: s.Reason, Message: s.Message}
		} else if p := d.Progress; p != nil {
			in.upgrade.Progress = &upgrade.Condition{Reason: p.Reason, Message: p.Message}
		}
		return true, nil
	}
	status := ti.Status.DeepCopy()
	if status.Backup == nil {
		status.Backup = &tiledv1alpha1.BackupStatus{Target: render.BackupTarget(spec)}
	}
	status.Backup.Restore = d.Record
	sent, err := r.writeStatus(ctx, ti, status)
	if err != nil {
		return false, err
	}
	r.memories.upgrades.store(key, written(ti, status))
	ti.Status = *status
	if e := d.Event; e != nil && sent {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeNormal, e.Reason, "Restore", "%s", eventNote(e.Message))
	}
	return false, nil
}

// backupStatus sets status.backup and the BackedUp condition from the backup Jobs the cache shows
// (package backup's Status and Condition), and returns the Event of a backup that ended since the
// status was last written (nil: none), and whether a Job that ended waits for its pod's report to
// reach the cache (look again shortly).
func (r *TiledInstanceReconciler) backupStatus(ctx context.Context, cur *instanceState, in instanceInputs, status *tiledv1alpha1.TiledInstanceStatus) (*backupEvent, bool, error) {
	ti, spec := cur.ti, in.spec
	target := render.BackupTarget(spec)
	var jobs []backup.Job
	pending := false
	if target != "" || status.Backup != nil {
		var list batchv1.JobList
		if err := cur.c.List(ctx, &list, client.InNamespace(ti.Namespace), client.MatchingLabels{
			tiledv1alpha1.LabelAppInstance: ti.Name, tiledv1alpha1.LabelStep: render.LabelStepScheduledBackup,
		}); err != nil {
			return nil, false, err
		}
		sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].Name < list.Items[b].Name })
		var last *tiledv1alpha1.BackupRecord
		if status.Backup != nil {
			last = status.Backup.Last
		}
		for i := range list.Items {
			j := &list.Items[i]
			if st, _ := jobConditions(j); !st.Complete && !st.Failed {
				continue // running
			} else if last != nil && (last.Job == j.Name || st.CompletionTime.Truncate(time.Second).Before(last.CompletionTime.Time)) {
				continue // recorded: its pod need not be read
			}
			st, err := cur.jobOf(ctx, j)
			if err != nil {
				return nil, false, err
			}
			bj := backupJob(j.Name, *st)
			if bj.Complete && bj.Message == "" {
				// The pod's report has not reached the cache: recorded once it has (a record is
				// never revisited).
				pending = true
				continue
			}
			jobs = append(jobs, bj)
		}
	}
	prev := status.Backup
	status.Backup = backup.Status(prev, target, jobs) // keeps prev's records, the restore's too
	c, reason, msg, ok := backup.Condition(ti.Namespace+"/"+ti.Name, spec, status.Backup)
	if ok {
		setCondition(&status.Conditions, ti.Generation, backup.ConditionBackedUp, c, reason, msg)
	} else {
		removeCondition(&status.Conditions, backup.ConditionBackedUp)
	}
	if st := status.Backup; st != nil && st.Last != nil && (prev == nil || prev.Last == nil || prev.Last.Job != st.Last.Job) {
		if st.Last.Result == backup.ResultFailed {
			return &backupEvent{warning: true, reason: backup.ReasonBackupFailed, message: msg}, pending, nil
		}
		return &backupEvent{reason: backup.ReasonBackedUp, message: msg}, pending, nil
	}
	return nil, pending, nil
}

// backupEvent is the Event of a backup that ended.
type backupEvent struct {
	warning         bool
	reason, message string
}

// backupJobFinished passes the end of a backup Job (the CronJob's: the Owns watch does not see them,
// they are not the instance's).
var backupJobFinished = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*batchv1.Job)
		n, ok2 := e.ObjectNew.(*batchv1.Job)
		if !ok1 || !ok2 || n.Labels[tiledv1alpha1.LabelStep] != render.LabelStepScheduledBackup {
			return false
		}
		return jobEnded(n) && !jobEnded(o)
	},
}

func jobEnded(j *batchv1.Job) bool {
	st, _ := jobConditions(j)
	return st.Complete || st.Failed
}

// backupJob is package backup's view of the Job name in state st.
func backupJob(name string, st upgrade.Job) backup.Job {
	return backup.Job{Name: name, Complete: st.Complete, Failed: st.Failed, StartTime: st.StartTime, CompletionTime: st.CompletionTime, Message: st.Message, Retrying: st.Retrying}
}
