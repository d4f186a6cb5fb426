package controllers

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// The Jobs of the upgrade procedure's steps (check, backup, migrate, restore).
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=list;watch;create;patch;delete

// upgrade is the stage between inputs and desire: when spec.tiled.image differs from the image the
// Tiled StatefulSet runs, package upgrade decides the procedure's next step from what the cache
// shows (the step's Job, the Tiled pods). A new phase is recorded in the status before anything is
// applied, so a restarted operator carries on where this one stopped; what the step needs (the
// image that serves meanwhile, Tiled stopped, the step's Job, the backup claim) goes into the
// render's inputs.
func (r *TiledInstanceReconciler) upgrade(ctx context.Context, cur *instanceState, in *instanceInputs) (upgrade.Decision, error) {
	ti, spec := cur.ti, in.spec
	n := names.For(spec.Namespace, spec.Name)
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	if w, ok := r.memories.upgrades.load(key); ok {
		w.apply(&r.memories, ti) // ti is this reconcile's copy
	}
	o := upgrade.Observed{Upgrade: ti.Status.Upgrade, Target: render.BackupTarget(spec), ToolsImage: r.Builtins.Image(expansion.ImagePostgreSQL), Now: time.Now()}
	if t := spec.Spec.Tiled; t != nil {
		o.SpecImage = t.Image
		o.SpecVersion, _ = tiledversion.Of(t.Image, t.Version)
	}
	if m := ti.Status.LastMigration; m != nil {
		o.LastBackup, o.LastBackupTarget = m.Backup, m.BackupTarget
	}
	sts := cur.statefulSet(ctx, stsKey(ti.Namespace, n.Tiled))
	if sts != nil {
		o.ServingImage = containerImage(sts, "tiled")
		o.ServingVersion = ti.Status.Version
		if o.ServingVersion == "" {
			o.ServingVersion, _ = tiledversion.Of(o.ServingImage, "")
		}
		want := o.SpecImage
		if o.Upgrade != nil {
			want = o.Upgrade.ToImage // Starting runs the upgrade's target, whatever the spec says now
		}
		o.ServerReady = o.ServingImage == want && sts.Spec.Replicas != nil && *sts.Spec.Replicas > 0 &&
			statefulSetReadyAt(sts, sts.Generation, *sts.Spec.Replicas)
	}
	if o.ServingImage == "" && o.Upgrade == nil {
		return upgrade.Decision{}, nil // a new instance: nothing to upgrade
	}
	if o.Upgrade == nil && o.ServingImage != o.SpecImage {
		held, approved := upgradeHeld(ti, in.window, o.ServingImage, o.SpecImage)
		if held {
			// The upgrade waits for the maintenance window, or an approval (the render gate keeps
			// the Tiled StatefulSet as it is, serving the image it serves).
			in.heldUpgrade = o.ServingImage + " to " + o.SpecImage
			in.upgradeFrom, in.upgradeTo = o.ServingImage, o.SpecImage
			return upgrade.Decision{}, keepBackupClaim(ctx, cur, n, &in.render)
		}
		cur.approved = approved // an approved upgrade starts
	}
	if o.Upgrade != nil {
		// What a step waits for: the Tiled pods gone (Stopping), the step's Job. An instance with
		// no upgrade under way reads neither.
		pods, err := cur.pods(ctx)
		if err != nil {
			return upgrade.Decision{}, err
		}
		o.ServerPods = len(pods.server)
		if step := upgrade.CurrentStep(o.Upgrade); step != nil {
			if o.Job, err = cur.job(ctx, step.JobName(spec, in.render)); err != nil {
				return upgrade.Decision{}, err
			}
		}
		if p := o.Upgrade.Phase; p == tiledv1alpha1.UpgradeChecking || p == tiledv1alpha1.UpgradeBackingUp {
			// The upgrade's dump does not start beside a scheduled one (from the check's end on).
			if o.ScheduledBackup, err = cur.runningScheduledBackup(ctx); err != nil {
				return upgrade.Decision{}, err
			}
		}
	}
	d := upgrade.Decide(o)
	in.render.Lifecycle = d.Lifecycle
	if err := keepBackupClaim(ctx, cur, n, &in.render); err != nil {
		return upgrade.Decision{}, err
	}
	if !d.Changed {
		return d, nil
	}
	// Record the new phase (and the migration's record) before its step is applied.
	status := ti.Status.DeepCopy()
	status.Upgrade = d.Upgrade
	folded := false
	if u := o.Upgrade; u != nil && u.Phase == tiledv1alpha1.UpgradeBackingUp && u.BackupTarget != "" && o.Job != nil && (o.Job.Complete || o.Job.Failed) {
		// The backup to the target ended: recorded as a scheduled one is (status.backup: the last
		// backup, the whole ones its pruning left), so that the listing shows it at once.
		status.Backup = backup.UpgradeBackup(status.Backup, o.Target, backupJob(upgrade.CurrentStep(u).JobName(spec, in.render), *o.Job), u.Backup)
		folded = true
	}
	if d.Record != nil {
		status.LastMigration = d.Record
	}
	if s := d.Stall; s != nil {
		setStalled(&status.Conditions, ti.Generation, s.Reason, s.Message)
	} else if p := d.Progress; p != nil {
		removeCondition(&status.Conditions, ConditionStalled)
		setReconciling(&status.Conditions, ti.Generation, p.Reason, p.Message)
	}
	sent, err := r.writeStatus(ctx, ti, status)
	if err != nil {
		return upgrade.Decision{}, err
	}
	if sent && d.Record != nil {
		// The migration's end is recorded (status.lastMigration) by this write, once.
		r.Metrics.migrationEnded(ti, d.Record)
	}
	r.lifecycleWritten(ti, status, folded, sent, d.Event, "Upgrade")
	return d, nil
}

