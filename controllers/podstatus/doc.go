// Package podstatus reads what the statuses of an instance's pods say is wrong with them: an image
// that cannot be pulled, a container that crash-loops (with the last line it logged, which the
// kubelet keeps in the container's termination message under FallbackToLogsOnError), a container
// configuration the kubelet refuses, a container that runs but does not become ready, a pod that
// cannot be scheduled. The instance controller turns the result into the instance's conditions, so
// that a failing pod is named on the TiledInstance instead of leaving it Reconciling in silence.
//
// It also decides which pods are stuck on an older revision of their StatefulSet (Stuck): failing,
// not Ready, while the StatefulSet's template has changed since. A StatefulSet never replaces such
// a pod by itself; the instance controller deletes it, once per revision, so that it comes back
// from the current template.
//
// Everything here is pure: Diagnose takes the pods and the time, Stuck a StatefulSet, its pods and
// what was replaced before, Trim is the cache transform that keeps only the fields they read.
package podstatus
