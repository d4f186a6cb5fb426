package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// clusterState is the current state of one cluster's reconcile, read from the cache at its start:
// everything the later stages compare the desired state with. Retention's own reads (the claims and
// Secret an instance leaves, the NFS volumes) are made where it acts (retention.go).
type clusterState struct {
	// cluster is the TiledCluster, a copy.
	cluster *tiledv1alpha1.TiledCluster
	// idle: the cluster is being deleted (the garbage collector removes the instances; retained
	// data stays) or paused (no writes); nothing else was read.
	idle bool
	// profiles are every TiledProfile of the namespace: the expansion's candidates.
	profiles []tiledv1alpha1.TiledProfile
	// instances are every TiledInstance of the namespace, members or not, by name: a name this
	// cluster wants that another owner holds (another cluster, a person) is never adopted nor
	// shared. The cache's own objects, not copies (a reconcile runs on every instance status write;
	// copying N instances each time is most of the manager's allocations at scale): read only.
	instances map[string]*tiledv1alpha1.TiledInstance
	// list holds the instances' storage, in the cache's order (prune goes through it).
	list []tiledv1alpha1.TiledInstance
}

// observe reads the cluster's current state from the cache: nil and no error when the cluster is
// gone.
func (r *TiledClusterReconciler) observe(ctx context.Context, req ctrl.Request) (*clusterState, error) {
	cluster := &tiledv1alpha1.TiledCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	s := &clusterState{cluster: cluster}
	if !cluster.DeletionTimestamp.IsZero() {
		s.idle = true
		return s, nil
	}
	if cluster.Spec.Paused {
		log.FromContext(ctx).WithValues("cluster", req.String()).V(1).Info("paused: no writes")
		s.idle = true
		return s, nil
	}
	var profiles tiledv1alpha1.TiledProfileList
	if err := r.Client.List(ctx, &profiles, client.InNamespace(cluster.Namespace)); err != nil {
		return nil, err
	}
	s.profiles = profiles.Items
	var instances tiledv1alpha1.TiledInstanceList
	if err := r.Client.List(ctx, &instances, client.InNamespace(cluster.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	s.list = instances.Items
	s.instances = make(map[string]*tiledv1alpha1.TiledInstance, len(s.list))
	for i := range s.list {
		s.instances[s.list[i].Name] = &s.list[i]
	}
	return s, nil
}

// member returns the instance of that name when this cluster controls it; otherwise whether one
// exists, and who holds it (foreignOwner).
func (s *clusterState) member(name string) (cur *tiledv1alpha1.TiledInstance, exists bool, foreign string) {
	ti := s.instances[name]
	if ti == nil {
		return nil, false, ""
	}
	if ref := metav1.GetControllerOf(ti); ref == nil || ref.UID != s.cluster.UID {
		return nil, true, foreignOwner(ref)
	}
	return ti, true, ""
}

// instanceReady reports whether an instance is Ready at its current generation, or serves its old
// version while its upgrade waits for a person: undone after a failed migration (phase Failed), or
// stalled before anything was stopped (a failed check or backup, a refused downgrade), its pods
// ready. Such an instance takes nothing from the rollout budget, so that the others upgrade; the
// cluster still reports it Stalled.
func instanceReady(ti *tiledv1alpha1.TiledInstance) bool {
	if ti.Status.ObservedGeneration != ti.Generation {
		return false
	}
	if c := meta.FindStatusCondition(ti.Status.Conditions, ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return true
	}
	u := ti.Status.Upgrade
	if u == nil || ti.Status.ReadyReplicas == 0 {
		return false
	}
	switch u.Phase {
	case tiledv1alpha1.UpgradeFailed:
		return true
	case tiledv1alpha1.UpgradeChecking, tiledv1alpha1.UpgradeBackingUp:
		c := meta.FindStatusCondition(ti.Status.Conditions, ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue
	}
	return false
}
