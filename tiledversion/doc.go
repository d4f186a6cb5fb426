// Package tiledversion knows the Tiled releases the operator supports: their range, how the version
// an image runs is known, and what differs across the range for the operator (configuration keys
// and command-line steps). It is pure: no client, no I/O.
package tiledversion
