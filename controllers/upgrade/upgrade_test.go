package upgrade

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

const (
	oldImage   = "ghcr.io/bluesky/tiled:0.2.14"
	newImage   = "ghcr.io/bluesky/tiled:0.2.20"
	thirdImage = "ghcr.io/bluesky/tiled:0.2.18"
	tools      = "docker.io/library/postgres:17"
	catOld     = "6825c778aa3c"
	catNew     = "dfbb7478c6bd"
	authOld    = "c7777c8e7c8b"
	authNew    = "a806cc635ab2"
	backup     = "pre-upgrade-20261203-031510"
	// failure is the Message the migrate step's failure records (Restoring, then Failed).
	failure = "the migration of the catalog from revision " + catOld + " to " + catNew + " by " + newImage +
		" failed; backup " + backup + " was restored and Tiled 0.2.14 serves again; set spec.tiled.image to a fixed image, or back to " +
		oldImage + ": sqlalchemy.exc.ProgrammingError: column already exists"
)

// t0 is when the upgrade began; now when Decide decides.
var (
	t0  = time.Date(2026, 12, 3, 3, 15, 0, 0, time.UTC)
	now = t0.Add(4 * time.Minute)
)

func mt(t time.Time) metav1.Time   { return metav1.NewTime(t) }
func mtp(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

// phases in order, as the procedure moves through them on success (Restoring and Failed: on failure).
var order = []v1alpha1.UpgradePhase{
	v1alpha1.UpgradeChecking, v1alpha1.UpgradeBackingUp, v1alpha1.UpgradeStopping, v1alpha1.UpgradeMigrating,
	v1alpha1.UpgradeStarting, v1alpha1.UpgradeRestoring, v1alpha1.UpgradeFailed,
}

// at is the status.upgrade the procedure records when it reaches phase p (from oldImage to
// newImage): the phases before it passed (Restoring and Failed after Migrating), each begun at t0 +
// its index in order minutes.
func at(p v1alpha1.UpgradePhase) *v1alpha1.UpgradeStatus {
	u := &v1alpha1.UpgradeStatus{Phase: p, FromImage: oldImage, ToImage: newImage, FromVersion: "0.2.14", ToVersion: "0.2.20", StartTime: mt(t0)}
	failing := p == v1alpha1.UpgradeRestoring || p == v1alpha1.UpgradeFailed
	for i, q := range order {
		if q == v1alpha1.UpgradeStarting && failing {
			continue
		}
		u.PhaseTime = mtp(t0.Add(time.Duration(i) * time.Minute))
		switch q {
		case v1alpha1.UpgradeBackingUp:
			u.FromRevision, u.ToRevision, u.AuthFromRevision, u.AuthToRevision = catOld, catNew, authOld, authNew
			u.Backup = backup
		case v1alpha1.UpgradeStopping:
			u.StopTime = u.PhaseTime
		case v1alpha1.UpgradeStarting:
			u.MigrationSeconds = "42.5"
		case v1alpha1.UpgradeRestoring:
			u.MigrationSeconds, u.Message = "42.5", failure
		}
		if q == p {
			break
		}
	}
	return u
}

// with is a copy of u changed by f.
func with(u *v1alpha1.UpgradeStatus, f func(*v1alpha1.UpgradeStatus)) *v1alpha1.UpgradeStatus {
	n := u.DeepCopy()
	f(n)
	return n
}

// running is a step's Job that has not ended.
var running = &Job{StartTime: now.Add(-time.Minute)}

func complete(msg string) *Job {
	return &Job{Complete: true, Message: msg, StartTime: now.Add(-time.Minute), CompletionTime: now.Add(-time.Minute + 42500*time.Millisecond)}
}

func failed(msg string) *Job {
	return &Job{Failed: true, Message: msg, StartTime: now.Add(-time.Minute), CompletionTime: now.Add(-time.Minute + 30*time.Second)}
}

// report is a revisions report as entrypoint.py's publish writes it (sorted keys, no spaces).
func report(version, catCurrent string, catKnown bool, catRequired string, auth ...string) string {
	rev := func(current string, known bool, required string) string {
		c := "null"
		if current != "" {
			c = `"` + current + `"`
		}
		return fmt.Sprintf(`{"current":%s,"known":%t,"required":"%s"}`, c, known, required)
	}
	out := "{"
	if len(auth) == 3 {
		out += `"auth":` + rev(auth[0], auth[1] == "true", auth[2]) + ","
	}
	return out + `"catalog":` + rev(catCurrent, catKnown, catRequired) + `,"version":"` + version + `"}`
}

// migrateLog is a failed step's log: more lines than a message keeps.
const migrateLog = `INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.
INFO  [alembic.runtime.migration] Will assume transactional DDL.

INFO  [alembic.runtime.migration] Running upgrade 6825c778aa3c -> 0b033e7fbe30
Traceback (most recent call last):
  File "/opt/venv/bin/tiled", line 8, in <module>
  File "sqlalchemy/engine/base.py", line 1967, in _exec_single_context
psycopg.errors.DuplicateColumn: column "structure_family" already exists
sqlalchemy.exc.ProgrammingError: column already exists
`

// lc is the Lifecycle Decide renders once a backup is named: the backup claim with it.
func lc(serving string, stopped bool, step *render.Step) *render.Lifecycle {
	return &render.Lifecycle{ServingImage: serving, Stopped: stopped, Step: step, BackupClaim: true, ToolsImage: tools}
}

// lcNoClaim is the Lifecycle of a check before any backup: no backup claim (a check that finds no
// migration to do leaves none behind).
func lcNoClaim(serving string, stopped bool, step *render.Step) *render.Lifecycle {
	l := lc(serving, stopped, step)
	l.BackupClaim = false
	return l
}

var (
	checkStep   = &render.Step{Kind: render.StepCheck, Image: newImage}
	backupStep  = &render.Step{Kind: render.StepBackup, Backup: backup, FromVersion: "0.2.14"}
	migrateStep = &render.Step{Kind: render.StepMigrate, Image: newImage}
	restoreStep = &render.Step{Kind: render.StepRestore, Backup: backup}
	upgrading   = &Condition{Reason: ReasonUpgrading}
)

// texts are the free-text parts of a Decision, checked by substring.
type texts struct{ event, stall, progress, upgrade string }

// split returns d without its free text, and the text.
func split(d Decision) (Decision, texts) {
	var t texts
	if d.Event != nil {
		e := *d.Event
		t.event, e.Message = e.Message, ""
		d.Event = &e
	}
	if d.Stall != nil {
		c := *d.Stall
		t.stall, c.Message = c.Message, ""
		d.Stall = &c
	}
	if d.Progress != nil {
		c := *d.Progress
		t.progress, c.Message = c.Message, ""
		d.Progress = &c
	}
	if d.Upgrade != nil {
		d.Upgrade = d.Upgrade.DeepCopy()
		t.upgrade, d.Upgrade.Message = d.Upgrade.Message, ""
	}
	return d, t
}

// TestDecide: every transition of the procedure, from one observation each.
func TestDecide(t *testing.T) {
	// base: the spec moved from oldImage to newImage; the StatefulSet runs oldImage.
	base := func() Observed {
		return Observed{
			SpecImage: newImage, SpecVersion: "0.2.20", ServingImage: oldImage, ServingVersion: "0.2.14",
			ServerPods: 2, ToolsImage: tools, Now: now,
		}
	}
	// in is base in phase p with the step's Job j.
	in := func(p v1alpha1.UpgradePhase, j *Job) func(*Observed) {
		return func(o *Observed) { o.Upgrade, o.Job = at(p), j }
	}
	nowT := mtp(now)
	est := time.FixedZone("EST", -5*3600)

	cases := []struct {
		name   string
		change func(*Observed)
		// want is the Decision, compared without its free text (Upgrade.Message is among it).
		want Decision
		// substrings of the Event's, the stall's, the progress's and Upgrade.Message.
		event, stall, progress, upgrade []string
	}{
		// No upgrade.
		{name: "no StatefulSet: a new instance has nothing to upgrade", change: func(o *Observed) { o.ServingImage, o.ServingVersion, o.ServerPods = "", "", 0 }},
		{name: "serving the spec's image: nothing to do", change: func(o *Observed) { o.ServingImage, o.ServingVersion = newImage, "0.2.20" }},

		// Checking.
		{
			name:   "a new image begins the upgrade: Checking, a check Job on the new image, the old image serving",
			change: func(*Observed) {},
			want: Decision{
				Lifecycle: lcNoClaim(oldImage, false, checkStep), Changed: true, Progress: upgrading,
				Upgrade: &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeChecking, FromImage: oldImage, ToImage: newImage,
					FromVersion: "0.2.14", ToVersion: "0.2.20", StartTime: mt(now), PhaseTime: nowT},
				Event: &Event{Normal: true, Reason: ReasonUpgrading},
			},
			event:    []string{"spec.tiled.image changed from " + oldImage + " to " + newImage, "checking"},
			progress: []string{"0.2.14 -> 0.2.20", "checking", "the old version serves"},
		},
		{
			name: "versions unknown: the images name the upgrade", change: func(o *Observed) { o.SpecVersion, o.ServingVersion = "", "" },
			want: Decision{
				Lifecycle: lcNoClaim(oldImage, false, checkStep), Changed: true, Progress: upgrading,
				Upgrade: &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeChecking, FromImage: oldImage, ToImage: newImage,
					StartTime: mt(now), PhaseTime: nowT},
				Event: &Event{Normal: true, Reason: ReasonUpgrading},
			},
			progress: []string{oldImage + " -> " + newImage},
		},
		{name: "checking, the Job not in the cache yet: stays", change: in(v1alpha1.UpgradeChecking, nil),
			want: Decision{Upgrade: at(v1alpha1.UpgradeChecking), Lifecycle: lcNoClaim(oldImage, false, checkStep), Progress: upgrading}},
		{name: "checking, the Job running: stays", change: in(v1alpha1.UpgradeChecking, running),
			want: Decision{Upgrade: at(v1alpha1.UpgradeChecking), Lifecycle: lcNoClaim(oldImage, false, checkStep), Progress: upgrading}},
		{
			name:   "check complete, revisions equal: no migration, the pods roll to the new image",
			change: in(v1alpha1.UpgradeChecking, complete(report("0.2.20", catNew, true, catNew, authNew, "true", authNew))),
			want:   Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradedInPlace}},
			event:  []string{"0.2.14 -> 0.2.20 needs no migration", "catalog at revision " + catNew, newImage},
		},
		{
			name:   "check complete, databases not initialized: no migration",
			change: in(v1alpha1.UpgradeChecking, complete(report("0.2.20", "", true, catNew))),
			want:   Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradedInPlace}},
		},
		{
			name: "check: an unknown (newer) catalog revision refuses the downgrade, naming the last backup",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeChecking, complete(report("0.2.14", catNew, false, catOld)))(o)
				o.LastBackup = backup
			},
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeChecking), Changed: true, Lifecycle: lc(oldImage, false, checkStep),
				Stall: &Condition{Reason: ReasonDowngradeRefused},
			},
			stall: []string{"catalog database is at revision " + catNew, "Tiled 0.2.14 (" + newImage + ") does not know",
				"restored from backup " + backup, "the old version (" + oldImage + ") serves"},
		},
		{
			name:   "check: an unknown auth revision, no backup ever taken",
			change: in(v1alpha1.UpgradeChecking, complete(report("0.2.14", catOld, true, catOld, authNew, "false", authOld))),
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeChecking), Changed: true, Lifecycle: lcNoClaim(oldImage, false, checkStep),
				Stall: &Condition{Reason: ReasonDowngradeRefused},
			},
			stall: []string{"auth database is at revision " + authNew, "no backup of the databases before their migration is known to the operator"},
		},
		{
			name: "check: refused again with the message recorded already is no change",
			change: func(o *Observed) {
				o.Upgrade, o.Job = at(v1alpha1.UpgradeChecking), complete(report("0.2.14", catNew, false, catOld))
				o.Upgrade.Message = Decide(*o).Stall.Message
			},
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeChecking), Lifecycle: lcNoClaim(oldImage, false, checkStep),
				Stall: &Condition{Reason: ReasonDowngradeRefused},
			},
			upgrade: []string{"does not know"},
		},
		{
			name: "check: an older revision backs up first, the backup named from now (UTC), the revisions recorded",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeChecking, complete(report("0.2.20", catOld, true, catNew, authOld, "true", authNew)))(o)
				o.Now = time.Date(2026, 12, 2, 22, 19, 5, 0, est)
			},
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeChecking), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime = v1alpha1.UpgradeBackingUp, mtp(time.Date(2026, 12, 2, 22, 19, 5, 0, est))
					u.FromRevision, u.ToRevision, u.AuthFromRevision, u.AuthToRevision = catOld, catNew, authOld, authNew
					u.Backup = "pre-upgrade-20261203-031905"
				}),
				Changed:   true,
				Lifecycle: lc(oldImage, false, &render.Step{Kind: render.StepBackup, Backup: "pre-upgrade-20261203-031905", FromVersion: "0.2.14"}),
				Progress:  upgrading,
			},
			progress: []string{"backing up the databases to pre-upgrade-20261203-031905", "the old version serves"},
		},
		{
			name:   "check: the version the image reports replaces the one its tag said",
			change: in(v1alpha1.UpgradeChecking, complete(report("0.2.19", catOld, true, catNew))),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeChecking), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.ToVersion = v1alpha1.UpgradeBackingUp, nowT, "0.2.19"
					u.FromRevision, u.ToRevision = catOld, catNew
					u.Backup = "pre-upgrade-20261203-031900"
				}),
				Changed:   true,
				Lifecycle: lc(oldImage, false, &render.Step{Kind: render.StepBackup, Backup: "pre-upgrade-20261203-031900", FromVersion: "0.2.14"}),
				Progress:  upgrading,
			},
		},
		{
			name:   "check Job failed: CheckFailed, not retried (its Job stays rendered), the old version serves",
			change: in(v1alpha1.UpgradeChecking, failed("connection refused\nno database at postgres:5432")),
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeChecking), Changed: true, Lifecycle: lcNoClaim(oldImage, false, checkStep),
				Stall: &Condition{Reason: ReasonCheckFailed},
			},
			stall: []string{"the check of the databases with " + newImage + " failed", "the old version serves",
				"connection refused | no database at postgres:5432"},
		},
		{
			name:   "check complete with an unreadable report: CheckFailed",
			change: in(v1alpha1.UpgradeChecking, complete("Traceback: boom")),
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeChecking), Changed: true, Lifecycle: lcNoClaim(oldImage, false, checkStep),
				Stall: &Condition{Reason: ReasonCheckFailed},
			},
			stall: []string{"reported nothing readable", "not a revisions report"},
		},

		// BackingUp.
		{name: "backing up, the Job running: stays", change: in(v1alpha1.UpgradeBackingUp, running),
			want:     Decision{Upgrade: at(v1alpha1.UpgradeBackingUp), Lifecycle: lc(oldImage, false, backupStep), Progress: upgrading},
			progress: []string{"backing up the databases to " + backup}},
		{
			name:   "backup complete: Stopping, the stop time set, Tiled stopped, no Job",
			change: in(v1alpha1.UpgradeBackingUp, complete(`{"name":"`+backup+`"}`)),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeBackingUp), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.StopTime = v1alpha1.UpgradeStopping, nowT, nowT
				}),
				Changed: true, Lifecycle: lc(oldImage, true, nil), Progress: upgrading,
			},
			progress: []string{"stopping the old version's pods"},
		},
		{
			name:   "backup Job failed: BackupFailed, nothing migrated, the old version serves",
			change: in(v1alpha1.UpgradeBackingUp, failed("pg_dump: error: connection to server failed")),
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeBackingUp), Changed: true, Lifecycle: lc(oldImage, false, backupStep),
				Stall: &Condition{Reason: ReasonBackupFailed},
			},
			stall: []string{"the backup " + backup, "nothing was migrated", "the old version serves", "pg_dump: error"},
		},

		// Stopping.
		{name: "stopping with pods left: stays", change: in(v1alpha1.UpgradeStopping, nil),
			want: Decision{Upgrade: at(v1alpha1.UpgradeStopping), Lifecycle: lc(oldImage, true, nil), Progress: upgrading}},
		{
			name: "stopping, a terminating pod left: stays",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeStopping, nil)(o)
				o.ServerPods = 1
			},
			want: Decision{Upgrade: at(v1alpha1.UpgradeStopping), Lifecycle: lc(oldImage, true, nil), Progress: upgrading},
		},
		{
			name: "stopped, no pod left: Migrating, the migrate Job on the new image, Tiled stopped",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeStopping, nil)(o)
				o.ServerPods = 0
			},
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeStopping), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime = v1alpha1.UpgradeMigrating, nowT
				}),
				Changed: true, Lifecycle: lc(oldImage, true, migrateStep), Progress: upgrading,
			},
			progress: []string{"migrating the catalog from revision " + catOld + " to " + catNew},
		},

		// Migrating.
		{name: "migrating, the Job running: stays", change: in(v1alpha1.UpgradeMigrating, running),
			want: Decision{Upgrade: at(v1alpha1.UpgradeMigrating), Lifecycle: lc(oldImage, true, migrateStep), Progress: upgrading}},
		{
			name:   "migrate complete: Starting, the new image serving, not stopped, its duration recorded",
			change: in(v1alpha1.UpgradeMigrating, complete(report("0.2.20", catNew, true, catNew, authNew, "true", authNew))),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeMigrating), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.MigrationSeconds = v1alpha1.UpgradeStarting, nowT, "42.5"
				}),
				Changed: true, Lifecycle: lc(newImage, false, nil), Progress: upgrading,
			},
			progress: []string{"starting the new version"},
		},
		{
			name:   "migrate complete: the revisions it reports are recorded",
			change: in(v1alpha1.UpgradeMigrating, complete(report("0.2.20+local", "0b033e7fbe30", true, "0b033e7fbe30", "ffffffffffff", "true", "ffffffffffff"))),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeMigrating), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.MigrationSeconds = v1alpha1.UpgradeStarting, nowT, "42.5"
					u.ToVersion, u.ToRevision, u.AuthToRevision = "0.2.20+local", "0b033e7fbe30", "ffffffffffff"
				}),
				Changed: true, Lifecycle: lc(newImage, false, nil), Progress: upgrading,
			},
		},
		{
			name:   "migrate complete, no times and no report: Starting all the same",
			change: in(v1alpha1.UpgradeMigrating, &Job{Complete: true}),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeMigrating), func(u *v1alpha1.UpgradeStatus) { u.Phase, u.PhaseTime = v1alpha1.UpgradeStarting, nowT }),
				Changed: true, Lifecycle: lc(newImage, false, nil), Progress: upgrading,
			},
		},
		{
			name:   "migrate failed: Restoring the backup, Tiled stopped, the revisions and the error's tail recorded",
			change: in(v1alpha1.UpgradeMigrating, failed(migrateLog)),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeMigrating), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.MigrationSeconds = v1alpha1.UpgradeRestoring, nowT, "30.0"
				}),
				Changed: true, Lifecycle: lc(oldImage, true, restoreStep), Progress: upgrading,
			},
			progress: []string{"the migration failed; restoring backup " + backup},
			upgrade: []string{"from revision " + catOld + " to " + catNew, "by " + newImage, "backup " + backup,
				"Tiled 0.2.14 serves again", "or back to " + oldImage,
				": INFO  [alembic.runtime.migration] Running upgrade 6825c778aa3c -> 0b033e7fbe30 | Traceback (most recent call last):",
				"| sqlalchemy.exc.ProgrammingError: column already exists"},
		},

		// Starting.
		{name: "starting, not ready: stays", change: in(v1alpha1.UpgradeStarting, nil),
			want: Decision{Upgrade: at(v1alpha1.UpgradeStarting), Lifecycle: lc(newImage, false, nil), Progress: upgrading}},
		{
			name: "started and ready: Succeeded, recorded with its downtime, the upgrade done",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeStarting, nil)(o)
				o.ServingImage, o.ServerReady = newImage, true
			},
			want: Decision{
				Changed: true, Event: &Event{Normal: true, Reason: ReasonMigrated},
				Record: &v1alpha1.MigrationRecord{FromVersion: "0.2.14", ToVersion: "0.2.20", FromRevision: catOld, ToRevision: catNew,
					Backup: backup, Result: ResultSucceeded, StartTime: mt(t0), CompletionTime: mt(now),
					MigrationSeconds: "42.5", DowntimeSeconds: "120.0"},
			},
			event: []string{"Tiled 0.2.14 -> 0.2.20", "from revision " + catOld + " to " + catNew, "in 42.5s", "120.0s without a serving pod", "backup " + backup},
		},

		// Restoring.
		{name: "restoring, the Job running: stays, Tiled stopped", change: in(v1alpha1.UpgradeRestoring, running),
			want:    Decision{Upgrade: at(v1alpha1.UpgradeRestoring), Lifecycle: lc(oldImage, true, restoreStep), Progress: upgrading},
			upgrade: []string{failure}},
		{
			name:   "restore complete: Failed, MigrationFailed, RolledBack recorded, the old image serving",
			change: in(v1alpha1.UpgradeRestoring, complete(`{"restored":"`+backup+`"}`)),
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeRestoring), func(u *v1alpha1.UpgradeStatus) { u.Phase, u.PhaseTime = v1alpha1.UpgradeFailed, nowT }),
				Changed: true, Lifecycle: lc(oldImage, false, nil),
				Stall: &Condition{Reason: ReasonMigrationFailed}, Event: &Event{Reason: ReasonMigrationFailed},
				Record: &v1alpha1.MigrationRecord{FromVersion: "0.2.14", ToVersion: "0.2.20", FromRevision: catOld, ToRevision: catNew,
					Backup: backup, Result: ResultRolledBack, StartTime: mt(t0), CompletionTime: mt(now),
					MigrationSeconds: "42.5", DowntimeSeconds: "120.0"},
			},
			stall: []string{failure}, event: []string{failure}, upgrade: []string{failure},
		},
		{
			name:   "restore failed: RestoreFailed, Tiled stays stopped",
			change: in(v1alpha1.UpgradeRestoring, failed("backup "+backup+" is corrupt: its checksums do not match")),
			want: Decision{
				Upgrade: at(v1alpha1.UpgradeRestoring), Lifecycle: lc(oldImage, true, restoreStep),
				Stall: &Condition{Reason: ReasonRestoreFailed},
			},
			stall: []string{"the migration of the catalog from revision " + catOld + " to " + catNew + " by " + newImage + " failed; restoring backup " + backup + " failed too",
				"Tiled stays stopped", "by hand", "is corrupt"},
		},

		{
			name: "restore failed, then the old image set back (restored by hand): the upgrade is dropped, the old image starts",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeRestoring, failed("backup "+backup+" is corrupt"))(o)
				o.SpecImage, o.SpecVersion = oldImage, "0.2.14"
			},
			want:  Decision{Changed: true, Event: &Event{Reason: ReasonUpgradeCancelled}},
			event: []string{"after the restore of backup " + backup + " failed"},
		},
		{
			name: "restoring, the old image set back while the restore runs: the restore finishes first",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeRestoring, running)(o)
				o.SpecImage, o.SpecVersion = oldImage, "0.2.14"
			},
			want:    Decision{Upgrade: at(v1alpha1.UpgradeRestoring), Lifecycle: lc(oldImage, true, restoreStep), Progress: upgrading},
			upgrade: []string{failure},
		},

		// Failed.
		{
			name:   "failed, the spec still on the failed image: stays stalled, the old image serving, no Job",
			change: in(v1alpha1.UpgradeFailed, nil),
			want: Decision{Upgrade: at(v1alpha1.UpgradeFailed), Lifecycle: lc(oldImage, false, nil),
				Stall: &Condition{Reason: ReasonMigrationFailed}},
			stall: []string{failure}, upgrade: []string{failure},
		},

		// The spec changes during the upgrade.
		{
			name: "spec back to the old image while checking: cancelled",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeChecking, running)(o)
				o.SpecImage, o.SpecVersion = oldImage, "0.2.14"
			},
			want:  Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradeCancelled}},
			event: []string{"spec.tiled.image is " + oldImage + " again", "the upgrade to " + newImage + " is dropped"},
		},
		{
			name: "spec back to the old image while backing up: cancelled",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeBackingUp, running)(o)
				o.SpecImage = oldImage
			},
			want: Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradeCancelled}},
		},
		{
			name: "spec back to the old image while stopping: cancelled, Tiled starts again",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeStopping, nil)(o)
				o.SpecImage = oldImage
			},
			want: Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradeCancelled}},
		},
		{
			name: "spec back to the old image after a failure: cancelled, the stall gone",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeFailed, nil)(o)
				o.SpecImage = oldImage
			},
			want: Decision{Changed: true, Event: &Event{Normal: true, Reason: ReasonUpgradeCancelled}},
		},
		{
			name: "spec to a third image while checking: begins again, from the old image",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeChecking, running)(o)
				o.SpecImage, o.SpecVersion = thirdImage, "0.2.18"
			},
			want: Decision{
				Lifecycle: lcNoClaim(oldImage, false, &render.Step{Kind: render.StepCheck, Image: thirdImage}), Changed: true, Progress: upgrading,
				Upgrade: &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeChecking, FromImage: oldImage, ToImage: thirdImage,
					FromVersion: "0.2.14", ToVersion: "0.2.18", StartTime: mt(now), PhaseTime: nowT},
				Event: &Event{Normal: true, Reason: ReasonUpgrading},
			},
			event: []string{"from " + oldImage + " to " + thirdImage + " during the upgrade to " + newImage},
		},
		{
			name: "spec to a third image after a failure: begins again from the old image (which serves)",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeFailed, nil)(o)
				o.SpecImage, o.SpecVersion = thirdImage, "0.2.18"
				o.ServingVersion = "0.2.99" // the upgrade's FromVersion is used, not the serving one
			},
			want: Decision{
				Lifecycle: lc(oldImage, false, &render.Step{Kind: render.StepCheck, Image: thirdImage}), Changed: true, Progress: upgrading,
				Upgrade: &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeChecking, FromImage: oldImage, ToImage: thirdImage,
					FromVersion: "0.2.14", ToVersion: "0.2.18", StartTime: mt(now), PhaseTime: nowT},
				Event: &Event{Normal: true, Reason: ReasonUpgrading},
			},
		},
		{
			name: "spec to a third image while migrating: carries on with the old target",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeMigrating, running)(o)
				o.SpecImage, o.SpecVersion = thirdImage, "0.2.18"
			},
			want: Decision{Upgrade: at(v1alpha1.UpgradeMigrating), Lifecycle: lc(oldImage, true, migrateStep), Progress: upgrading},
		},
		{
			name: "spec to a third image while migrating, the migration done: Starting the old target",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeMigrating, complete(report("0.2.20", catNew, true, catNew, authNew, "true", authNew)))(o)
				o.SpecImage = thirdImage
			},
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeMigrating), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.MigrationSeconds = v1alpha1.UpgradeStarting, nowT, "42.5"
				}),
				Changed: true, Lifecycle: lc(newImage, false, nil), Progress: upgrading,
			},
		},
		{
			name: "spec back to the old image while restoring: the restore finishes first",
			change: func(o *Observed) {
				in(v1alpha1.UpgradeRestoring, running)(o)
				o.SpecImage = oldImage
			},
			want:    Decision{Upgrade: at(v1alpha1.UpgradeRestoring), Lifecycle: lc(oldImage, true, restoreStep), Progress: upgrading},
			upgrade: []string{failure},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := base()
			tc.change(&o)
			before := o.Upgrade.DeepCopy()
			d := Decide(o)
			g.Expect(o.Upgrade).To(Equal(before), "the observed status is not modified")
			if !d.Changed {
				g.Expect(d.Upgrade).To(Equal(o.Upgrade), "an unchanged decision keeps the status")
			}
			if d.Stall != nil && d.Upgrade != nil && d.Stall.Reason != ReasonRestoreFailed {
				// (RestoreFailed keeps the migration's failure in the status, for the rollback a
				// restore run again reports.)
				g.Expect(d.Upgrade.Message).To(Equal(d.Stall.Message), "the status says why it is stalled")
			}
			g.Expect(d.Stall != nil && d.Progress != nil).To(BeFalse(), "never both stalled and progressing")
			got, txt := split(d)
			want, _ := split(tc.want)
			g.Expect(got).To(Equal(want))
			for _, s := range tc.event {
				g.Expect(txt.event).To(ContainSubstring(s))
			}
			for _, s := range tc.stall {
				g.Expect(txt.stall).To(ContainSubstring(s))
			}
			for _, s := range tc.progress {
				g.Expect(txt.progress).To(ContainSubstring(s))
			}
			for _, s := range tc.upgrade {
				g.Expect(txt.upgrade).To(ContainSubstring(s))
			}
			if tc.upgrade == nil && tc.stall == nil {
				g.Expect(txt.upgrade).To(BeEmpty())
			}
			if got.Progress != nil {
				g.Expect(txt.progress).To(HavePrefix("upgrading Tiled "))
			}
			if d.Lifecycle != nil {
				g.Expect(d.Lifecycle.Step).To(Equal(CurrentStep(d.Upgrade)), "the controller looks up the Job the decision renders")
			}
		})
	}
}

