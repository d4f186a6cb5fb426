// Package controllers holds the operator's reconcilers: the TiledCluster controller, which expands a
// cluster into TiledInstances, the TiledInstance controller, which renders and applies each
// instance's workloads, and the TiledProfile controller, which reports on each profile. They write
// only through server-side apply (package applier) and read only from the cache.
//
// The cluster's and the instance's Reconcile each read as a short list of stages, one file each:
//
//	observe   tiled*_observe.go   the current state, every read of the reconcile, from the cache
//	desire    tiled*_desire.go    the desired state: package desired, apart from any client, with
//	                              its cache (the cluster's expansion, the instance's render)
//	plan      tiledcluster_plan.go  what the rollout does with each desired instance (package
//	                              rollout)
//	upgrade   tiledinstance_upgrade.go  between the instance's inputs and its render: the next
//	                              step of a Tiled version change (package upgrade), recorded in
//	                              the status before it is applied
//	apply     tiled*_apply.go     package childset: apply in order, refusals classified, what was
//	prune                         sent recorded; prune what is owned and no longer wanted; for an
//	                              instance, the render gate first keeps back a StatefulSet whose
//	                              change waits for the cluster's rollout (tiledinstance_rendergate.go)
//	                              or the maintenance window (tiledinstance_maintenance.go)
//	status    tiled*_status.go    the status, written only when it changed; Events on transitions;
//	                              for an instance, first the pods stuck on an older revision of
//	                              their StatefulSet are replaced (tiledinstance_stuckpods.go)
//
// Around them: retention.go (what the Retain policy does when an instance goes and comes back, at
// both levels), memories.go (everything kept from one reconcile to the next, and how each is
// forgotten), kinds.go (the child kinds and how they are cached), labels.go (the well-known keys),
// conditions.go and instancestatus.go (the conditions, and the instance's status as a pure
// function of what was observed).
package controllers

// The manager reads the operator's own kinds from its cache (list, watch); each controller adds the
// status it writes and the objects it applies. Events are created, once per state transition (a
// repeated event would be patched into a series; the operator does not repeat them).
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledprofiles;tiledclusters;tiledinstances,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create
