// Package childset is the one engine both reconcilers use for the objects they own: the TiledCluster
// controller for its TiledInstances, the TiledInstance controller for its ConfigMap, Secret,
// StatefulSets, Services, claims, Ingress, PodDisruptionBudget and ServiceMonitor.
//
// A set is the children one owner wants, in the order they are applied (Set). The engine:
//
//   - applies them in order through the applier (Apply), one after another or, where the owner has
//     many (a cluster's instances), a few at once, and records what it did (Record): the generation
//     each child has after its apply, the children it read and did not send, and how soon to look
//     again for one created that the cache does not show yet;
//   - classifies what the API server refuses (Refusal): a change no retry can mend (invalid,
//     forbidden, a bad request, a conflict, too large, not mergeable) is told apart from an error
//     worth retrying (a timeout, the API server unavailable, throttling). A refusal either stops the
//     set there (RefusedError: the instance's children depend on those before them) or is recorded
//     and the others go on (a cluster's other beamlines);
//   - prunes what the owner controls and no longer wants (Prune): only objects whose controller
//     reference carries the owner's UID, deleted with a UID precondition, so an object recreated
//     under the same name by someone else is never deleted; and the applier forgets them.
//
// How one level differs from the other is said in Options and PruneOptions (the strategy), not
// written twice: how many applies at once, whether a conflict is tried again, whether a refusal
// stops the set, what runs after an apply or before a delete (retention), the propagation policy.
//
// Apply and Prune read nothing themselves: the caller hands them the children as the cache holds
// them (Set.Current; the owned objects to prune), so every read stays with the caller's current
// state. Owned is the one read here, a helper for the caller: the objects of a kind an owner
// controls, through the cache's owner index (OwnerIndex, IndexController; AddOwnerIndex adds it to
// the manager's cache, keyed for lists in one namespace only).
package childset
