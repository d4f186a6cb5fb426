// Package packaging holds the tests of how the operator is installed: the kustomize tree under
// config/ (config/default renders, and the real kube-apiserver accepts every object it renders in a
// server-side dry run), the least privilege of its RBAC, the restricted Pod Security Standard of the
// manager Deployment, the documentation `kubectl explain` shows for every field, and the image (the
// Dockerfile and a static, non-root manager binary), the alerts and the Grafana dashboard of
// config/components/prometheus (with the real promtool) and the Argo CD health checks of
// config/argocd (with gopher-lua).
//
// It has no code of its own besides test helpers; run it with
//
//	KUBEBUILDER_ASSETS=$(hack/controlplane.sh) PROMTOOL=$(hack/prometheus/promtool.sh) go test ./test/packaging/
package packaging
