// Package upgrade decides each step of the procedure that moves one TiledInstance from one Tiled
// version to another: check the databases' revisions with the new image, back them up, stop the
// Tiled pods, migrate once, start the new version; and, when the migration fails, restore the
// backup and serve the old version again.
//
// Tiled's server refuses to start unless its databases are at exactly the revision its version
// expects, so old pods cannot serve after a migration and new pods cannot start before it. Whether an
// image change needs a migration is found from the databases (the check Job reports their revisions
// and the ones the new image requires), never from a table of versions.
//
// The backup before the migration goes to spec.backup's target when the instance has one, through
// the scheduled backups' program, named <time>-pre-upgrade-<from>-to-<to> so that it is listed and
// pruned as they are (status.upgrade.backupTarget, then status.lastMigration.backupTarget, say where
// it is, and the restore reads it from there); without a target, to the instance's own backup claim.
// No scheduled backup overlaps the procedure's dump: the backup CronJob is suspended from the check
// until a version serves again (Lifecycle.SuspendBackups, then Stopped), and the dump waits for a
// scheduled backup Job still running.
//
// Everything here is pure: Decide takes what the controller observed (the spec's image, the image
// the Tiled StatefulSet runs, the upgrade recorded in the status, the current step's Job and the
// Tiled pods) and returns what to render (render.Lifecycle), the status to record, and the stall or
// Event to report. The controller records each new phase before it renders the phase's step, so a
// restarted operator carries on where the last one stopped.
package upgrade
