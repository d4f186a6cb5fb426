package inplace

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/render"
)

// The condition a restore in place keeps, and its reasons (also the Events').
const (
	// ConditionRestored says how the last restore in place went: Unknown while it runs, True once
	// Tiled serves the restored databases, False when it was refused or failed. It never makes the
	// instance unready by itself (a restore that keeps Tiled stopped stalls the instance).
	ConditionRestored = "Restored"

	ReasonRestoreRequested = "RestoreRequested"
	ReasonRestoringInPlace = "RestoringInPlace"
	ReasonRestoredInPlace  = "RestoredInPlace"
	ReasonRestoreRefused   = "RestoreRefused"
	ReasonRestoreFailed    = "RestoreInPlaceFailed"
	ReasonTargetChanged    = "BackupTargetChanged"

	// untouched is what dbtool.sh says when it refuses a backup before it touches any database
	// (corrupt, a database the instance lacks).
	untouched = "nothing was restored"
)

// Untouched says a failed restore Job's message is one of dbtool.sh's refusals before it touches a
// database: its checks of the backup (not found, corrupt, from a newer Tiled: each "backup NAME
// ..."), the listing of an S3 target, or an explicit "nothing was restored". Anything else (a
// database's restore that failed, a database that did not answer, a Job killed) may have left one
// database restored and another not.
func Untouched(msg, backup string) bool {
	msg = strings.TrimSpace(msg)
	return strings.Contains(msg, untouched) || strings.HasPrefix(msg, "backup "+backup+" ") || strings.HasPrefix(msg, "cannot list s3://")
}

// Request is what the annotations ask.
type Request struct {
	// ID is the request's id (AnnotationRestoreRequest; the backup's name when absent).
	ID string
	// Backup is the backup to restore (AnnotationRestore).
	Backup string
	// RequestedBy is who asked (AnnotationRestoreRequestedBy).
	RequestedBy string
}

// RequestOf is the request the annotations of an instance make (nil: none).
func RequestOf(annotations map[string]string) *Request {
	b := strings.TrimSpace(annotations[v1alpha1.AnnotationRestore])
	if b == "" {
		return nil
	}
	id := strings.TrimSpace(annotations[v1alpha1.AnnotationRestoreRequest])
	if id == "" {
		id = b
	}
	return &Request{ID: id, Backup: b, RequestedBy: strings.TrimSpace(annotations[v1alpha1.AnnotationRestoreRequestedBy])}
}

// Observed is what Decide decides from.
type Observed struct {
	// Instance is namespace/name; Name the instance's name (for the commands messages give).
	Instance, Name string
	// Request is the annotations' request (nil: none).
	Request *Request
	// Status is status.inPlaceRestore (nil: none yet).
	Status *v1alpha1.InPlaceRestoreStatus
	// Busy says what else holds the instance's lifecycle ("": nothing): an upgrade, a bootstrap
	// restore, a lost catalog. A new request is refused meanwhile; one already under way is not
	// interrupted (those wait for it: the controller runs this stage first).
	Busy string
	// Target is spec.backup's target now (render.BackupTarget; "": none).
	Target string
	// Available are the whole backups on the target the status lists (status.backup.available).
	Available []v1alpha1.AvailableBackup
	// Version is the Tiled version that serves: the pre-restore backup records it, and a backup
	// from a newer one is refused.
	Version string
	// ServingImage is the image the Tiled StatefulSet runs ("": none yet): Tiled starts again on
	// it, whatever spec.tiled.image says meanwhile (an upgrade follows the restore).
	ServingImage string
	// Job is the current step's Job (nil: not in the cache).
	Job *upgrade.Job
	// ScheduledBackup names a scheduled backup Job that runs ("": none), read for a new request and
	// before the backup Job exists: the backup waits for it, whose pruning could take the backup
	// to restore.
	ScheduledBackup string
	// ServerPods is how many Tiled pods exist; ServerReady says the Tiled StatefulSet is ready with
	// its replicas.
	ServerPods  int
	ServerReady bool
	// ManagedCache says the instance runs a managed streaming cache: emptied once the databases are
	// restored, before Tiled starts.
	ManagedCache bool
	// ToolsImage runs pg_dump and psql for an external database.
	ToolsImage string
	// Now is the time of the decision.
	Now time.Time
}

