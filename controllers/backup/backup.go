package backup

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// Condition types, reasons and results.
const (
	// ConditionBackedUp says whether the instance's databases are backed up: True after a whole
	// backup, False with no target (a managed database) or after a failed backup, Unknown before
	// the first backup. It never makes the instance unready.
	ConditionBackedUp = "BackedUp"

	ReasonBackedUp       = "BackedUp"
	ReasonNoBackupTarget = "NoBackupTarget"
	ReasonNoBackupYet    = "NoBackupYet"
	ReasonBackupFailed   = "BackupFailed"
	ReasonRestoreFailed  = "RestoreFailed"
	ReasonRestoring      = "RestoringFromBackup"

	ResultSucceeded = "Succeeded"
	ResultFailed    = "Failed"
	ResultRestored  = "Restored"
	ResultSkipped   = "Skipped"

	// MaxAvailable is how many backups status.backup.available lists.
	MaxAvailable = 100
	// maxMessage bounds a failure's message in the status.
	maxMessage = 1000
)

// Job is a backup or restore Job as the cache shows it.
type Job struct {
	Name string
	// Complete and Failed are its conditions; neither: it runs.
	Complete, Failed bool
	// StartTime and CompletionTime (for a failed Job: when it failed).
	StartTime, CompletionTime time.Time
	// Message is its pod's termination message: dbtool.sh's report, or why it failed.
	Message string
	// Retrying, while it runs, is why its last pod stopped to be run again (the S3 endpoint did not
	// answer).
	Retrying string
}

// Report is dbtool.sh's report: a backup's manifest (plus the backups left after pruning) or a
// restore's outcome.
type Report struct {
	Name         string `json:"name"`
	TiledVersion string `json:"tiledVersion"`
	Seconds      int64  `json:"seconds"`
	Bytes        int64  `json:"bytes"`
	// Available is NAME:BYTES of each whole backup on the target, newest first, comma separated.
	Available string `json:"available"`
	Restored  string `json:"restored"`
	Skipped   string `json:"skipped"`
}

// ParseReport reads a report; an error when msg is not one.
func ParseReport(msg string) (*Report, error) {
	var r Report
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), &r); err != nil {
		return nil, fmt.Errorf("not a backup report: %w", err)
	}
	return &r, nil
}

// available parses Report.Available.
func available(s string) []v1alpha1.AvailableBackup {
	var out []v1alpha1.AvailableBackup
	for _, e := range strings.Split(s, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok || name == "" {
			continue
		}
		b, _ := strconv.ParseInt(size, 10, 64)
		out = append(out, v1alpha1.AvailableBackup{Name: name, Bytes: b})
		if len(out) == MaxAvailable {
			break
		}
	}
	return out
}

// tail is the end of a message, at most maxMessage bytes.
func tail(msg string) string {
	msg = strings.TrimSpace(msg)
	if len(msg) > maxMessage {
		msg = "..." + msg[len(msg)-maxMessage:]
	}
	return msg
}

