// Package operator assembles the tiled-operator's controller-runtime manager: the scheme, the
// manager options (metrics, probes, profiler, leader election, watched namespaces, webhooks), the
// informer caches and their transforms (child kinds selected by the managed-by label and trimmed to
// what the controllers read), the shared server-side apply writer, the reconcilers of package
// controllers and the webhooks of package webhooks, the fleet's metrics (package
// operator/fleetmetrics, read from the cache on the leader), and a resync of every object on
// demand. Every request the manager's clients send is counted by verb and resource (package
// operator/traffic, wrapped around the manager's rest config), which tests and benchmarks read.
//
// The manager binary (cmd/manager), `make run` (hack/runlocal), the benchmark (hack/bench), the
// fault suite (test/faults) and the integration tests all build the operator through NewManager, so
// that what they run is what is deployed.
package operator
