package upgrade

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// Reasons of the stalls and Events the procedure reports.
const (
	ReasonUpgrading        = "Upgrading"
	ReasonMigrated         = "Migrated"
	ReasonUpgradedInPlace  = "UpgradedWithoutMigration"
	ReasonMigrationFailed  = "MigrationFailed"
	ReasonBackupFailed     = "BackupFailed"
	ReasonRestoreFailed    = "RestoreFailed"
	ReasonCheckFailed      = "UpgradeCheckFailed"
	ReasonDowngradeRefused = "DowngradeRefused"
	// ReasonBackupTargetChanged: spec.backup's target changed before the upgrade's backup on it
	// was restored.
	ReasonBackupTargetChanged = "BackupTargetChanged"
	ReasonUpgradeCancelled    = "UpgradeCancelled"
	ResultSucceeded           = "Succeeded"
	ResultRolledBack          = "RolledBack"
	backupPrefix              = "pre-upgrade-"
	backupTimeLayout          = "20060102-150405"
	messageTailLines          = 6
)

// Job is the state of the current step's Job as the cache holds it.
type Job struct {
	// Complete and Failed are the Job's terminal conditions (neither: still running).
	Complete, Failed bool
	// Message is the termination message of its pod's container: the step's JSON report when it
	// succeeded, the tail of its log when it failed.
	Message string
	// StartTime and CompletionTime are the Job's (CompletionTime of a failed Job: when it failed).
	StartTime, CompletionTime time.Time
	// Retrying, while the Job runs, is the termination message of its last pod that could not
	// reach what it needed (render.ExitTryAgain): the Job runs another.
	Retrying string
}

// Observed is what Decide decides from.
type Observed struct {
	// SpecImage is spec.tiled.image; SpecVersion and ServingVersion the Tiled versions the two
	// images run (package tiledversion).
	SpecImage, SpecVersion string
	// ServingImage is the image of the Tiled StatefulSet as it exists ("" when it does not: a new
	// instance has nothing to upgrade).
	ServingImage, ServingVersion string
	// Upgrade is status.upgrade (nil: none in progress); LastBackup names the last backup taken
	// (status.lastMigration.backup), which a refused downgrade names, and LastBackupTarget where it
	// is (status.lastMigration.backupTarget; "": the backup claim).
	Upgrade                      *v1alpha1.UpgradeStatus
	LastBackup, LastBackupTarget string
	// Target is spec.backup's target as render.BackupTarget describes it ("": none). With one, the
	// backup before a migration goes there, as the scheduled backups do; without, to the backup
	// claim.
	Target string
	// ScheduledBackup names a scheduled backup Job (the CronJob's, or one `kubectl tiled backup`
	// made from it) that is running ("": none), read while the upgrade checks or backs up: the
	// upgrade's backup does not start beside it.
	ScheduledBackup string
	// Job is the current step's Job (nil: not in the cache, not yet created).
	Job *Job
	// ServerPods is how many Tiled pods exist (terminating ones included); ServerReady says the
	// Tiled StatefulSet is ready with the spec's replicas on the image it renders.
	ServerPods  int
	ServerReady bool
	// ToolsImage runs pg_dump and psql for an external database.
	ToolsImage string
	// Now is the time of the decision.
	Now time.Time
}

// Decision is what the controller does.
type Decision struct {
	// Lifecycle goes into the render (nil: serve spec.tiled.image as usual).
	Lifecycle *render.Lifecycle
	// Upgrade is the status.upgrade to record (nil: none); Changed says it differs from Observed's,
	// and is recorded before anything is applied.
	Upgrade *v1alpha1.UpgradeStatus
	Changed bool
	// Record, when not nil, becomes status.lastMigration.
	Record *v1alpha1.MigrationRecord
	// Stall, when not nil, stalls the instance (Reason, Message); Progress, when not nil, is the
	// Reconciling message while the procedure runs.
	Stall    *Condition
	Progress *Condition
	// Event, when not nil, is sent once, with the status that records it.
	Event *Event
}

// Condition is a reason and a message.
type Condition struct{ Reason, Message string }

// Event is an Event to send: Warning when not Normal.
type Event struct {
	Normal          bool
	Reason, Message string
}

