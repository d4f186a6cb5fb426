// Package kubectltiled holds no code: its external tests (package kubectltiled_test) are the
// integration tests of the kubectl-tiled plugin (cmd/kubectl-tiled), built once and run as a
// process against a real kube-apiserver and etcd (test/support/testenv): `kubectl tiled diff` compares
// changed profiles and clusters with the live instances through server-side dry runs. They live
// apart from the plugin so that its offline commands' tests run without a control plane.
package kubectltiled