// finished are the Jobs that ended, oldest first (by completion, then name).
func finished(jobs []Job) []Job {
	var out []Job
	for _, j := range jobs {
		if j.Complete || j.Failed {
			out = append(out, j)
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		if !out[a].CompletionTime.Equal(out[b].CompletionTime) {
			return out[a].CompletionTime.Before(out[b].CompletionTime)
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// record is a finished Job's outcome.
func record(j Job) v1alpha1.BackupRecord {
	rec := v1alpha1.BackupRecord{Job: j.Name, CompletionTime: metav1.NewTime(j.CompletionTime.UTC().Truncate(time.Second))}
	if j.Failed {
		rec.Result, rec.Message = ResultFailed, tail(j.Message)
		if rec.Message == "" {
			rec.Message = "the backup Job failed without a message"
		}
		return rec
	}
	rec.Result = ResultSucceeded
	if r, err := ParseReport(j.Message); err == nil {
		rec.Name, rec.Bytes, rec.Seconds, rec.TiledVersion = r.Name, r.Bytes, r.Seconds, r.TiledVersion
	}
	return rec
}

// newer says whether the Job j ended after the record r (nil: no record).
func newer(j Job, r *v1alpha1.BackupRecord) bool {
	if r == nil {
		return true
	}
	t := j.CompletionTime.UTC().Truncate(time.Second)
	return r.Job != j.Name && !t.Before(r.CompletionTime.Time)
}

// Status is status.backup from the previous one, the target (render.BackupTarget; "" without one)
// and the backup Jobs the cache shows: the last Job that ended, the last whole backup and the
// backups it left on the target. A Job already recorded, or older than the record, changes nothing;
// records outlive the Jobs (the CronJob keeps a few).
func Status(prev *v1alpha1.BackupStatus, target string, jobs []Job) *v1alpha1.BackupStatus {
	var st v1alpha1.BackupStatus
	if prev != nil {
		st = *prev.DeepCopy()
	}
	st.Target = target
	for _, j := range finished(jobs) {
		if !newer(j, st.Last) {
			continue
		}
		rec := record(j)
		st.Last = &rec
		if rec.Result == ResultSucceeded {
			st.LastSuccessful = rec.DeepCopy()
			if r, err := ParseReport(j.Message); err == nil && r.Available != "" {
				st.Available = available(r.Available)
			}
		}
	}
	if st.Target == "" && st.Last == nil && st.LastSuccessful == nil && st.Restore == nil && len(st.Available) == 0 {
		return nil
	}
	return &st
}

// UpgradeBackup is status.backup once the backup an upgrade took before its migration to the target
// (render.BackupTarget) ended, from its step's Job j: recorded as a scheduled backup is (the last
// backup, the last whole one, the backups its pruning left), so that they are listed at once. name
// is the backup's (status.upgrade.backup), in case its report has not reached the cache.
func UpgradeBackup(prev *v1alpha1.BackupStatus, target string, j Job, name string) *v1alpha1.BackupStatus {
	st := Status(prev, target, []Job{j})
	if st == nil {
		return nil
	}
	for _, r := range []*v1alpha1.BackupRecord{st.Last, st.LastSuccessful} {
		if r != nil && r.Job == j.Name && r.Result == ResultSucceeded && r.Name == "" {
			r.Name = name
		}
	}
	return st
}

// Condition is the BackedUp condition (status, reason, message) of instance ns/name; ok is false
// when it has none (an external database without a target: its backups are its owner's).
func Condition(instance string, spec *v1alpha1.TiledInstance, st *v1alpha1.BackupStatus) (status metav1.ConditionStatus, reason, message string, ok bool) {
	managed := spec.Spec.Database != nil && spec.Spec.Database.Managed != nil
	target := render.BackupTarget(spec)
	switch {
	case target == "" && !managed:
		return "", "", "", false
	case target == "":
		return metav1.ConditionFalse, ReasonNoBackupTarget, fmt.Sprintf(
			"TiledInstance %s: spec.backup has no target, so nothing backs up its managed database (the catalog, tabular data and auth sessions): "+
				"set spec.backup.claim or spec.backup.s3, best in a profile (docs/backups.md)", instance), true
	case st == nil || st.Last == nil:
		when := "no schedule is set (spec.backup.schedule): take one with `kubectl tiled backup " + spec.Name + "`"
		if s := spec.Spec.Backup.Schedule; s != "" {
			when = "the schedule is " + strconv.Quote(s)
			if spec.Spec.Backup.Suspend != nil && *spec.Spec.Backup.Suspend {
				when += ", suspended (spec.backup.suspend)"
			}
		}
		return metav1.ConditionUnknown, ReasonNoBackupYet, fmt.Sprintf("no backup to %s has ended yet; %s", target, when), true
	case st.Last.Result == ResultFailed:
		last := "there is no whole backup"
		if s := st.LastSuccessful; s != nil {
			last = fmt.Sprintf("the last whole backup is %s (%s)", s.Name, s.CompletionTime.UTC().Format(time.RFC3339))
		}
		return metav1.ConditionFalse, ReasonBackupFailed, fmt.Sprintf("backup Job %s failed at %s: %s; %s; Tiled is not affected",
			st.Last.Job, st.Last.CompletionTime.UTC().Format(time.RFC3339), st.Last.Message, last), true
	default:
		return metav1.ConditionTrue, ReasonBackedUp, fmt.Sprintf("backup %s (%d bytes) ended at %s on %s",
			st.Last.Name, st.Last.Bytes, st.Last.CompletionTime.UTC().Format(time.RFC3339), target), true
	}
}

// RestoreObserved is what Restore decides from.
type RestoreObserved struct {
	// Instance is namespace/name.
	Instance string
	// Spec is the instance's expanded spec.
	Spec *v1alpha1.TiledInstance
	// Version is the Tiled version spec.tiled runs (a backup from a newer one is refused).
	Version string
	// Job is the bootstrap step's Job (nil: not in the cache).
	Job *Job
	// Serving says Tiled has been started for this instance (its StatefulSet has replicas): a
	// restore then is not a bootstrap, and Tiled is never stopped for one.
	Serving bool
	// ToolsImage runs the restore for an external database.
	ToolsImage string
	// Now is the time.
	Now time.Time
}

// Note is a reason and a message: a condition's or an Event's.
type Note struct{ Reason, Message string }

// RestoreDecision is the bootstrap step's state: while Step is not nil, Tiled is kept stopped and
// the step's Job rendered.
type RestoreDecision struct {
	Lifecycle *render.Lifecycle
	// Record, when not nil, becomes status.backup.restore: the restore ended.
	Record *v1alpha1.RestoreRecord
	// Stall or Progress: the instance's Stalled or Reconciling condition (reason, message).
	Stall, Progress *Note
	// Event, when not nil, is a Normal Event (reason, message) sent with the record.
	Event *Note
}

// Restore decides the bootstrap step of an instance with spec.backup.restoreFrom: nothing once a
// restore is recorded (it happens once per instance) or without restoreFrom; a Skipped record for an
// instance that already serves (restoreFrom added later: Tiled is never stopped for it); else the
// step's Job with Tiled stopped until the Job ends. A restore that failed (a corrupt or missing backup, one
// from a newer Tiled) stalls with its reason and keeps Tiled stopped: the database is left as it
// was (empty), and a changed restoreFrom is a new Job.
func Restore(o RestoreObserved, recorded *v1alpha1.RestoreRecord) RestoreDecision {
	b := o.Spec.Spec.Backup
	if b == nil || b.RestoreFrom == "" || recorded != nil {
		return RestoreDecision{}
	}
	target := render.BackupTarget(o.Spec)
	if o.Serving && o.Job == nil {
		return RestoreDecision{
			Record: &v1alpha1.RestoreRecord{Backup: b.RestoreFrom, Result: ResultSkipped, CompletionTime: metav1.NewTime(o.Now.UTC().Truncate(time.Second))},
			Event: &Note{"RestoreSkipped", fmt.Sprintf("%s already serves Tiled: spec.backup.restoreFrom=%s restores only a new instance, before Tiled first starts; "+
				"to roll its catalog back while it serves, run `kubectl tiled restore %s --from %s` (docs/backups.md)", o.Instance, b.RestoreFrom, o.Spec.Name, b.RestoreFrom)},
		}
	}
	d := RestoreDecision{Lifecycle: &render.Lifecycle{
		Stopped:    true,
		Step:       &render.Step{Kind: render.StepBootstrap, Backup: b.RestoreFrom, FromVersion: o.Version},
		ToolsImage: o.ToolsImage,
	}}
	j := o.Job
	switch {
	case j == nil || (!j.Complete && !j.Failed):
		d.Progress = &Note{ReasonRestoring, fmt.Sprintf("restoring the databases of %s from backup %s on %s (spec.backup.restoreFrom) before Tiled starts",
			o.Instance, b.RestoreFrom, target)}
		if j != nil && j.Retrying != "" {
			d.Progress.Message += fmt.Sprintf("; Job %s runs again, its last pod stopped: %s", j.Name, tail(j.Retrying))
		}
	case j.Failed:
		msg := tail(j.Message)
		if msg == "" {
			msg = "the restore Job failed without a message"
		}
		d.Stall = &Note{ReasonRestoreFailed, fmt.Sprintf(
			"TiledInstance %s: restoring spec.backup.restoreFrom=%s from %s failed (Job %s): %s; the databases were left as they were and Tiled is not started: "+
				"name another backup (`kubectl tiled backups %s`), or remove spec.backup.restoreFrom to start with an empty catalog",
			o.Instance, b.RestoreFrom, target, j.Name, msg, o.Spec.Name)}
	default:
		rec := &v1alpha1.RestoreRecord{Backup: b.RestoreFrom, Result: ResultRestored, CompletionTime: metav1.NewTime(o.Now.UTC().Truncate(time.Second))}
		if !j.StartTime.IsZero() && !j.CompletionTime.IsZero() {
			rec.Seconds = int64(j.CompletionTime.Sub(j.StartTime).Round(time.Second) / time.Second)
		}
		event := Note{Reason: "Restored"}
		r, err := ParseReport(j.Message)
		switch {
		case err == nil && r.Skipped != "":
			rec.Backup, rec.Result = r.Skipped, ResultSkipped
			event = Note{"RestoreSkipped", fmt.Sprintf("the databases of %s already hold a catalog: they are kept, backup %s was not restored", o.Instance, r.Skipped)}
		case err == nil && r.Restored != "":
			rec.Backup = r.Restored
			event.Message = fmt.Sprintf("restored the databases of %s from backup %s on %s in %d s", o.Instance, r.Restored, target, rec.Seconds)
		default:
			event.Message = fmt.Sprintf("restored the databases of %s from backup %s on %s", o.Instance, b.RestoreFrom, target)
		}
		d.Lifecycle, d.Record, d.Event = nil, rec, &event
	}
	return d
}
