// Package faults is the fault-injection suite of the operator (`make test-faults`): on a real
// kube-apiserver, etcd and kube-controller-manager it stops the manager at random points of a
// stamp-out, restarts the apiserver mid-reconcile, takes the webhook server down and up, lets another
// field manager edit children, deletes or breaks the inputs the operator depends on, and removes
// beamlines and clusters under each retention policy. Each trial asserts its invariant; the suite
// ends with the line "fault suite: N passed, N failed".
//
// The tests run only when TILED_FAULTS=1 (the make target sets it), so that `go test ./...` stays
// short; without it the one test reports SKIP. Sizes come from TILED_FAULTS_N (fleet size, 100),
// TILED_FAULTS_TRIALS (random stop points, 10) and TILED_FAULTS_SEED (1).
package faults