// Note is a condition's or an Event's reason and message.
type Note struct{ Reason, Message string }

// Event is an Event to send with the status that records it: Warning unless Normal. It is the
// upgrade's, so that both stages' status writes end the same way.
type Event = upgrade.Event

// Condition is the Restored condition.
type Condition struct {
	Status          metav1.ConditionStatus
	Reason, Message string
}

// Decision is what the controller does.
type Decision struct {
	// Active says the restore holds the instance's lifecycle (Lifecycle goes into the render; the
	// upgrade stage waits).
	Active    bool
	Lifecycle *render.Lifecycle
	// Status is the status.inPlaceRestore to record; Changed says it differs from Observed's and is
	// to be written before anything is applied.
	Status  *v1alpha1.InPlaceRestoreStatus
	Changed bool
	// Condition, with Changed, is the Restored condition to set.
	Condition *Condition
	// Stall or Progress is the instance's Stalled or Reconciling condition while Active.
	Stall, Progress *Note
	// Event is sent once, with the status that records it.
	Event *Event
	// FlushCache asks the controller to empty the managed streaming cache (replace its pod) before
	// it records Status: Tiled is stopped, and the restored databases must not meet updates the
	// cache holds of the databases they replaced.
	FlushCache bool
}

// Decide returns the next step of the restore in place: a new request accepted or refused, the
// next phase of one under way, or nothing.
//
// A request made while another runs waits for it to end (the phases are not interrupted: the
// databases may be changing); a restore that failed part way and keeps Tiled stopped takes the next
// request at once.
func Decide(o Observed) Decision {
	st := o.Status
	r := o.Request
	if r != nil && (st == nil || st.Request != r.ID) && (st == nil || !Running(st)) {
		return o.accept(r)
	}
	if st == nil {
		return Decision{}
	}
	switch st.Phase {
	case v1alpha1.InPlaceRestoreBackingUp:
		return o.backingUp(st)
	case v1alpha1.InPlaceRestoreStopping:
		return o.stopping(st)
	case v1alpha1.InPlaceRestoreRestoring:
		return o.restoring(st)
	case v1alpha1.InPlaceRestoreStarting:
		return o.starting(st)
	case v1alpha1.InPlaceRestoreFailed:
		if st.Stopped {
			return o.at(st)
		}
	}
	return Decision{Status: st}
}

// Running says st is under way: a phase before its outcome.
func Running(st *v1alpha1.InPlaceRestoreStatus) bool {
	switch st.Phase {
	case v1alpha1.InPlaceRestoreBackingUp, v1alpha1.InPlaceRestoreStopping, v1alpha1.InPlaceRestoreRestoring, v1alpha1.InPlaceRestoreStarting:
		return true
	}
	return false
}

// Active says st holds the instance's lifecycle: under way, or failed part way with Tiled stopped.
func Active(st *v1alpha1.InPlaceRestoreStatus) bool {
	return st != nil && (Running(st) || st.Phase == v1alpha1.InPlaceRestoreFailed && st.Stopped)
}

// who is the requester, or "an unnamed requester" when the request did not say.
func who(by string) string {
	if by == "" {
		return "an unnamed requester"
	}
	return by
}

