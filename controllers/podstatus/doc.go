// Package podstatus reads what the statuses of an instance's pods say is wrong with them: an image
// that cannot be pulled, a container that crash-loops (with the last line it logged, which the
// kubelet keeps in the container's termination message under FallbackToLogsOnError), a container
// configuration the kubelet refuses, a container that runs but does not become ready, a pod that
// cannot be scheduled. The instance controller turns the result into the instance's conditions, so
// that a failing pod is named on the TiledInstance instead of leaving it Reconciling in silence.
//
// Everything here is pure: Diagnose takes the pods and the time, Trim is the cache transform that
// keeps only the fields Diagnose reads.
package podstatus
