// Package profiles selects the TiledProfiles of TiledClusters and standalone TiledInstances, and
// answers the reverse question a controller needs when a profile changes: which clusters and
// instances must be expanded again. It is pure: functions over lists of objects, no client.
//
// Selection:
//
//   - A TiledCluster's spec.profileSelector is a full metav1.LabelSelector (matchLabels and
//     matchExpressions). `{}` selects every profile of the cluster's namespace; nil is rejected
//     with a *SelectorError, so that a cluster never takes profiles by accident.
//   - An instance of the cluster may add spec.instances[].profileSelector. The instance's profiles
//     are the union of the cluster's selection and its own (a profile both select is applied once).
//     This lets a family of beamlines share a profile that the rest of the facility does not take.
//   - A standalone TiledInstance takes the profiles its spec.profileSelector selects; without one it
//     takes none.
//   - Only profiles in the object's own namespace are selected.
//   - A selector that matches no profile is a *NoProfilesError: it is almost always a typo, and
//     expanding without the facility's profiles would silently reset every instance to the
//     built-in defaults.
//   - Selected profiles are ordered by (priority, name), lowest first: the order the expansion
//     engine layers them in, so that the higher priority wins.
//
// Re-expansion (Affected): when a profile is created, changed or deleted, a cluster must be
// expanded again when any of its selectors matches the profile's old labels or its new labels.
package profiles