// Report is what entrypoint.py's migrate and revisions steps leave as their termination message.
type Report struct {
	Version string    `json:"version"`
	Catalog *Revision `json:"catalog"`
	Auth    *Revision `json:"auth,omitempty"`
}

// Revision is one database's revisions in a Report.
type Revision struct {
	// Current is the database's revision (nil: not initialized).
	Current *string `json:"current"`
	// Required is the revision the image's Tiled serves at.
	Required string `json:"required"`
	// Known says the image's Tiled knows Current (an unknown revision is newer: a downgrade).
	Known bool `json:"known"`
}

// ParseReport reads a Report from a termination message.
func ParseReport(msg string) (*Report, error) {
	var r Report
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), &r); err != nil {
		return nil, fmt.Errorf("not a revisions report: %w", err)
	}
	if r.Catalog == nil {
		return nil, fmt.Errorf("not a revisions report: no catalog")
	}
	return &r, nil
}

// Rev is the database's revision ("" when it has none, or for no database).
func (r *Revision) Rev() string { return r.current() }

func (r *Revision) current() string {
	if r == nil || r.Current == nil {
		return ""
	}
	return *r.Current
}

// atRequired says the database needs no migration for the image (nil: it is not used).
func (r *Revision) atRequired() bool { return r == nil || r.Current == nil || *r.Current == r.Required }

// onTarget says the upgrade's backup is on spec.backup's target (else on the backup claim).
func onTarget(u *v1alpha1.UpgradeStatus) bool { return u != nil && u.BackupTarget != "" }

// where is where the upgrade's backup is, for messages: " on <target>" or "" (the backup claim).
func where(u *v1alpha1.UpgradeStatus) string {
	if onTarget(u) {
		return " on " + u.BackupTarget
	}
	return ""
}

// Decide returns the next step of the procedure.
func Decide(o Observed) Decision {
	u := o.Upgrade
	if u == nil {
		if o.ServingImage == "" || o.ServingImage == o.SpecImage {
			return Decision{}
		}
		return o.begin(fmt.Sprintf("spec.tiled.image changed from %s to %s", o.ServingImage, o.SpecImage))
	}
	if u.ToImage != o.SpecImage {
		switch u.Phase {
		case v1alpha1.UpgradeChecking, v1alpha1.UpgradeBackingUp, v1alpha1.UpgradeStopping, v1alpha1.UpgradeFailed:
			// The databases are as they were (Failed: restored): follow the spec's new image.
			if o.SpecImage == u.FromImage {
				return Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradeCancelled,
					Message: fmt.Sprintf("spec.tiled.image is %s again: the upgrade to %s is dropped", u.FromImage, u.ToImage)}}
			}
			o.ServingImage, o.ServingVersion = u.FromImage, u.FromVersion
			return o.begin(fmt.Sprintf("spec.tiled.image changed from %s to %s during the upgrade to %s", u.FromImage, o.SpecImage, u.ToImage))
		}
		// After a failed restore, the old image set back says the databases were restored by hand.
		if u.Phase == v1alpha1.UpgradeRestoring && o.Job != nil && o.Job.Failed && o.SpecImage == u.FromImage {
			return Decision{Changed: true, Event: &Event{Reason: ReasonUpgradeCancelled, Message: fmt.Sprintf(
				"spec.tiled.image is %s again after the restore of backup %s failed: the upgrade is dropped and %s starts on the databases as they are",
				u.FromImage, u.Backup, u.FromImage)}}
		}
		// Migrating, Starting, Restoring: the databases are changing; finish first.
	}
	switch u.Phase {
	case v1alpha1.UpgradeChecking:
		return o.checking(u)
	case v1alpha1.UpgradeBackingUp:
		return o.backingUp(u)
	case v1alpha1.UpgradeStopping:
		return o.stopping(u)
	case v1alpha1.UpgradeMigrating:
		return o.migrating(u)
	case v1alpha1.UpgradeStarting:
		return o.starting(u)
	case v1alpha1.UpgradeRestoring:
		return o.restoring(u)
	default: // Failed
		return Decision{Upgrade: u, Lifecycle: o.lifecycle(u.FromImage, false, nil),
			Stall: &Condition{Reason: ReasonMigrationFailed, Message: u.Message}}
	}
}

