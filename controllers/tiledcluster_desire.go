package controllers

import (
	"fmt"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/desired"
)

// desire returns the TiledInstances the cluster wants: its expansion through the profiles of its
// namespace (package desired, which keeps the last one per cluster), unless a profile the last
// expansion used has been deleted since (ProfileDeletedError).
func (r *TiledClusterReconciler) desire(cur *clusterState) (*desired.Instances, error) {
	want, err := r.memories.expansions.Expand(cur.cluster, cur.profiles, r.Builtins, r.Metrics.startExpansion)
	if err != nil {
		return nil, err
	}
	if err := deletedInUse(cur.cluster, cur.profiles); err != nil {
		return nil, err
	}
	return want, nil
}

// ProfileDeletedError reports a profile the cluster's instances were expanded from that has been
// deleted since. Until the cluster's spec changes (which acknowledges the new selection), the
// instances stay as they were rather than silently losing the profile's settings.
type ProfileDeletedError struct {
	Cluster, Profile string
}

func (e *ProfileDeletedError) Error() string {
	return fmt.Sprintf("TiledCluster %s: profile %s, which its instances were expanded from, was deleted; the instances are left as they were. "+
		"Recreate the profile, or change the cluster's spec (e.g. its profileSelector) to accept the new selection", e.Cluster, e.Profile)
}

// deletedInUse returns a ProfileDeletedError for a profile of the last expansion that no longer
// exists, unless the cluster's spec changed since that expansion.
func deletedInUse(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile) error {
	if cluster.Status.ObservedGeneration != cluster.Generation {
		return nil
	}
	// By name: a profile recreated under the same name (a new UID) is the profile back.
	present := map[string]bool{}
	for i := range candidates {
		present[candidates[i].Name] = true
	}
	for _, p := range cluster.Status.Profiles {
		if !present[p.Name] {
			return &ProfileDeletedError{Cluster: cluster.Name, Profile: p.Name}
		}
	}
	return nil
}
