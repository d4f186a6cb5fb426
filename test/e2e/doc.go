// Package e2e is the end-to-end suite on a real single-node Kubernetes: the operator installed as a
// user installs it (`kubectl apply --server-side -k config/default`, webhooks on, two replicas with
// leader election), a sample fleet of beamlines whose Tiled and PostgreSQL pods really run, and
// faults on those pods and on the operator itself.
//
// The tests carry the build tag `e2e`, so `go test ./...` does not compile them. They run through
// `make test-e2e` (hack/e2e/run.sh), which builds the node (hack/node), the images (hack/images),
// brings the cluster up inside its own network namespace, runs the compiled test binary inside that
// namespace, writes bench/e2e.json, and tears everything down. The binary reads the cluster's
// coordinates from the environment that hack/node/cluster.sh writes to $STATE/env.
package e2e