// accept accepts or refuses request r.
func (o Observed) accept(r *Request) Decision {
	now := metav1.NewTime(o.Now.UTC().Truncate(time.Second))
	st := &v1alpha1.InPlaceRestoreStatus{Request: r.ID, Backup: r.Backup, RequestedBy: r.RequestedBy, Target: o.Target, StartTime: now, PhaseTime: &now}
	field := fmt.Sprintf("annotation %s=%s (request %s by %s)", v1alpha1.AnnotationRestore, r.Backup, r.ID, who(r.RequestedBy))
	var why string
	switch {
	case o.Busy != "":
		why = o.Busy + " holds it; request the restore again once that ends"
	case o.Target == "":
		why = "spec.backup names no backup target (claim or s3), so it has no backups to restore"
	case !slices.ContainsFunc(o.Available, func(b v1alpha1.AvailableBackup) bool { return b.Name == r.Backup }):
		why = fmt.Sprintf("%s holds no whole backup named %s (status.backup.available; list them with `kubectl tiled backups %s`)", o.Target, r.Backup, o.Name)
	}
	if why != "" {
		st.Phase, st.CompletionTime, st.PhaseTime = v1alpha1.InPlaceRestoreRefused, &now, nil
		st.Message = fmt.Sprintf("TiledInstance %s: %s refused: %s; nothing was changed", o.Instance, field, why)
		return Decision{Status: st, Changed: true,
			Condition: &Condition{metav1.ConditionFalse, ReasonRestoreRefused, st.Message},
			Event:     &Event{Reason: ReasonRestoreRefused, Message: st.Message}}
	}
	if prev := o.Status; prev != nil && prev.Phase == v1alpha1.InPlaceRestoreFailed && prev.Stopped {
		// Tiled is stopped on partly restored databases: no backup is taken of them.
		st.Phase, st.StopTime = v1alpha1.InPlaceRestoreRestoring, prev.StopTime
		if st.StopTime == nil {
			st.StopTime = &now
		}
		d := o.changed(st)
		d.Event = &Event{Normal: true, Reason: ReasonRestoreRequested, Message: fmt.Sprintf(
			"%s asked to restore TiledInstance %s from backup %s on %s (request %s); Tiled is stopped since the restore %s failed: restoring now",
			who(r.RequestedBy), o.Instance, r.Backup, o.Target, r.ID, prev.Request)}
		return d
	}
	st.Phase, st.PreRestoreBackup = v1alpha1.InPlaceRestoreBackingUp, render.PreRestoreBackupName(o.Now)
	d := o.waitForScheduled(o.changed(st))
	d.Event = &Event{Normal: true, Reason: ReasonRestoreRequested, Message: fmt.Sprintf(
		"%s asked to restore TiledInstance %s from backup %s on %s (request %s): backing up the databases as they are to %s, then stopping Tiled to restore",
		who(r.RequestedBy), o.Instance, r.Backup, o.Target, r.ID, st.PreRestoreBackup)}
	return d
}

// changed is the decision of the new phase st, recorded.
func (o Observed) changed(st *v1alpha1.InPlaceRestoreStatus) Decision {
	d := o.at(st)
	d.Changed = true
	if d.Stall == nil {
		d.Condition = &Condition{metav1.ConditionUnknown, ReasonRestoringInPlace, d.Progress.Message}
	}
	return d
}

// next moves st to phase p, now.
func (o Observed) next(st *v1alpha1.InPlaceRestoreStatus, p v1alpha1.InPlaceRestorePhase) *v1alpha1.InPlaceRestoreStatus {
	n := st.DeepCopy()
	now := metav1.NewTime(o.Now.UTC().Truncate(time.Second))
	n.Phase, n.PhaseTime = p, &now
	return n
}

