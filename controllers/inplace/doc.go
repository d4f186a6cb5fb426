// Package inplace decides a restore in place: the databases of a TiledInstance that serves,
// replaced by one of its backups on request (the annotation tiled.blueskyproject.io/restore, set by
// `kubectl tiled restore`). A request is refused while an upgrade, a bootstrap restore or a lost
// catalog holds the instance, without a backup target, or when the target holds no whole backup of
// that name. Otherwise, like the upgrade procedure (package upgrade), it runs as phases recorded in
// status.inPlaceRestore before their steps are applied, so that a restarted operator carries on:
// the databases backed up as they are (BackingUp, Tiled serves), Tiled stopped (Stopping), the
// backup restored by the restore Job (Restoring), Tiled started (Starting), and the outcome
// recorded with an Event. Each request (its id) is acted on once.
//
// Decide is pure: the controller (tiledinstance_inplace.go) gathers Observed from its cache and
// applies the Decision.
package inplace
