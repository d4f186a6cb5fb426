// Package v1alpha1 contains the API of the tiled-operator, group tiled.blueskyproject.io:
//
//   - TiledProfile: small, labelled defaults for Tiled deployments, defined once per facility;
//   - TiledCluster: a terse, Git-owned list of beamlines that selects profiles by label;
//   - TiledInstance: one fully expanded Tiled deployment, usually stamped out by a TiledCluster.
//
// The three kinds share one shape for the settings of a deployment, InstanceTemplate. A profile,
// a cluster's template and an instance's overrides each hold a partial InstanceTemplate; the
// expansion engine layers them (built-in defaults < profiles by priority and name < cluster template
// < instance overrides) into the complete spec of a TiledInstance, and records where every field
// came from in its provenance.
//
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +kubebuilder:ac:output:package="../../applyconfiguration"
// +groupName=tiled.blueskyproject.io
package v1alpha1