func (o Observed) begin(why string) Decision {
	now := metav1.NewTime(o.Now)
	u := &v1alpha1.UpgradeStatus{
		Phase: v1alpha1.UpgradeChecking, FromImage: o.ServingImage, ToImage: o.SpecImage,
		FromVersion: o.ServingVersion, ToVersion: o.SpecVersion, StartTime: now, PhaseTime: &now,
	}
	d := o.at(u)
	d.Changed = true
	d.Event = &Event{Normal: true, Reason: ReasonUpgrading, Message: why + ": checking the databases' revisions with the new image"}
	return d
}

// at is the decision of phase u with no news from its step.
func (o Observed) at(u *v1alpha1.UpgradeStatus) Decision {
	d := Decision{Upgrade: u}
	switch u.Phase {
	case v1alpha1.UpgradeChecking:
		d.Lifecycle = o.lifecycle(u.FromImage, false, &render.Step{Kind: render.StepCheck, Image: u.ToImage})
		// No scheduled backup starts from the check on: the backup that may follow runs alone (the
		// CronJob, cached by its metadata only, is suspended before the dump begins, not with it).
		d.Lifecycle.SuspendBackups = o.Target != ""
	case v1alpha1.UpgradeBackingUp:
		d.Lifecycle = o.lifecycle(u.FromImage, false, &render.Step{Kind: render.StepBackup, Backup: u.Backup, FromVersion: u.FromVersion, Target: u.BackupTarget})
		d.Lifecycle.SuspendBackups = o.Target != "" || onTarget(u)
	case v1alpha1.UpgradeStopping:
		d.Lifecycle = o.lifecycle(u.FromImage, true, nil)
	case v1alpha1.UpgradeMigrating:
		d.Lifecycle = o.lifecycle(u.FromImage, true, &render.Step{Kind: render.StepMigrate, Image: u.ToImage})
	case v1alpha1.UpgradeStarting:
		d.Lifecycle = o.lifecycle(u.ToImage, false, nil)
	case v1alpha1.UpgradeRestoring:
		d.Lifecycle = o.lifecycle(u.FromImage, true, &render.Step{Kind: render.StepRestore, Backup: u.Backup, Target: u.BackupTarget})
	case v1alpha1.UpgradeFailed:
		d.Lifecycle = o.lifecycle(u.FromImage, false, nil)
	}
	d.Progress = &Condition{Reason: ReasonUpgrading, Message: progress(u)}
	return d
}

func progress(u *v1alpha1.UpgradeStatus) string {
	what := map[v1alpha1.UpgradePhase]string{
		v1alpha1.UpgradeChecking:  "checking the databases' revisions with the new image; the old version serves",
		v1alpha1.UpgradeBackingUp: "backing up the databases to " + u.Backup + where(u) + "; the old version serves",
		v1alpha1.UpgradeStopping:  "stopping the old version's pods before the migration",
		v1alpha1.UpgradeMigrating: fmt.Sprintf("migrating the catalog from revision %s to %s", u.FromRevision, u.ToRevision),
		v1alpha1.UpgradeStarting:  "starting the new version on the migrated databases",
		v1alpha1.UpgradeRestoring: "the migration failed; restoring backup " + u.Backup + where(u),
	}[u.Phase]
	return fmt.Sprintf("upgrading Tiled %s -> %s: %s", orImage(u.FromVersion, u.FromImage), orImage(u.ToVersion, u.ToImage), what)
}

func orImage(version, image string) string {
	if version != "" {
		return version
	}
	return image
}

// lifecycle is a render's Lifecycle. The backup claim is rendered from a backup to it on (and while
// one exists): a check that finds no migration to do leaves no claim behind, nor does a backup to
// spec.backup's target.
func (o Observed) lifecycle(serving string, stopped bool, step *render.Step) *render.Lifecycle {
	claim := (o.LastBackup != "" && o.LastBackupTarget == "") || (o.Upgrade != nil && o.Upgrade.Backup != "" && !onTarget(o.Upgrade)) ||
		(step != nil && step.Backup != "" && step.Target == "")
	return &render.Lifecycle{ServingImage: serving, Stopped: stopped, Step: step, BackupClaim: claim, ToolsImage: o.ToolsImage}
}

