// Package controllers holds the operator's reconcilers: the TiledCluster controller, which expands a
// cluster into TiledInstances, and the TiledInstance controller, which renders and applies each
// instance's workloads. Both write only through server-side apply and read only from the cache.
package controllers

// The manager reads and updates the operator's own kinds; later controllers add their own markers.
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledprofiles;tiledclusters;tiledinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledprofiles/status;tiledclusters/status;tiledinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
