// Package testenv starts the real control plane the project's integration tests run on: a
// kube-apiserver and etcd built by hack/controlplane.sh from the Go module proxy (run through
// controller-runtime's envtest), with the operator's CRDs installed, and optionally a
// kube-controller-manager beside them for the tests that need garbage collection.
//
// An existing KUBEBUILDER_ASSETS is honoured; otherwise the binaries come from the project's cache
// (building them on first use). A missing binary is an error, never a skip: tests call Start and fail
// with its message.
package testenv