// lifecycleWritten ends a status write of a lifecycle stage (action: Upgrade, Restore) over ti: what
// it recorded is remembered until the cache shows it (with status.backup when the write folded a
// backup's end into it), a stall it records anew is announced once unless the decision's own Event
// (ev; nil: none) says it, ti takes the status written, and ev is sent — each only when the write
// was sent, so that a transition is said once.
func (r *TiledInstanceReconciler) lifecycleWritten(ti *tiledv1alpha1.TiledInstance, status *tiledv1alpha1.TiledInstanceStatus, folded, sent bool, ev *upgrade.Event, action string) {
	w := written(ti, status)
	if folded {
		w.backup = status.Backup
	}
	r.memories.upgrades.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}, w)
	if c, changed := transitioned(ti.Status.Conditions, status.Conditions, ConditionStalled); sent && changed && c.Status == metav1.ConditionTrue &&
		(ev == nil || ev.Reason != c.Reason) {
		r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, c.Reason, action, "%s", eventNote(c.Message))
	}
	ti.Status = *status
	if ev != nil && sent {
		typ := corev1.EventTypeWarning
		if ev.Normal {
			typ = corev1.EventTypeNormal
		}
		r.Recorder.Eventf(ti, nil, typ, ev.Reason, action, "%s", eventNote(ev.Message))
	}
}

// keepBackupClaim keeps the backup claim rendered once an upgrade made it: it holds backups (and,
// under the Delete policy, would otherwise be pruned with them), whatever the render's lifecycle.
func keepBackupClaim(ctx context.Context, cur *instanceState, n names.Objects, in *render.Inputs) error {
	if l := in.Lifecycle; l != nil && l.BackupClaim {
		return nil
	}
	claim, err := cur.child(ctx, applier.Key{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: cur.ti.Namespace, Name: n.BackupClaim})
	if err != nil || claim == nil {
		return err
	}
	if in.Lifecycle == nil {
		in.Lifecycle = &render.Lifecycle{BackupClaim: true}
	} else {
		l := *in.Lifecycle // the decision's own is not changed
		l.BackupClaim = true
		in.Lifecycle = &l
	}
	return nil
}

// runningScheduledBackup names a scheduled backup Job of the instance that runs (the CronJob's, or
// one `kubectl tiled backup` made from it; "" when none does), from the cache.
func (s *instanceState) runningScheduledBackup(ctx context.Context) (string, error) {
	var list batchv1.JobList
	if err := s.c.List(ctx, &list, client.InNamespace(s.ti.Namespace), client.MatchingLabels{
		tiledv1alpha1.LabelAppInstance: s.ti.Name, tiledv1alpha1.LabelStep: render.LabelStepScheduledBackup,
	}); err != nil {
		return "", err
	}
	var running []string
	for i := range list.Items {
		j := &list.Items[i]
		if st, _ := jobConditions(j); !st.Complete && !st.Failed && j.DeletionTimestamp == nil {
			running = append(running, j.Name)
		}
	}
	if len(running) == 0 {
		return "", nil
	}
	slices.Sort(running)
	return running[0], nil
}

