// Package v1alpha1 holds no code: its external tests (package v1alpha1_test) are the integration
// tests of the CRDs generated from apis/v1alpha1. A real kube-apiserver, etcd and
// kube-controller-manager (test/support/testenv) serve them: they are established, the samples of
// config/samples are accepted, invalid objects are refused by the schemas and CEL rules, kubectl
// sees the kinds, and the garbage collector follows the owner references. They live apart from
// package apis/v1alpha1 so that its schema tests run without a control plane.
package v1alpha1