// next moves u to phase p, recorded now.
func (o Observed) next(u *v1alpha1.UpgradeStatus, p v1alpha1.UpgradePhase) *v1alpha1.UpgradeStatus {
	n := u.DeepCopy()
	now := metav1.NewTime(o.Now)
	n.Phase, n.PhaseTime = p, &now
	return n
}

// stuck keeps phase u where it is and stalls the instance: no retry; a new image (or the old one)
// is the way on. The message is recorded in status.upgrade.message.
func (o Observed) stuck(u *v1alpha1.UpgradeStatus, reason, msg string) Decision {
	d := o.at(u)
	if l := d.Lifecycle; l != nil && !l.Stopped {
		// The old version serves until a person acts: the scheduled backups go on meanwhile.
		l.SuspendBackups = false
	}
	d.Progress = nil
	d.Stall = &Condition{Reason: reason, Message: msg}
	if u.Message != msg {
		d.Upgrade = u.DeepCopy()
		d.Upgrade.Message = msg
		d.Changed = true
	}
	return d
}

func (o Observed) checking(u *v1alpha1.UpgradeStatus) Decision {
	j := o.Job
	switch {
	case j == nil || (!j.Complete && !j.Failed):
		return o.at(u)
	case j.Failed:
		return o.stuck(u, ReasonCheckFailed, fmt.Sprintf("the check of the databases with %s failed; the old version serves; set spec.tiled.image to another image (or back to %s): %s",
			u.ToImage, u.FromImage, tail(j.Message)))
	}
	r, err := ParseReport(j.Message)
	if err != nil {
		return o.stuck(u, ReasonCheckFailed, fmt.Sprintf("the check of the databases with %s reported nothing readable (%v); the old version serves", u.ToImage, err))
	}
	if !r.Catalog.Known || (r.Auth != nil && !r.Auth.Known) {
		db, rev := "catalog", r.Catalog.current()
		if r.Catalog.Known {
			db, rev = "auth", r.Auth.current()
		}
		restore := "no backup of the databases before their migration is known to the operator"
		if o.LastBackup != "" {
			on := ""
			if o.LastBackupTarget != "" {
				on = " on " + o.LastBackupTarget
			}
			restore = fmt.Sprintf("to run Tiled %s again, its databases must first be restored from backup %s%s (taken before the migration; docs/upgrading.md)", r.Version, o.LastBackup, on)
		}
		return o.stuck(u, ReasonDowngradeRefused, fmt.Sprintf(
			"the %s database is at revision %s, which Tiled %s (%s) does not know: a newer Tiled migrated it, and Tiled does not run on a newer revision; %s; the old version (%s) serves",
			db, rev, r.Version, u.ToImage, restore, u.FromImage))
	}
	n := u.DeepCopy()
	n.ToVersion = r.Version
	n.FromRevision, n.ToRevision = r.Catalog.current(), r.Catalog.Required
	if r.Auth != nil {
		n.AuthFromRevision, n.AuthToRevision = r.Auth.current(), r.Auth.Required
	}
	if r.Catalog.atRequired() && r.Auth.atRequired() {
		// Same revisions: the image rolls as any change does, without downtime.
		return Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradedInPlace, Message: fmt.Sprintf(
			"Tiled %s -> %s needs no migration (catalog at revision %s): the pods roll to %s",
			orImage(u.FromVersion, u.FromImage), r.Version, r.Catalog.current(), u.ToImage)}}
	}
	n = o.next(n, v1alpha1.UpgradeBackingUp)
	o.name(n)
	d := o.waitForScheduled(o.at(n))
	d.Changed = true
	return d
}

// name names the backup of n, begun now: to spec.backup's target, named, listed and pruned as the
// scheduled backups are; without one, to the backup claim.
func (o Observed) name(n *v1alpha1.UpgradeStatus) {
	if o.Target != "" {
		n.Backup, n.BackupTarget = render.PreUpgradeBackupName(o.Now, n.FromVersion, n.ToVersion), o.Target
	} else {
		n.Backup, n.BackupTarget = backupPrefix+o.Now.UTC().Format(backupTimeLayout), ""
	}
}

