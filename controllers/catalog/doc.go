// Package catalog decides what the loss of an instance's catalog means: whether it is lost, what
// the instance then does, and when it is whole again.
//
// A beamline's catalog lives in its database. The operator records, once the catalog was first
// migrated, the UID of the managed database's claim it lives on (status.database.claimUID). A claim
// of that name with another UID is a new, empty volume (the claim was deleted, and the operator or
// a person made it again); a claim gone or being deleted takes the catalog with it; and a migrate
// step that finds the catalog database empty where the instance had a catalog (its ConfigMap's
// catalog-expected, render.CatalogExpectedKey) reports the loss too, for a managed database and an
// external one alike. Decide turns that into status.catalogLost and what the render must do: Tiled
// stopped (so it is never started on an empty or broken database, nor reported Ready), scheduled
// backups suspended (an empty database backed up and pruned over good backups would lose the
// catalog for good), the condition Stalled (reason CatalogLost) naming the claim, the revision lost
// and the newest whole backup that would restore it, and one Event.
//
// spec.backup.onCatalogLost RestoreLatest restores that backup at once, with a Job of its own
// (render.StepRecover), into the new database; Tiled starts when it is restored, and the record goes
// once a Tiled pod started after the restore reports the catalog at a revision. Stall (the default)
// waits for a person: setting RestoreLatest, or accepting the loss with the annotation
// tiled.blueskyproject.io/accept-catalog-loss naming the new claim's UID.
//
// A new instance (no catalog recorded) is never affected: its first start initialises its catalog
// as it always did.
//
// Everything here is pure: the controller observes the claim, the Tiled pods' reports and the
// restore Job, and records what is decided.
package catalog
