// Package traffic counts the requests a client sends to the Kubernetes API server, by verb and
// resource, through an http.RoundTripper wrapped around the client's transport. The counts are
// exported as the Prometheus counter tiled_operator_api_requests_total and can be read directly, so
// that tests and benchmarks assert exact request numbers (writes per stamp-out, zero requests idle).
package traffic
