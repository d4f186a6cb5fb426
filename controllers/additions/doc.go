// Package additions says what a change of an instance's rendered children adds to the instance:
// the child objects it does not have yet (a release's new child kind or object, e.g. the streaming
// cache's StatefulSet, Service and Secret) and the container images that none of its live
// StatefulSets runs yet (e.g. the cache's image). The instance controller records them in
// status.pendingRollout and names them in the RenderChanged Event, so that a beamline's admin
// knows what an operator release will need (an image to mirror where the network cannot reach a
// public registry, an object a policy must allow) before the change reaches the beamline
// (controllers/tiledinstance_rendergate.go).
//
// Everything here is pure: the controller lists the desired children, what the cache holds and the
// live StatefulSets' pod templates, and this package compares them.
package additions
