// Package backup decides what an instance's backups mean for its status, and when a new instance
// restores its databases from a backup before Tiled first starts.
//
// The backups themselves are taken by a CronJob per instance (render.BackupCronJob) running
// dbtool.sh, which reports each backup's manifest, and the whole backups left after pruning, as its
// pod's termination message. Status folds the finished backup Jobs the cache shows into
// status.backup (the last backup, the last whole one, the backups on the target) and Condition says
// whether the instance is backed up. Restore decides the bootstrap step: while
// spec.backup.restoreFrom is set and no restore is recorded, Tiled stays stopped and a Job restores
// the (empty) databases; its end is recorded once, or it stalls the instance naming the reason.
//
// Everything here is pure: the controller observes the Jobs and records what is decided.
package backup