// TestDecideWalk drives the procedure as the controller does (the decision's status recorded, the
// step's Job looked up by CurrentStep), through a migration that succeeds and one that fails.
func TestDecideWalk(t *testing.T) {
	type world struct {
		jobs  map[render.StepKind]*Job // how the step's Job ends
		ready bool
	}
	walk := func(g Gomega, w world) (phases []v1alpha1.UpgradePhase, last Decision, record *v1alpha1.MigrationRecord) {
		o := Observed{SpecImage: newImage, SpecVersion: "0.2.20", ServingImage: oldImage, ServingVersion: "0.2.14",
			ServerPods: 2, ToolsImage: tools, Now: t0}
		for range 20 {
			o.Job = nil
			if s := CurrentStep(o.Upgrade); s != nil {
				o.Job = w.jobs[s.Kind]
			}
			d := Decide(o)
			if d.Record != nil {
				record = d.Record
			}
			if l := d.Lifecycle; l != nil {
				if l.Stopped {
					o.ServerPods = 0
				}
				o.ServingImage = l.ServingImage
			} else {
				o.ServingImage = o.SpecImage
			}
			o.ServerReady = w.ready && o.ServingImage == o.SpecImage
			last = d
			if !d.Changed {
				return phases, last, record
			}
			o.Upgrade = d.Upgrade
			if d.Upgrade == nil {
				return append(phases, ""), last, record
			}
			phases = append(phases, d.Upgrade.Phase)
			o.Now = o.Now.Add(time.Minute)
		}
		g.Expect(false).To(BeTrue(), "the walk ends")
		return
	}
	g := NewWithT(t)
	ok := map[render.StepKind]*Job{
		render.StepCheck:   complete(report("0.2.20", catOld, true, catNew)),
		render.StepBackup:  complete(`{}`),
		render.StepMigrate: complete(report("0.2.20", catNew, true, catNew)),
		render.StepRestore: complete(`{}`),
	}
	phases, last, rec := walk(g, world{jobs: ok, ready: true})
	g.Expect(phases).To(Equal([]v1alpha1.UpgradePhase{v1alpha1.UpgradeChecking, v1alpha1.UpgradeBackingUp, v1alpha1.UpgradeStopping,
		v1alpha1.UpgradeMigrating, v1alpha1.UpgradeStarting, ""}))
	g.Expect(last.Lifecycle).To(BeNil())
	g.Expect(rec.Result).To(Equal(ResultSucceeded))
	g.Expect(rec.Backup).To(Equal("pre-upgrade-20261203-031600"))
	g.Expect(rec.DowntimeSeconds).To(Equal("180.0"), "stopped at the third decision, ready at the sixth")

	bad := map[render.StepKind]*Job{}
	for k, v := range ok {
		bad[k] = v
	}
	bad[render.StepMigrate] = failed("boom")
	phases, last, rec = walk(g, world{jobs: bad, ready: true})
	g.Expect(phases).To(Equal([]v1alpha1.UpgradePhase{v1alpha1.UpgradeChecking, v1alpha1.UpgradeBackingUp, v1alpha1.UpgradeStopping,
		v1alpha1.UpgradeMigrating, v1alpha1.UpgradeRestoring, v1alpha1.UpgradeFailed}))
	g.Expect(last.Stall.Reason).To(Equal(ReasonMigrationFailed))
	g.Expect(last.Lifecycle).To(Equal(lc(oldImage, false, nil)))
	g.Expect(rec.Result).To(Equal(ResultRolledBack))
}

