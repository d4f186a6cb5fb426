// Package tiledversion knows the Tiled releases the operator supports: their range, how the version
// an image runs is known, and what differs across the range for the operator (configuration keys
// and command-line steps). It is pure: no client, no I/O.
//
// versions.go holds the range (Oldest, Newest) and Of, the release an image runs: spec.tiled.version
// when stated, else the image's tag when it is a version, else Newest (and callers warn). keys.go is
// the one table of what differs across the range: the configuration keys a release lacks (Lacking,
// KeysLacking), which expansion refuses for the instance's release, and why the command-line steps
// the operator runs need no table. Whether an upgrade needs a database migration is not decided here:
// the upgrade procedure (package controllers/upgrade) asks the databases, and the operator keeps no
// table of the revisions each release requires. docs/upgrading.md is the admin's side.
package tiledversion
