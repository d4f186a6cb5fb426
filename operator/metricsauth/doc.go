// Package metricsauth guards the manager's metrics endpoint as kube-rbac-proxy and
// controller-runtime's filters do: a scrape must carry a bearer token that the API server accepts
// (a TokenReview) and whose user may get the path (a SubjectAccessReview for the non-resource URL,
// e.g. the tiled-operator-metrics-reader ClusterRole's get on /metrics).
//
// It is the operator's own small filter, not controller-runtime's, because that one is built on
// k8s.io/apiserver's delegating authenticator and authorizer, which bring a third of the manager's
// binary with them (gRPC, OpenTelemetry, the apiserver's authentication stack): pages the manager
// holds resident for a check that needs two API calls. The answers are cached as the delegating
// authenticator and authorizer cache them — an accepted token for a minute, an allowed user for five
// minutes, a refusal for thirty seconds — so a scrape every few seconds costs the API server at most
// a TokenReview a minute and a SubjectAccessReview every five.
package metricsauth