func TestParseReport(t *testing.T) {
	g := NewWithT(t)
	r, err := ParseReport(`{"auth":{"current":"` + authOld + `","known":true,"required":"` + authNew + `"},"catalog":{"current":"x","known":true,"required":"y"},"version":"0.2.20"}` + "\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Version).To(Equal("0.2.20"))
	g.Expect(r.Catalog.Rev()).To(Equal("x"))
	g.Expect(r.Catalog.Required).To(Equal("y"))
	g.Expect(r.Catalog.Known).To(BeTrue())
	g.Expect(r.Auth.Rev()).To(Equal(authOld))
	g.Expect(r.Auth.Required).To(Equal(authNew))

	r, err = ParseReport(report("0.2.14", "", true, catOld))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Catalog.Current).To(BeNil(), "a new database has no revision")
	g.Expect(r.Catalog.Rev()).To(BeEmpty())
	g.Expect(r.Auth).To(BeNil())
	g.Expect(r.Auth.Rev()).To(BeEmpty(), "no auth database")

	for _, msg := range []string{migrateLog, "", `{"version":"0.2.20"}`, `{"restored":"` + backup + `"}`} {
		_, err := ParseReport(msg)
		g.Expect(err).To(MatchError(ContainSubstring("not a revisions report")), msg)
	}
}