// waitForScheduled is d, the decision of phase BackingUp before its Job exists, waiting while a
// scheduled backup dumps the databases: the upgrade's dump does not start beside it (the CronJob is
// suspended, so no other starts), and runs alone once it ended.
func (o Observed) waitForScheduled(d Decision) Decision {
	if o.ScheduledBackup == "" {
		return d
	}
	u := d.Upgrade
	d.Lifecycle.Step = nil
	d.Progress.Message = fmt.Sprintf("upgrading Tiled %s -> %s: waiting for the scheduled backup Job %s to end before backing up the databases to %s%s; the old version serves",
		orImage(u.FromVersion, u.FromImage), orImage(u.ToVersion, u.ToImage), o.ScheduledBackup, u.Backup, where(u))
	return d
}

func (o Observed) backingUp(u *v1alpha1.UpgradeStatus) Decision {
	j := o.Job
	switch {
	case j == nil && o.ScheduledBackup != "":
		return o.waitForScheduled(o.at(u))
	case u.BackupTarget != o.Target && (j == nil || !j.Complete):
		// spec.backup's target changed before the backup was whole (perhaps because it failed
		// there): it begins again where spec.backup now says, named now, in a Job of its own (the
		// target is in the Job's name). The old step's Job goes; nothing was changed yet.
		n := o.next(u, v1alpha1.UpgradeBackingUp)
		n.Message = ""
		o.Job = nil
		o.name(n)
		d := o.waitForScheduled(o.at(n))
		d.Changed = true
		return d
	case j == nil || (!j.Complete && !j.Failed):
		return o.at(u)
	case j.Failed:
		return o.stuck(u, ReasonBackupFailed, fmt.Sprintf("the backup %s%s before the migration failed, so nothing was migrated; the old version serves: %s", u.Backup, where(u), tail(j.Message)))
	}
	n := o.next(u, v1alpha1.UpgradeStopping)
	n.StopTime = n.PhaseTime
	d := o.at(n)
	d.Changed = true
	return d
}

func (o Observed) stopping(u *v1alpha1.UpgradeStatus) Decision {
	if o.ServerPods > 0 {
		return o.at(u)
	}
	d := o.at(o.next(u, v1alpha1.UpgradeMigrating))
	d.Changed = true
	return d
}

func (o Observed) migrating(u *v1alpha1.UpgradeStatus) Decision {
	j := o.Job
	if j == nil || (!j.Complete && !j.Failed) {
		return o.at(u)
	}
	var n *v1alpha1.UpgradeStatus
	if j.Complete {
		n = o.next(u, v1alpha1.UpgradeStarting)
		if r, err := ParseReport(j.Message); err == nil {
			n.ToVersion, n.ToRevision = r.Version, r.Catalog.current()
			if r.Auth != nil {
				n.AuthToRevision = r.Auth.current()
			}
		}
	} else {
		n = o.next(u, v1alpha1.UpgradeRestoring)
		n.Message = fmt.Sprintf("the migration of the catalog from revision %s to %s by %s failed; backup %s was restored and Tiled %s serves again; set spec.tiled.image to a fixed image, or back to %s: %s",
			u.FromRevision, u.ToRevision, u.ToImage, u.Backup, orImage(u.FromVersion, u.FromImage), u.FromImage, tail(j.Message))
	}
	if !j.StartTime.IsZero() && !j.CompletionTime.IsZero() {
		n.MigrationSeconds = seconds(j.CompletionTime.Sub(j.StartTime))
	}
	d := o.at(n)
	d.Changed = true
	return d
}

func (o Observed) starting(u *v1alpha1.UpgradeStatus) Decision {
	if !o.ServerReady {
		return o.at(u)
	}
	rec := o.record(u, ResultSucceeded)
	return Decision{Changed: true, Record: rec, Event: &Event{Normal: true, Reason: ReasonMigrated, Message: fmt.Sprintf(
		"Tiled %s -> %s: catalog migrated from revision %s to %s in %ss, %ss without a serving pod; backup %s%s",
		orImage(u.FromVersion, u.FromImage), orImage(u.ToVersion, u.ToImage), u.FromRevision, u.ToRevision, rec.MigrationSeconds, rec.DowntimeSeconds, u.Backup, where(u))}}
}

