// Package controllers holds the operator's reconcilers: the TiledCluster controller, which expands a
// cluster into TiledInstances, and the TiledInstance controller, which renders and applies each
// instance's workloads. Both write only through server-side apply and read only from the cache.
package controllers

// The manager reads the operator's own kinds from its cache (list, watch); each controller adds the
// status it writes and the objects it applies. Events are created, once per state transition (a
// repeated event would be patched into a series; the operator does not repeat them).
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledprofiles;tiledclusters;tiledinstances,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create