func TestTail(t *testing.T) {
	g := NewWithT(t)
	g.Expect(tail(migrateLog)).To(Equal(strings.Join([]string{
		"INFO  [alembic.runtime.migration] Running upgrade 6825c778aa3c -> 0b033e7fbe30",
		"Traceback (most recent call last):",
		`File "/opt/venv/bin/tiled", line 8, in <module>`,
		`File "sqlalchemy/engine/base.py", line 1967, in _exec_single_context`,
		`psycopg.errors.DuplicateColumn: column "structure_family" already exists`,
		"sqlalchemy.exc.ProgrammingError: column already exists",
	}, " | ")), "the last six lines that say something, trimmed, on one line")
	g.Expect(tail("one\n\n  two  \n")).To(Equal("one | two"))
	g.Expect(tail("")).To(Equal("(the step left no message)"))
	g.Expect(tail(" \n\n")).To(Equal("(the step left no message)"))

	// A framed traceback (as Typer draws it) ending in entrypoint.py's summary: the summary alone,
	// so that the message names the error and its Event fits the API's 1 kB note.
	summary := `[tiled-operator] tiled catalog upgrade-database failed with exit code 1: ProgrammingError: <class 'asyncpg.exceptions.DuplicateTableError'>: relation "access_grants" already exists`
	framed := "╭" + strings.Repeat("─", 400) + "╮\n│ frame │\n╰" + strings.Repeat("─", 400) + "╯\n" +
		"ProgrammingError: relation \"access_grants\" already exists\n" + summary + "\n"
	g.Expect(tail(framed)).To(Equal(summary))
	// Lines of frame only are no text.
	g.Expect(tail("a\n" + strings.Repeat("─", 300) + "\nb")).To(Equal("a | b"))
	// A long tail keeps its end, cut on a rune boundary.
	long := tail(strings.Repeat("é", 1000) + " end")
	g.Expect(len(long)).To(BeNumerically("<=", maxTail+len("...")))
	g.Expect(long).To(HavePrefix("..."))
	g.Expect(long).To(HaveSuffix(" end"))
	g.Expect(utf8.ValidString(long)).To(BeTrue())
}