func (o Observed) restoring(u *v1alpha1.UpgradeStatus) Decision {
	j := o.Job
	switch {
	case onTarget(u) && u.BackupTarget != o.Target && (j == nil || !j.Complete):
		return o.targetMoved(u)
	case j == nil || (!j.Complete && !j.Failed):
		d := o.at(u)
		return d
	case j.Failed:
		// status.upgrade.message keeps the migration's failure, which the rollback reports once a
		// restore succeeds; the stall says what happened since.
		d := o.at(u)
		d.Progress = nil
		d.Stall = &Condition{Reason: ReasonRestoreFailed, Message: fmt.Sprintf(
			"%s; restoring backup %s%s failed too, so Tiled stays stopped: restore it by hand and set spec.tiled.image back to %s, or delete the failed restore Job to run it again (docs/upgrading.md): %s",
			strings.SplitN(u.Message, ";", 2)[0], u.Backup, where(u), u.FromImage, tail(j.Message))}
		return d
	}
	n := o.next(u, v1alpha1.UpgradeFailed)
	d := o.at(n)
	d.Progress = nil
	d.Changed = true
	d.Record = o.record(u, ResultRolledBack)
	d.Stall = &Condition{Reason: ReasonMigrationFailed, Message: u.Message}
	d.Event = &Event{Reason: ReasonMigrationFailed, Message: u.Message}
	return d
}

// targetMoved stalls the restore of a backup on a target spec.backup no longer names: the step
// would read it elsewhere (and its Job, whose pod template cannot change, could not be applied).
// The step's Job is not rendered (a running one goes: each database is restored in one transaction,
// and the restore runs whole again) until spec.backup names the target again. Tiled stays stopped.
func (o Observed) targetMoved(u *v1alpha1.UpgradeStatus) Decision {
	now := "names no target"
	if o.Target != "" {
		now = "names " + o.Target
	}
	// status.upgrade.message keeps the migration's failure, which the rollback reports: the stall
	// says what happened since, and goes once the target is back.
	d := o.at(u)
	d.Lifecycle.Step = nil
	d.Progress = nil
	d.Stall = &Condition{Reason: ReasonBackupTargetChanged, Message: fmt.Sprintf(
		"%s; backup %s is on %s, and spec.backup now %s, so it cannot be restored and Tiled stays stopped: set spec.backup's target back to restore it",
		strings.SplitN(u.Message, ";", 2)[0], u.Backup, u.BackupTarget, now)}
	return d
}

func (o Observed) record(u *v1alpha1.UpgradeStatus, result string) *v1alpha1.MigrationRecord {
	rec := &v1alpha1.MigrationRecord{
		FromVersion: u.FromVersion, ToVersion: u.ToVersion, FromRevision: u.FromRevision, ToRevision: u.ToRevision,
		Backup: u.Backup, BackupTarget: u.BackupTarget, Result: result, StartTime: u.StartTime, CompletionTime: metav1.NewTime(o.Now),
		MigrationSeconds: u.MigrationSeconds,
	}
	if u.StopTime != nil {
		rec.DowntimeSeconds = seconds(o.Now.Sub(u.StopTime.Time))
	}
	return rec
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

// tail is what a failed step's log says of its failure, on one line: the step's own last line when
// it is entrypoint.py's summary (which names the exception), else the last lines that hold any text
// (a drawn frame is not text), at most maxTail bytes.
func tail(msg string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(msg), "\n") {
		if l = strings.TrimSpace(l); strings.IndexFunc(l, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return "(the step left no message)"
	}
	if last := keep[len(keep)-1]; strings.HasPrefix(last, "[tiled-operator]") {
		return clip(last)
	}
	if len(keep) > messageTailLines {
		keep = keep[len(keep)-messageTailLines:]
	}
	return clip(strings.Join(keep, " | "))
}

// maxTail bounds the quoted part of a message, so that the condition stays readable and the Event
// quoting it fits the API's 1 kB note.
const maxTail = 480

// clip keeps the last maxTail bytes of s, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxTail {
		return s
	}
	s = s[len(s)-maxTail:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return "..." + s
}

// CurrentStep is the Job step of phase u (nil: the phase runs none, or there is no upgrade): the
// controller looks its Job up before it decides.
func CurrentStep(u *v1alpha1.UpgradeStatus) *render.Step {
	if u == nil {
		return nil
	}
	if l := (Observed{}).at(u).Lifecycle; l != nil {
		return l.Step
	}
	return nil
}