// containerImage is the image of the container name in the StatefulSet's pod template.
func containerImage(sts *appsv1.StatefulSet, name string) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}

// job returns the state of the Job name of this instance as the cache holds it, with its pod's
// termination message (nil when the cache does not hold it).
func (s *instanceState) job(ctx context.Context, name string) (*upgrade.Job, error) {
	j := &batchv1.Job{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ti.Namespace, Name: name}, j); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return s.jobOf(ctx, j)
}

// jobOf is the state of the Job j with its pod's termination message (from the cache): a running
// Job whose pod cannot start has failed; a failed one whose pod said nothing gives its own reason.
func (s *instanceState) jobOf(ctx context.Context, j *batchv1.Job) (*upgrade.Job, error) {
	out, failure := jobConditions(j)
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.ti.Namespace), client.MatchingFields{podInstanceIndex: s.ti.Name},
		client.MatchingLabels{batchv1.JobNameLabel: j.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	if !out.Complete && !out.Failed {
		// A step whose pod cannot start (an image that cannot be pulled, a bad reference) would
		// otherwise wait for the Job's deadline: it has failed.
		if p, _ := podstatus.Diagnose(pods.Items, time.Now(), DefaultProbeGrace); p != nil && p.Stalled {
			out.Failed, out.Message, out.CompletionTime = true, p.Message, time.Now()
		}
		out.Retrying = lastTermination(pods.Items, func(t *corev1.ContainerStateTerminated) bool { return t.ExitCode == render.ExitTryAgain })
		return &out, nil
	}
	// A Job runs a pod again after one that could not reach what it needed (render.ExitTryAgain):
	// the last pod to end speaks for the Job.
	out.Message = lastTermination(pods.Items, func(t *corev1.ContainerStateTerminated) bool { return t.Message != "" })
	if out.Failed && out.Message == "" {
		out.Message = failure // no pod said why (a deadline, a pod that never ran): the Job does
	}
	return &out, nil
}

// lastTermination is the termination message of the container of pods that ended last among those
// keep accepts ("" when none did).
func lastTermination(pods []corev1.Pod, keep func(*corev1.ContainerStateTerminated) bool) string {
	var msg string
	var last time.Time
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && keep(t) && !t.FinishedAt.Time.Before(last) {
				msg, last = t.Message, t.FinishedAt.Time
			}
		}
	}
	return msg
}

// jobConditions is what the Job's own status says: complete or failed, its times, and why it
// failed ("reason: message" of its Failed condition). Its pods are not read.
func jobConditions(j *batchv1.Job) (out upgrade.Job, failure string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			out.Complete = true
		case batchv1.JobFailed:
			out.Failed = true
			out.CompletionTime = c.LastTransitionTime.Time
			failure = strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	if t := j.Status.StartTime; t != nil {
		out.StartTime = t.Time
	}
	if t := j.Status.CompletionTime; t != nil {
		out.CompletionTime = t.Time
	}
	return out, failure
}

// reportOf reads the revisions report the migrate init container of the newest Tiled pod left (the
// Tiled version and the databases' revisions), nil when none has.
func reportOf(server []corev1.Pod) *upgrade.Report {
	var newest *corev1.Pod
	var report *upgrade.Report
	for i := range server {
		p := &server[i]
		for _, cs := range p.Status.InitContainerStatuses {
			t := cs.State.Terminated
			if cs.Name != "migrate" || t == nil || t.ExitCode != 0 {
				continue
			}
			if r, err := upgrade.ParseReport(t.Message); err == nil && (newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp)) {
				newest, report = p, r
			}
		}
	}
	return report
}

// maxEventNote is the longest note an Event may carry (events.k8s.io/v1 refuses a longer one, and the
// Event is lost).
const maxEventNote = 1024

// eventNote is msg cut, on a rune boundary, to fit an Event's note.
func eventNote(msg string) string {
	if len(msg) <= maxEventNote {
		return msg
	}
	cut := maxEventNote - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}