func TestCurrentStep(t *testing.T) {
	g := NewWithT(t)
	g.Expect(CurrentStep(nil)).To(BeNil())
	want := map[v1alpha1.UpgradePhase]*render.Step{
		v1alpha1.UpgradeChecking:  checkStep,
		v1alpha1.UpgradeBackingUp: backupStep,
		v1alpha1.UpgradeStopping:  nil,
		v1alpha1.UpgradeMigrating: migrateStep,
		v1alpha1.UpgradeStarting:  nil,
		v1alpha1.UpgradeRestoring: restoreStep,
		v1alpha1.UpgradeFailed:    nil,
	}
	for _, p := range order {
		g.Expect(CurrentStep(at(p))).To(Equal(want[p]), string(p))
	}
}

// TestDecideBackupTarget: an instance with spec.backup's target backs up before the migration to
// it, named as the scheduled backups are and marked as the upgrade's; the backup CronJob is
// suspended from the check to the end of the backup (and, through Stopped, of the migration or the
// restore), never while the upgrade is stuck with the old version serving; the dump waits for a
// running scheduled backup; the restore reads the backup from the target; the record says where it
// is; a target that changes under the backup or the restore stalls the step.
func TestDecideBackupTarget(t *testing.T) {
	const (
		target   = "claim:facility-backups/tiled-backups/beamlines/csx"
		other    = "s3://tiled/tiled-backups/beamlines/csx at https://s3.facility.org"
		tBackup  = "20261203T031900Z-pre-upgrade-0.2.14-to-0.2.20"
		schedJob = "csx-backup-29412345"
	)
	// onT is the status.upgrade of at(p) with its backup on the target.
	onT := func(p v1alpha1.UpgradePhase) *v1alpha1.UpgradeStatus {
		return with(at(p), func(u *v1alpha1.UpgradeStatus) {
			if u.Backup != "" {
				u.Backup, u.BackupTarget = tBackup, target
			}
		})
	}
	base := func(p v1alpha1.UpgradePhase, j *Job) Observed {
		o := Observed{SpecImage: newImage, SpecVersion: "0.2.20", ServingImage: oldImage, ServingVersion: "0.2.14",
			ServerPods: 2, ToolsImage: tools, Now: now, Target: target, Job: j}
		if p != "" {
			o.Upgrade = onT(p)
		}
		return o
	}
	// life is a Lifecycle without the backup claim.
	life := func(serving string, stopped bool, step *render.Step, suspend bool) *render.Lifecycle {
		return &render.Lifecycle{ServingImage: serving, Stopped: stopped, Step: step, ToolsImage: tools, SuspendBackups: suspend}
	}
	tBackupStep := &render.Step{Kind: render.StepBackup, Backup: tBackup, FromVersion: "0.2.14", Target: target}
	tRestoreStep := &render.Step{Kind: render.StepRestore, Backup: tBackup, Target: target}
	nowT := mtp(now)

	cases := []struct {
		name   string
		o      Observed
		change func(*Observed)
		want   Decision
		// substrings of the stall's, the progress's and the Event's messages, and of the record's
		// fields.
		stall, progress, event []string
	}{
		{
			name: "a new image: Checking, the CronJob suspended from the check on, no backup claim",
			o:    base("", nil),
			want: Decision{
				Lifecycle: life(oldImage, false, checkStep, true), Changed: true, Progress: upgrading,
				Upgrade: &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeChecking, FromImage: oldImage, ToImage: newImage,
					FromVersion: "0.2.14", ToVersion: "0.2.20", StartTime: mt(now), PhaseTime: nowT},
				Event: &Event{Normal: true, Reason: ReasonUpgrading},
			},
		},
		{
			name: "checking, the Job running: the CronJob stays suspended",
			o:    base(v1alpha1.UpgradeChecking, running),
			want: Decision{Upgrade: onT(v1alpha1.UpgradeChecking), Lifecycle: life(oldImage, false, checkStep, true), Progress: upgrading},
		},
		{
			name: "the check failed: stuck with the old version serving, the scheduled backups go on",
			o:    base(v1alpha1.UpgradeChecking, failed("connection refused")),
			want: Decision{Upgrade: onT(v1alpha1.UpgradeChecking), Changed: true, Lifecycle: life(oldImage, false, checkStep, false),
				Stall: &Condition{Reason: ReasonCheckFailed}},
		},
		{
			name: "an older catalog: BackingUp to the target, named by the time (UTC) and the versions, no backup claim",
			o:    base(v1alpha1.UpgradeChecking, complete(report("0.2.20", catOld, true, catNew, authOld, "true", authNew))),
			change: func(o *Observed) {
				o.Now = time.Date(2026, 12, 2, 22, 19, 0, 0, time.FixedZone("EST", -5*3600))
			},
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeChecking), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime = v1alpha1.UpgradeBackingUp, mtp(time.Date(2026, 12, 2, 22, 19, 0, 0, time.FixedZone("EST", -5*3600)))
					u.FromRevision, u.ToRevision, u.AuthFromRevision, u.AuthToRevision = catOld, catNew, authOld, authNew
					u.Backup, u.BackupTarget = tBackup, target
				}),
				Changed: true, Lifecycle: life(oldImage, false, tBackupStep, true), Progress: upgrading,
			},
			progress: []string{"backing up the databases to " + tBackup + " on " + target, "the old version serves"},
		},
		{
			name: "an older catalog while a scheduled backup Job runs: BackingUp, the dump waiting for it",
			o:    base(v1alpha1.UpgradeChecking, complete(report("0.2.20", catOld, true, catNew))),
			change: func(o *Observed) {
				o.Now, o.ScheduledBackup = t0.Add(4*time.Minute), schedJob
			},
			want: Decision{
				Upgrade: with(at(v1alpha1.UpgradeChecking), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime = v1alpha1.UpgradeBackingUp, nowT
					u.FromRevision, u.ToRevision = catOld, catNew
					u.Backup, u.BackupTarget = tBackup, target
				}),
				Changed: true, Lifecycle: life(oldImage, false, nil, true), Progress: upgrading,
			},
			progress: []string{"waiting for the scheduled backup Job " + schedJob + " to end before backing up the databases to " + tBackup + " on " + target},
		},
		{
			name: "backing up, a scheduled backup Job running: the dump waits for it, the CronJob suspended",
			o:    base(v1alpha1.UpgradeBackingUp, nil),
			change: func(o *Observed) {
				o.ScheduledBackup = schedJob
			},
			want:     Decision{Upgrade: onT(v1alpha1.UpgradeBackingUp), Lifecycle: life(oldImage, false, nil, true), Progress: upgrading},
			progress: []string{"waiting for the scheduled backup Job " + schedJob + " to end before backing up the databases to " + tBackup + " on " + target},
		},
		{
			name: "backing up without a target, a scheduled backup Job running (the target removed since): waits all the same",
			o: Observed{SpecImage: newImage, SpecVersion: "0.2.20", ServingImage: oldImage, ServingVersion: "0.2.14",
				ServerPods: 2, ToolsImage: tools, Now: now, Upgrade: at(v1alpha1.UpgradeBackingUp), ScheduledBackup: schedJob},
			want:     Decision{Upgrade: at(v1alpha1.UpgradeBackingUp), Lifecycle: lc(oldImage, false, nil), Progress: upgrading},
			progress: []string{"waiting for the scheduled backup Job " + schedJob},
		},
		{
			name: "backing up, none running: the dump Job to the target",
			o:    base(v1alpha1.UpgradeBackingUp, nil),
			want: Decision{Upgrade: onT(v1alpha1.UpgradeBackingUp), Lifecycle: life(oldImage, false, tBackupStep, true), Progress: upgrading},
		},
		{
			name: "backing up, the Job running and a scheduled one begun beside it (by hand): the Job is kept",
			o:    base(v1alpha1.UpgradeBackingUp, running),
			change: func(o *Observed) {
				o.ScheduledBackup = schedJob
			},
			want: Decision{Upgrade: onT(v1alpha1.UpgradeBackingUp), Lifecycle: life(oldImage, false, tBackupStep, true), Progress: upgrading},
		},
		{
			name: "the backup complete: Stopping (the CronJob suspended through Stopped)",
			o:    base(v1alpha1.UpgradeBackingUp, complete(`{"name":"`+tBackup+`"}`)),
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeBackingUp), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.StopTime = v1alpha1.UpgradeStopping, nowT, nowT
				}),
				Changed: true, Lifecycle: life(oldImage, true, nil, false), Progress: upgrading,
			},
		},
		{
			name: "the backup failed: stuck, the old version serving, the scheduled backups go on",
			o:    base(v1alpha1.UpgradeBackingUp, failed("uploading catalog.dump failed")),
			want: Decision{Upgrade: onT(v1alpha1.UpgradeBackingUp), Changed: true, Lifecycle: life(oldImage, false, tBackupStep, false),
				Stall: &Condition{Reason: ReasonBackupFailed}},
			stall: []string{"the backup " + tBackup + " on " + target + " before the migration failed", "uploading catalog.dump failed"},
		},
		{
			name: "the target changed under the running backup: the backup begins again there, under a new name",
			o:    base(v1alpha1.UpgradeBackingUp, running),
			change: func(o *Observed) {
				o.Target, o.Now = other, now.Add(time.Minute)
			},
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeBackingUp), func(u *v1alpha1.UpgradeStatus) {
					u.PhaseTime = mtp(now.Add(time.Minute))
					u.Backup, u.BackupTarget = "20261203T032000Z-pre-upgrade-0.2.14-to-0.2.20", other
				}),
				Changed: true, Progress: upgrading,
				Lifecycle: life(oldImage, false, &render.Step{Kind: render.StepBackup, Backup: "20261203T032000Z-pre-upgrade-0.2.14-to-0.2.20",
					FromVersion: "0.2.14", Target: other}, true),
			},
			progress: []string{"backing up the databases to 20261203T032000Z-pre-upgrade-0.2.14-to-0.2.20 on " + other},
		},
		{
			name: "the backup failed, then the target changed (the way to fix it): the backup begins again there, the failure forgotten",
			o:    base(v1alpha1.UpgradeBackingUp, failed("the bucket does not exist")),
			change: func(o *Observed) {
				o.Target, o.Now = other, now.Add(time.Minute)
				o.Upgrade.Message = "the backup failed"
			},
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeBackingUp), func(u *v1alpha1.UpgradeStatus) {
					u.PhaseTime = mtp(now.Add(time.Minute))
					u.Backup, u.BackupTarget = "20261203T032000Z-pre-upgrade-0.2.14-to-0.2.20", other
				}),
				Changed: true, Progress: upgrading,
				Lifecycle: life(oldImage, false, &render.Step{Kind: render.StepBackup, Backup: "20261203T032000Z-pre-upgrade-0.2.14-to-0.2.20",
					FromVersion: "0.2.14", Target: other}, true),
			},
		},
		{
			name: "the target removed before the backup was whole: it begins again on the backup claim",
			o:    base(v1alpha1.UpgradeBackingUp, nil),
			change: func(o *Observed) {
				o.Target, o.Now = "", now.Add(time.Minute)
			},
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeBackingUp), func(u *v1alpha1.UpgradeStatus) {
					u.PhaseTime = mtp(now.Add(time.Minute))
					u.Backup, u.BackupTarget = "pre-upgrade-20261203-032000", ""
				}),
				Changed: true, Progress: upgrading,
				Lifecycle: lc(oldImage, false, &render.Step{Kind: render.StepBackup, Backup: "pre-upgrade-20261203-032000", FromVersion: "0.2.14"}),
			},
		},
		{
			name: "the target changed once the backup was whole: the upgrade goes on, the backup where it is",
			o:    base(v1alpha1.UpgradeBackingUp, complete(`{"name":"`+tBackup+`"}`)),
			change: func(o *Observed) {
				o.Target = other
			},
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeBackingUp), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.StopTime = v1alpha1.UpgradeStopping, nowT, nowT
				}),
				Changed: true, Lifecycle: life(oldImage, true, nil, false), Progress: upgrading,
			},
		},
		{
			name: "the migration failed: Restoring from the target, Tiled stopped",
			o:    base(v1alpha1.UpgradeMigrating, failed(migrateLog)),
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeMigrating), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime, u.MigrationSeconds = v1alpha1.UpgradeRestoring, nowT, "30.0"
				}),
				Changed: true, Lifecycle: life(oldImage, true, tRestoreStep, false), Progress: upgrading,
			},
			progress: []string{"restoring backup " + tBackup + " on " + target},
		},
		{
			name: "restoring, the target gone from spec.backup: stalled, no Job, Tiled stopped, the migration's failure kept",
			o:    base(v1alpha1.UpgradeRestoring, nil),
			change: func(o *Observed) {
				o.Target = ""
			},
			want: Decision{Upgrade: onT(v1alpha1.UpgradeRestoring), Lifecycle: life(oldImage, true, nil, false),
				Stall: &Condition{Reason: ReasonBackupTargetChanged}},
			stall: []string{"the migration of the catalog", "backup " + tBackup + " is on " + target, "spec.backup now names no target", "Tiled stays stopped"},
		},
		{
			name: "restoring, the target changed under the running restore: stalled, the Job not rendered",
			o:    base(v1alpha1.UpgradeRestoring, running),
			change: func(o *Observed) {
				o.Target = other
			},
			want: Decision{Upgrade: onT(v1alpha1.UpgradeRestoring), Lifecycle: life(oldImage, true, nil, false),
				Stall: &Condition{Reason: ReasonBackupTargetChanged}},
			stall: []string{"spec.backup now names " + other},
		},
		{
			name: "restoring, the target back: the restore Job again",
			o:    base(v1alpha1.UpgradeRestoring, nil),
			want: Decision{Upgrade: onT(v1alpha1.UpgradeRestoring), Lifecycle: life(oldImage, true, tRestoreStep, false), Progress: upgrading},
		},
		{
			name: "restored from the target: Failed, the record says where the backup is",
			o:    base(v1alpha1.UpgradeRestoring, complete(`{"restored":"`+tBackup+`"}`)),
			want: Decision{
				Upgrade: with(onT(v1alpha1.UpgradeRestoring), func(u *v1alpha1.UpgradeStatus) {
					u.Phase, u.PhaseTime = v1alpha1.UpgradeFailed, nowT
				}),
				Changed: true, Lifecycle: life(oldImage, false, nil, false),
				Record: &v1alpha1.MigrationRecord{FromVersion: "0.2.14", ToVersion: "0.2.20", FromRevision: catOld, ToRevision: catNew,
					Backup: tBackup, BackupTarget: target, Result: ResultRolledBack, StartTime: mt(t0), CompletionTime: mt(now),
					MigrationSeconds: "42.5", DowntimeSeconds: "120.0"},
				Stall: &Condition{Reason: ReasonMigrationFailed}, Event: &Event{Reason: ReasonMigrationFailed},
			},
		},
		{
			name: "the new version ready: done, the record and the Event say where the backup is",
			o:    base(v1alpha1.UpgradeStarting, nil),
			change: func(o *Observed) {
				o.ServingImage, o.ServerReady, o.ServerPods = newImage, true, 2
			},
			want: Decision{
				Changed: true,
				Record: &v1alpha1.MigrationRecord{FromVersion: "0.2.14", ToVersion: "0.2.20", FromRevision: catOld, ToRevision: catNew,
					Backup: tBackup, BackupTarget: target, Result: ResultSucceeded, StartTime: mt(t0), CompletionTime: mt(now),
					MigrationSeconds: "42.5", DowntimeSeconds: "120.0"},
				Event: &Event{Normal: true, Reason: ReasonMigrated},
			},
			event: []string{"backup " + tBackup + " on " + target},
		},
		{
			name: "the last backup on the target: a refused downgrade names it there, and no backup claim is rendered",
			o:    base(v1alpha1.UpgradeChecking, complete(report("0.2.14", catNew, false, catOld))),
			change: func(o *Observed) {
				o.LastBackup, o.LastBackupTarget = tBackup, target
			},
			want: Decision{Upgrade: onT(v1alpha1.UpgradeChecking), Changed: true, Lifecycle: life(oldImage, false, checkStep, false),
				Stall: &Condition{Reason: ReasonDowngradeRefused}},
			stall: []string{"restored from backup " + tBackup + " on " + target},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := tc.o
			if tc.change != nil {
				tc.change(&o)
			}
			d := Decide(o)
			got, txt := split(d)
			want, _ := split(tc.want)
			g.Expect(got).To(Equal(want))
			for _, s := range tc.stall {
				g.Expect(txt.stall).To(ContainSubstring(s))
			}
			for _, s := range tc.progress {
				g.Expect(txt.progress).To(ContainSubstring(s))
			}
			for _, s := range tc.event {
				g.Expect(txt.event).To(ContainSubstring(s))
			}
			if d.Lifecycle != nil && d.Lifecycle.Step != nil {
				g.Expect(d.Lifecycle.Step).To(Equal(CurrentStep(d.Upgrade)), "the controller looks up the Job the decision renders")
			}
		})
	}
}

