//go:build tools

// Package tools pins the Kubernetes commands this module builds, so that `go mod tidy` keeps them.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
