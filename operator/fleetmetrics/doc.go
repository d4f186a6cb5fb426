// Package fleetmetrics exports the state of the operator's fleet as Prometheus metrics: for every
// TiledInstance whether it is ready, stalled and why, held, waiting for a rollout, upgrading, its
// last migration and its backups; for every TiledCluster how many of its instances are in each
// state, whether it is ready and whether a rollout is under way. A fleet admin's questions (which
// beamlines are not ready, what is stalled and why, how old each last backup is, is a rollout in
// progress) are PromQL over them; docs/observability.md (Fleet metrics) lists each metric.
//
// # Design
//
// The Collector is a prometheus.Collector whose Collect reads the TiledClusters and TiledInstances
// from the manager's cache (a client.Reader) on each scrape and emits constant metrics: nothing is
// kept between scrapes, so a deleted instance's series go with it and no update path can drift from
// the objects — but for the scrapes of the next DefaultMinInterval (5 s), which get the same series
// rather than a read and some ten new series per instance each (a benchmark polling the metrics
// twice a second made the leader allocate more for them than for its reconciles at a thousand
// instances); the series are then dropped. The cache is the one the controllers' informers fill; the Collector reads no other
// kind, so it starts no informer of its own.
//
// Only the elected leader reports the fleet. A standby's cache holds no TiledClusters or
// TiledInstances (its controllers have not started), and two replicas reporting would double every
// sum. The Runnable returned by LeaderRunnable needs leader election: the manager starts it once this
// replica leads; it waits for the two kinds' informers to sync and then turns the Collector on. Until
// then, and after the manager stops, Collect emits only tiled_operator_leader 0.
//
// Label sets are bounded: namespace, tiled_cluster (the TiledCluster that controls the instance
// through its controller ownerReference, "" for a standalone instance), instance, and small enums
// (a condition's reason, a state, a result). The TiledCluster's label is tiled_cluster, not
// cluster: Prometheus setups commonly use cluster for the Kubernetes cluster (an external or target
// label), which a series' own cluster label would shadow or be renamed to exported_cluster by. The info metric's version, image and database_mode
// change only when the instance does.
//
// A read from the cache that fails (a scrape that times out waiting for it) is counted in
// tiled_operator_fleet_collect_errors_total and the fleet's series are left out of that scrape: the
// metrics server answers a collector's error with an HTTP error, which would lose every other
// metric of the scrape too.
package fleetmetrics
