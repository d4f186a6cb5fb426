package catalog

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/render"
)

// Reasons of the conditions and Events, and how a loss was found (status.catalogLost.reason).
const (
	// ReasonCatalogLost: the catalog is lost and Tiled stopped (Stalled, Warning Event).
	ReasonCatalogLost = "CatalogLost"
	// ReasonRestoringCatalog: the newest whole backup is being restored (Reconciling).
	ReasonRestoringCatalog = "RestoringLostCatalog"
	// ReasonCatalogRestoreFailed: that restore failed (Stalled).
	ReasonCatalogRestoreFailed = "CatalogRestoreFailed"
	// ReasonCatalogRestored: the catalog is back (Normal Event), or restored and Tiled starting
	// (Reconciling).
	ReasonCatalogRestored = "CatalogRestored"
	// ReasonCatalogLossAccepted: a person accepted the loss (Normal Event).
	ReasonCatalogLossAccepted = "CatalogLossAccepted"

	LostClaimReplaced = "ClaimReplaced"
	LostClaimDeleted  = "ClaimDeleted"
	LostDatabaseEmpty = "DatabaseEmpty"

	// maxMessage bounds status.catalogLost.message.
	maxMessage = 1000
)

// Claim is the managed database's claim as the cache shows it.
type Claim struct {
	UID string
	// Terminating: the claim is being deleted (it waits for its pod to let go).
	Terminating bool
}

// Observed is what Decide decides from.
type Observed struct {
	// Instance is namespace/name; Name the instance's name (for the commands the messages give).
	Instance, Name string
	// Managed: the instance's database is the managed PostgreSQL (its claim is watched).
	Managed bool
	// ClaimName is the managed database's claim; Claim it as the cache shows it (nil: not there).
	ClaimName string
	Claim     *Claim
	// Database is status.database (nil: none recorded).
	Database *v1alpha1.DatabaseStatus
	// Lost is status.catalogLost (nil: none).
	Lost *v1alpha1.CatalogLost
	// EmptyReported: a Tiled pod's migrate step refused an empty catalog database where the
	// instance had a catalog (entrypoint.py's report {"catalogLost": true}).
	EmptyReported bool
	// Policy is spec.backup.onCatalogLost ("" is Stall).
	Policy v1alpha1.CatalogLostPolicy
	// Target is spec.backup's target (render.BackupTarget; "" without one).
	Target string
	// NewestBackup is the newest whole backup the status lists ("" none).
	NewestBackup string
	// Accept is the annotation tiled.blueskyproject.io/accept-catalog-loss ("" absent).
	Accept string
	// Job is the restore's Job (render.StepRecover) as the cache shows it (nil: not there).
	Job *backup.Job
	// Version is the Tiled version spec.tiled runs (a backup from a newer one is refused).
	Version string
	// ToolsImage runs the restore for an external database.
	ToolsImage string
	// Reported is the catalog revision the migrate step of the newest Tiled pod created after the
	// restore ended reported ("" none yet).
	Reported string
	// Now is the time.
	Now time.Time
}

// Event is an Event to send with the status that records the decision.
type Event struct {
	Warning         bool
	Reason, Message string
}

// Decision is what a lost catalog asks of the reconcile.
type Decision struct {
	// Lost is status.catalogLost to record (nil: none, or no longer).
	Lost *v1alpha1.CatalogLost
	// Changed says Lost differs from the one observed, or the catalog was recorded anew: the
	// status is written before anything is applied.
	Changed bool
	// ClaimUID, when not "", is status.database.claimUID to record (the catalog lives there now).
	ClaimUID string
	// ForgetCatalog clears status.database.catalogRevision (the loss is accepted: the next start
	// initialises a new catalog, and the ConfigMap's catalog-expected goes).
	ForgetCatalog bool
	// Lifecycle is what the render must do: Tiled stopped (and scheduled backups suspended), the
	// restore's Job. Nil asks nothing.
	Lifecycle *render.Lifecycle
	// Stall or Progress is the instance's Stalled or Reconciling condition.
	Stall, Progress *backup.Note
	// Event, when not nil, is sent once, with the status that records Lost.
	Event *Event
}

// Handled says the decision owns the instance's lifecycle (the upgrade stage then waits).
func (d Decision) Handled() bool { return d.Lost != nil }

// NewestBackup is the newest whole backup status.backup lists ("" none).
func NewestBackup(st *v1alpha1.BackupStatus) string {
	switch {
	case st == nil:
		return ""
	case len(st.Available) > 0:
		return st.Available[0].Name
	case st.LastSuccessful != nil:
		return st.LastSuccessful.Name
	}
	return ""
}

// RecordClaim is the status.database.claimUID to record: the claim's UID once the catalog exists
// (its revision is recorded) and none was recorded yet — at the first migrate of a new instance, or
// the first time an operator that recorded none sees an instance that had a catalog. Otherwise the
// recorded one ("" for an external database, a catalog not yet made, or no claim in the cache).
func RecordClaim(db *v1alpha1.DatabaseStatus, managed bool, claim *Claim) string {
	if db == nil {
		return ""
	}
	if db.ClaimUID != "" || !managed || db.CatalogRevision == "" || claim == nil || claim.Terminating {
		return db.ClaimUID
	}
	return claim.UID
}