// TestDecideWalkSuspendsBackups drives an upgrade with a backup target to its end, as the
// controller does: the backup CronJob is suspended (SuspendBackups, or Stopped) in every phase from
// the check to the migration, and not once the new version starts; without a target nothing asks
// for it (there is no CronJob).
func TestDecideWalkSuspendsBackups(t *testing.T) {
	for _, target := range []string{"claim:nfs/tiled-backups/b/chx", ""} {
		t.Run("target "+target, func(t *testing.T) {
			g := NewWithT(t)
			jobs := map[render.StepKind]*Job{
				render.StepCheck:   complete(report("0.2.20", catOld, true, catNew)),
				render.StepBackup:  complete(`{}`),
				render.StepMigrate: complete(report("0.2.20", catNew, true, catNew)),
			}
			o := Observed{SpecImage: newImage, SpecVersion: "0.2.20", ServingImage: oldImage, ServingVersion: "0.2.14",
				ServerPods: 2, ToolsImage: tools, Now: t0, Target: target}
			suspended := map[v1alpha1.UpgradePhase]bool{}
			var rec *v1alpha1.MigrationRecord
			for range 20 {
				o.Job = nil
				if s := CurrentStep(o.Upgrade); s != nil {
					o.Job = jobs[s.Kind]
				}
				d := Decide(o)
				if d.Record != nil {
					rec = d.Record
				}
				if l := d.Lifecycle; l != nil {
					suspended[d.Upgrade.Phase] = l.SuspendBackups || l.Stopped
					if l.Stopped {
						o.ServerPods = 0
					}
					o.ServingImage = l.ServingImage
				} else {
					o.ServingImage = o.SpecImage
				}
				o.ServerReady = o.ServingImage == o.SpecImage
				if !d.Changed || d.Upgrade == nil {
					break
				}
				o.Upgrade = d.Upgrade
				o.Now = o.Now.Add(time.Minute)
			}
			g.Expect(rec).NotTo(BeNil())
			g.Expect(rec.Result).To(Equal(ResultSucceeded))
			if target == "" {
				g.Expect(rec.Backup).To(Equal("pre-upgrade-20261203-031600"))
				g.Expect(rec.BackupTarget).To(BeEmpty())
				g.Expect(suspended).To(Equal(map[v1alpha1.UpgradePhase]bool{
					v1alpha1.UpgradeChecking: false, v1alpha1.UpgradeBackingUp: false, v1alpha1.UpgradeStopping: true,
					v1alpha1.UpgradeMigrating: true, v1alpha1.UpgradeStarting: false,
				}))
				return
			}
			g.Expect(rec.Backup).To(Equal("20261203T031600Z-pre-upgrade-0.2.14-to-0.2.20"))
			g.Expect(rec.BackupTarget).To(Equal(target))
			g.Expect(suspended).To(Equal(map[v1alpha1.UpgradePhase]bool{
				v1alpha1.UpgradeChecking: true, v1alpha1.UpgradeBackingUp: true, v1alpha1.UpgradeStopping: true,
				v1alpha1.UpgradeMigrating: true, v1alpha1.UpgradeStarting: false,
			}))
		})
	}
}