// at is the decision of phase st with no news from its step.
func (o Observed) at(st *v1alpha1.InPlaceRestoreStatus) Decision {
	l := &render.Lifecycle{ServingImage: o.ServingImage, ToolsImage: o.ToolsImage}
	d := Decision{Active: true, Lifecycle: l, Status: st}
	var what string
	switch st.Phase {
	case v1alpha1.InPlaceRestoreBackingUp:
		l.SuspendBackups = true
		l.Step = &render.Step{Kind: render.StepBackup, Backup: st.PreRestoreBackup, FromVersion: o.Version, Target: st.Target, Request: st.Request, Keep: true}
		what = "backing up the databases as they are to " + st.PreRestoreBackup + "; Tiled serves"
	case v1alpha1.InPlaceRestoreStopping:
		l.Stopped = true
		what = "stopping Tiled"
	case v1alpha1.InPlaceRestoreRestoring:
		l.Stopped = true
		l.Step = &render.Step{Kind: render.StepRestore, Backup: st.Backup, FromVersion: o.Version, Target: st.Target, Request: st.Request}
		what = "restoring the databases; Tiled is stopped"
	case v1alpha1.InPlaceRestoreStarting:
		what = "starting Tiled on the restored databases"
		if st.Message != "" {
			what = "starting Tiled on the databases as they were"
		}
	case v1alpha1.InPlaceRestoreFailed: // Stopped
		l.Stopped = true
		d.Stall = &Note{ReasonRestoreFailed, st.Message}
		return d
	}
	if l.Step != nil && st.Target != o.Target {
		// The step's Job reads the target it was accepted on; spec.backup no longer names it.
		l.Step = nil
		now := "names no target"
		if o.Target != "" {
			now = "names " + o.Target
		}
		d.Stall = &Note{ReasonTargetChanged, fmt.Sprintf("TiledInstance %s: the restore of backup %s (request %s) uses %s, and spec.backup now %s: set spec.backup's target back to go on",
			o.Instance, st.Backup, st.Request, st.Target, now)}
		return d
	}
	d.Progress = &Note{ReasonRestoringInPlace, fmt.Sprintf("restoring TiledInstance %s from backup %s on %s (request %s by %s): %s",
		o.Instance, st.Backup, st.Target, st.Request, who(st.RequestedBy), what)}
	return d
}

func running(j *upgrade.Job) bool { return j == nil || (!j.Complete && !j.Failed) }

func (o Observed) backingUp(st *v1alpha1.InPlaceRestoreStatus) Decision {
	j := o.Job
	switch {
	case j == nil && o.ScheduledBackup != "":
		return o.waitForScheduled(o.at(st))
	case running(j):
		return o.at(st)
	case j.Failed:
		return o.end(st, fmt.Sprintf("TiledInstance %s: the backup of the databases to %s before restoring backup %s (request %s) failed, so nothing was restored and Tiled serves as before: %s",
			o.Instance, st.PreRestoreBackup, st.Backup, st.Request, tail(j.Message)))
	}
	n := o.next(st, v1alpha1.InPlaceRestoreStopping)
	n.StopTime = n.PhaseTime
	return o.changed(n)
}

// waitForScheduled is d, the decision of phase BackingUp before its Job exists, waiting while a
// scheduled backup runs ("": none): no backup Job is rendered meanwhile (the CronJob is suspended,
// so no other starts).
func (o Observed) waitForScheduled(d Decision) Decision {
	st := d.Status
	if o.ScheduledBackup == "" || d.Progress == nil || st.Phase != v1alpha1.InPlaceRestoreBackingUp {
		return d
	}
	d.Lifecycle.Step = nil
	d.Progress.Message = fmt.Sprintf("restoring TiledInstance %s from backup %s on %s (request %s by %s): waiting for the scheduled backup Job %s to end before backing up the databases as they are; Tiled serves",
		o.Instance, st.Backup, st.Target, st.Request, who(st.RequestedBy), o.ScheduledBackup)
	if d.Condition != nil {
		d.Condition.Message = d.Progress.Message
	}
	return d
}

func (o Observed) stopping(st *v1alpha1.InPlaceRestoreStatus) Decision {
	if o.ServerPods > 0 {
		return o.at(st)
	}
	return o.changed(o.next(st, v1alpha1.InPlaceRestoreRestoring))
}