// detect returns the loss the observation shows, nil when the catalog is where it was (or the
// instance never had one).
func detect(o Observed) *v1alpha1.CatalogLost {
	var rev, uid string
	if db := o.Database; db != nil {
		rev, uid = db.CatalogRevision, db.ClaimUID
	}
	l := &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled, Revision: rev, Backup: o.NewestBackup,
		Time: metav1.NewTime(o.Now.UTC().Truncate(time.Second))}
	if o.Managed {
		l.Claim, l.OldClaimUID = o.ClaimName, uid
	}
	switch {
	case o.Managed && uid != "" && o.Claim == nil:
		l.Reason = LostClaimDeleted
	case o.Managed && uid != "" && o.Claim.UID != uid:
		l.Reason, l.NewClaimUID = LostClaimReplaced, o.Claim.UID
	case o.Managed && uid != "" && o.Claim.Terminating:
		l.Reason = LostClaimDeleted
	case rev != "" && o.EmptyReported:
		l.Reason = LostDatabaseEmpty
		if o.Managed && o.Claim != nil && !o.Claim.Terminating {
			l.NewClaimUID = o.Claim.UID
		}
	default:
		return nil
	}
	return l
}

// Decide decides what a lost catalog asks of the reconcile: nothing while the catalog is where it
// was; else the record, Tiled stopped and the condition, then under RestoreLatest the restore of the
// newest whole backup, until a Tiled pod started after it reports the catalog at a revision; or,
// once a person accepts the loss, nothing again, with the catalog forgotten.
func Decide(o Observed) Decision {
	var d Decision
	lost := o.Lost.DeepCopy()
	if lost == nil {
		if lost = detect(o); lost == nil {
			return d
		}
		d.Changed = true
		d.Event = &Event{Warning: true, Reason: ReasonCatalogLost}
	}
	// The claim in the old one's place, once there is one.
	if o.Managed && o.Claim != nil && !o.Claim.Terminating && o.Claim.UID != lost.OldClaimUID && lost.NewClaimUID != o.Claim.UID {
		lost.NewClaimUID, d.Changed = o.Claim.UID, true
	}
	if accepted(o, lost) {
		return Decision{Changed: true, ClaimUID: lost.NewClaimUID, ForgetCatalog: true,
			Event: &Event{Reason: ReasonCatalogLossAccepted, Message: fmt.Sprintf(
				"the loss of the catalog of %s (revision %s) is accepted (annotation %s=%s): Tiled starts on the empty database and initialises a new catalog",
				o.Instance, orNone(lost.Revision), v1alpha1.AnnotationAcceptCatalogLoss, o.Accept)}}
	}
	stopped := &render.Lifecycle{Stopped: true}
	lostMsg := message(o, lost)
	if d.Event != nil {
		d.Event.Message = lostMsg
	}
	if o.Policy != v1alpha1.CatalogLostRestoreLatest || lost.Backup == "" {
		d.Lost, d.Lifecycle, d.Stall = setPhase(lost, v1alpha1.CatalogLostStalled, &d), stopped, &backup.Note{Reason: ReasonCatalogLost, Message: lostMsg}
		return d
	}
	if lost.Phase == v1alpha1.CatalogLostRestored {
		d.Lost = lost
		if o.Reported != "" {
			// The catalog is back: a Tiled pod started after the restore migrated it and reports it.
			d.Lost, d.Changed = nil, true
			d.ClaimUID = lost.NewClaimUID
			d.Event = &Event{Reason: ReasonCatalogRestored, Message: fmt.Sprintf(
				"the catalog of %s is restored from backup %s on %s and served again at revision %s (it was lost at revision %s)",
				o.Instance, lost.Backup, o.Target, o.Reported, orNone(lost.Revision))}
			return d
		}
		d.Progress = &backup.Note{Reason: ReasonCatalogRestored, Message: fmt.Sprintf(
			"the lost catalog of %s is restored from backup %s; Tiled starts on it (spec.backup.onCatalogLost RestoreLatest)", o.Instance, lost.Backup)}
		return d
	}
	if o.Managed && (o.Claim == nil || o.Claim.Terminating || lost.NewClaimUID == "") {
		// The restore goes into the new database: there is none yet.
		d.Lost, d.Lifecycle = setPhase(lost, v1alpha1.CatalogLostStalled, &d), stopped
		d.Stall = &backup.Note{Reason: ReasonCatalogLost, Message: lostMsg + "; backup " + lost.Backup +
			" is restored (spec.backup.onCatalogLost RestoreLatest) once the new database claim exists"}
		return d
	}
	lost = setPhase(lost, v1alpha1.CatalogLostRestoring, &d)
	d.Lost = lost
	d.Lifecycle = &render.Lifecycle{Stopped: true, ToolsImage: o.ToolsImage,
		Step: &render.Step{Kind: render.StepRecover, Backup: lost.Backup, FromVersion: o.Version}}
	j := o.Job
	switch {
	case j == nil || (!j.Complete && !j.Failed):
		d.Progress = &backup.Note{Reason: ReasonRestoringCatalog, Message: fmt.Sprintf(
			"the catalog of %s was lost (%s): restoring backup %s from %s into the new database (spec.backup.onCatalogLost RestoreLatest); Tiled stays stopped until it is restored",
			o.Instance, how(lost), lost.Backup, o.Target)}
	case j.Failed:
		msg := strings.TrimSpace(j.Message)
		if msg == "" {
			msg = "the restore Job failed without a message"
		}
		if len(msg) > maxMessage {
			msg = "..." + msg[len(msg)-maxMessage:]
		}
		if lost.Message != msg {
			lost.Message, d.Changed = msg, true
		}
		d.Stall = &backup.Note{Reason: ReasonCatalogRestoreFailed, Message: fmt.Sprintf(
			"%s; restoring backup %s (Job %s) failed: %s; the database was left as it was and Tiled is not started: restore another backup by hand (docs/backups.md), or accept the loss",
			lostMsg, lost.Backup, j.Name, msg)}
	default:
		lost = setPhase(lost, v1alpha1.CatalogLostRestored, &d)
		t := metav1.NewTime(o.Now.UTC().Truncate(time.Second))
		lost.RestoreCompletionTime, lost.Message = &t, ""
		d.Lost, d.Lifecycle = lost, nil
		d.Progress = &backup.Note{Reason: ReasonCatalogRestored, Message: fmt.Sprintf(
			"the lost catalog of %s is restored from backup %s; Tiled starts on it (spec.backup.onCatalogLost RestoreLatest)", o.Instance, lost.Backup)}
	}
	return d
}

