// Package fleetmetrics holds no code: its external tests (package fleetmetrics_test) are the
// integration tests of operator/fleetmetrics against a real kube-apiserver and etcd
// (test/support/testenv). One reads the fleet through a manager's real cache, with leader election
// deciding which of two managers reports it; the other runs the whole operator (operator.NewManager)
// and reads its registry while its controllers stamp a cluster out.
package fleetmetrics