func (o Observed) restoring(st *v1alpha1.InPlaceRestoreStatus) Decision {
	j := o.Job
	if running(j) {
		return o.at(st)
	}
	if j.Failed && !Untouched(j.Message, st.Backup) {
		// Part way: a database may be restored and another not. Tiled stays stopped.
		n := o.next(st, v1alpha1.InPlaceRestoreFailed)
		n.Stopped, n.CompletionTime = true, n.PhaseTime
		undo := "request another restore"
		if st.PreRestoreBackup != "" {
			undo = fmt.Sprintf("restore the databases as they were with `kubectl tiled restore %s --from %s`, or another backup", o.Name, st.PreRestoreBackup)
		}
		n.Message = fmt.Sprintf("TiledInstance %s: restoring backup %s (request %s) failed part way, so Tiled stays stopped: %s; %s",
			o.Instance, st.Backup, st.Request, tail(j.Message), undo)
		d := o.at(n)
		d.Changed = true
		d.Condition = &Condition{metav1.ConditionFalse, ReasonRestoreFailed, n.Message}
		d.Event = &Event{Reason: ReasonRestoreFailed, Message: n.Message}
		return d
	}
	n := o.next(st, v1alpha1.InPlaceRestoreStarting)
	if !j.StartTime.IsZero() && !j.CompletionTime.IsZero() {
		n.RestoreSeconds = int64(j.CompletionTime.Sub(j.StartTime).Round(time.Second) / time.Second)
	}
	if j.Failed {
		// Refused before any database was touched: Tiled starts on the databases as they were.
		n.Message = fmt.Sprintf("TiledInstance %s: backup %s (request %s) was not restored, and the databases are as they were: %s",
			o.Instance, st.Backup, st.Request, tail(j.Message))
		return o.changed(n)
	}
	n.CacheFlushed = o.ManagedCache
	d := o.changed(n)
	d.FlushCache = o.ManagedCache
	return d
}

func (o Observed) starting(st *v1alpha1.InPlaceRestoreStatus) Decision {
	if !o.ServerReady {
		return o.at(st)
	}
	if st.Message != "" {
		return o.end(st, st.Message+"; Tiled serves them again")
	}
	n := o.next(st, v1alpha1.InPlaceRestoreSucceeded)
	n.CompletionTime = n.PhaseTime
	if st.StopTime != nil {
		n.DowntimeSeconds = int64(n.CompletionTime.Sub(st.StopTime.Time).Round(time.Second) / time.Second)
	}
	msg := fmt.Sprintf("restored TiledInstance %s from backup %s on %s (request %s by %s): the restore took %d s, Tiled was stopped %d s",
		o.Instance, st.Backup, st.Target, st.Request, who(st.RequestedBy), n.RestoreSeconds, n.DowntimeSeconds)
	if st.PreRestoreBackup != "" {
		msg += "; the databases as they were are backup " + st.PreRestoreBackup
	}
	return Decision{Status: n, Changed: true,
		Condition: &Condition{metav1.ConditionTrue, ReasonRestoredInPlace, msg},
		Event:     &Event{Normal: true, Reason: ReasonRestoredInPlace, Message: msg}}
}

// end records a restore that did not happen, with Tiled serving: Failed, with msg.
func (o Observed) end(st *v1alpha1.InPlaceRestoreStatus, msg string) Decision {
	n := o.next(st, v1alpha1.InPlaceRestoreFailed)
	n.CompletionTime, n.Message = n.PhaseTime, msg
	if st.StopTime != nil && st.Phase == v1alpha1.InPlaceRestoreStarting {
		n.DowntimeSeconds = int64(n.CompletionTime.Sub(st.StopTime.Time).Round(time.Second) / time.Second)
	}
	return Decision{Status: n, Changed: true,
		Condition: &Condition{metav1.ConditionFalse, ReasonRestoreFailed, msg},
		Event:     &Event{Reason: ReasonRestoreFailed, Message: msg}}
}

// CurrentStep is the Job step of phase st (nil: none), for the controller to look its Job up.
func CurrentStep(o Observed, st *v1alpha1.InPlaceRestoreStatus) *render.Step {
	if st == nil {
		return nil
	}
	o.Target = st.Target
	if l := o.at(st).Lifecycle; l != nil {
		return l.Step
	}
	return nil
}

// maxTail bounds the quoted part of a Job's message.
const maxTail = 480

// tail is the end of a Job's message on one line.
func tail(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return "(the Job left no message)"
	}
	if len(msg) > maxTail {
		msg = msg[len(msg)-maxTail:]
		for msg != "" && !utf8.RuneStart(msg[0]) {
			msg = msg[1:]
		}
		msg = "..." + msg
	}
	return msg
}