// setPhase returns l at phase p, marking the decision changed when it was at another.
func setPhase(l *v1alpha1.CatalogLost, p v1alpha1.CatalogLostPhase, d *Decision) *v1alpha1.CatalogLost {
	if l.Phase != p {
		l.Phase, d.Changed = p, true
	}
	return l
}

// accepted says a person accepted this loss: the annotation names the claim now bound (or, for an
// external database or a database emptied on its own claim, says "true" or names that claim).
func accepted(o Observed, l *v1alpha1.CatalogLost) bool {
	switch {
	case o.Accept == "":
		return false
	case l.NewClaimUID != "":
		return o.Accept == l.NewClaimUID
	case !o.Managed:
		return o.Accept == "true"
	}
	return false
}

// how says how the loss was found.
func how(l *v1alpha1.CatalogLost) string {
	switch l.Reason {
	case LostClaimReplaced:
		return fmt.Sprintf("its database claim %s is not the one the catalog lived on: UID %s, was %s", l.Claim, l.NewClaimUID, l.OldClaimUID)
	case LostClaimDeleted:
		s := fmt.Sprintf("its database claim %s (UID %s) was deleted", l.Claim, l.OldClaimUID)
		if l.NewClaimUID != "" {
			s += fmt.Sprintf(" and made again empty (UID %s)", l.NewClaimUID)
		}
		return s
	}
	if l.Claim != "" {
		return fmt.Sprintf("the migrate step found its catalog database empty, on claim %s (UID %s)", l.Claim, orNone(l.NewClaimUID))
	}
	return "the migrate step found its (external) catalog database empty"
}

// message is the CatalogLost condition's message: the claim, the old and new UIDs, the revision
// lost, the backup that would restore it and what a person can do.
func message(o Observed, l *v1alpha1.CatalogLost) string {
	restore := fmt.Sprintf("there is no whole backup to restore it from (spec.backup's target: %s)", orNone(o.Target))
	if l.Backup != "" {
		restore = fmt.Sprintf("the newest whole backup that would restore it is %s on %s", l.Backup, o.Target)
	}
	accept := "true"
	if l.NewClaimUID != "" {
		accept = l.NewClaimUID
	}
	todo := fmt.Sprintf("accept the loss and start with an empty catalog: kubectl annotate tiledinstance %s %s=%s", o.Name, v1alpha1.AnnotationAcceptCatalogLoss, accept)
	if o.Managed && l.NewClaimUID == "" {
		todo = "once the new claim exists, accept the loss with the annotation " + v1alpha1.AnnotationAcceptCatalogLoss + "=<its UID>"
	}
	if l.Backup != "" && o.Policy != v1alpha1.CatalogLostRestoreLatest {
		todo = "set spec.backup.onCatalogLost: RestoreLatest to restore it, or " + todo
	}
	return fmt.Sprintf("TiledInstance %s: its catalog (revision %s) is lost: %s; Tiled is stopped and scheduled backups suspended, so that nothing serves or backs up an empty catalog; %s; %s",
		o.Instance, orNone(l.Revision), how(l), restore, todo)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
