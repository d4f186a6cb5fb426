// Package controllers holds no code: its external tests (package controllers_test) are the
// controllers' integration tests. The operator's manager runs in-process against a real
// kube-apiserver, etcd and kube-controller-manager (test/support/testenv), and the tests check what the API
// server ends up holding. They live apart from the controllers package itself so that its pure tests
// (the rollout planner, the instance status, the refusal classifier) run without a control plane.
package controllers
