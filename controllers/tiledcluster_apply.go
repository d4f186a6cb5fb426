package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/childset"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/controllers/rollout"
)

// applyConcurrency is how many TiledInstances one cluster reconcile applies at once (the instance
// controller starts on each as soon as it exists).
const applyConcurrency = DefaultInstanceConcurrency

// clusterApplied is what applying the plan gave.
type clusterApplied struct {
	// ready counts the instances that count as ready: applied and up to date and Ready, or held or
	// waiting and Ready (serving, on the spec they had).
	ready int
	// refused are the instances refused, in the plan's order: a name another owner holds, or an
	// object the API server refuses (e.g. a value an expression computed that the schema rejects).
	// One refused beamline stalls the cluster, naming it; the others go on.
	refused []string
}

// apply applies the instances the plan says to apply, a few at once (package childset), then keeps
// the expanded instances in the desired state's cache while the rollout still has some to apply.
func (r *TiledClusterReconciler) apply(ctx context.Context, cur *clusterState, want *desired.Instances, p clusterPlan) (clusterApplied, error) {
	set := instanceSet{want: want, members: p.members}
	if err := set.approve(p); err != nil {
		return clusterApplied{}, err
	}
	rec, err := childset.Apply(ctx, r.Applier, set, childset.Options{
		Group:             types.NamespacedName{Namespace: cur.cluster.Namespace, Name: cur.cluster.Name}.String(),
		Workers:           applyConcurrency,
		ContinueOnRefusal: true,
		Skip:              func(i int) bool { return p.Decisions[i].Action != rollout.Apply },
	})
	if err != nil {
		return clusterApplied{}, err // the reconcile fails and is retried; the applies already sent stand
	}
	var done clusterApplied
	refused := make([]string, len(p.Decisions))
	for _, f := range rec.Refused {
		refused[f.Index] = fmt.Sprintf("%s (%s: %v)", p.Decisions[f.Index].Name, f.Reason, trimError(f.Err))
	}
	for i, d := range p.Decisions {
		switch {
		case d.Action == rollout.Refuse:
			refused[i] = fmt.Sprintf("%s (NameTaken: a TiledInstance of that name exists and %s; it is not adopted — rename the beamline or remove that object)", d.Name, d.Foreign)
		case d.CountsReady && refused[i] == "":
			done.ready++ // applied, or held or waiting: serving, on the spec it had
		}
		if refused[i] != "" {
			done.refused = append(done.refused, refused[i])
		}
	}
	want.KeepWhilePending(p.Pending > 0 || p.Held > 0)
	return done, nil
}

// instanceSet is the cluster's desired instances as a child set: each one's prepared intent, its
// object built again only when it must be sent, and the instance as the cache holds it when this
// cluster controls it (a name another owner holds is refused by the plan, never applied).
type instanceSet struct {
	want    *desired.Instances
	members []*tiledv1alpha1.TiledInstance
	// approved are the instances applied with the approval of their pending render change, by index
	// (nil: none): the object the expansion gives, with AnnotationApprovedTemplate.
	approved map[int]approvedInstance
}

// approvedInstance is a desired instance's object with its approval, and its prepared intent.
type approvedInstance struct {
	obj      *unstructured.Unstructured
	prepared applier.Prepared
}

// approve adds, to each instance the plan applies with the approval of its pending render change
// (rollout.Decision.Approve), AnnotationApprovedTemplate set to its status.pendingRollout's hash.
// Only those carry it: the intent of every other instance is the expansion's alone.
func (s *instanceSet) approve(p clusterPlan) error {
	for i, d := range p.Decisions {
		m := p.members[i]
		if !d.Approve || d.Action != rollout.Apply || m == nil || m.Status.PendingRollout == nil {
			continue
		}
		obj, err := s.want.Object(i)
		if err != nil {
			return err
		}
		obj = obj.DeepCopy()
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[tiledv1alpha1.AnnotationApprovedTemplate] = m.Status.PendingRollout.TemplateHash
		obj.SetAnnotations(ann)
		prepared, err := applier.PrepareUnstructured(obj)
		if err != nil {
			return err
		}
		if s.approved == nil {
			s.approved = map[int]approvedInstance{}
		}
		s.approved[i] = approvedInstance{obj: obj, prepared: prepared}
	}
	return nil
}

func (s instanceSet) Len() int { return s.want.Len() }

func (s instanceSet) Prepared(i int) applier.Prepared {
	if a, ok := s.approved[i]; ok {
		return a.prepared
	}
	return s.want.Prepared(i)
}

func (s instanceSet) Build(i int) (runtime.ApplyConfiguration, error) {
	if a, ok := s.approved[i]; ok {
		return client.ApplyConfigurationFromUnstructured(a.obj.DeepCopy()), nil
	}
	obj, err := s.want.Object(i)
	return client.ApplyConfigurationFromUnstructured(obj), err
}

func (s instanceSet) Current(_ context.Context, i int) (client.Object, error) {
	if s.members[i] == nil {
		return nil, nil // no typed nil in the interface: the applier reads nil as absent
	}
	return s.members[i], nil
}

// prune deletes the instances of this cluster that it no longer lists (only those whose controller
// reference carries its UID, with a UID precondition; package childset), after labelling what each
// leaves behind under the Retain policy, and then the NFS volumes of instances gone (retention). It
// returns each pruned instance's name in the cluster's spec, with what was retained of it, sorted.
func (r *TiledClusterReconciler) prune(ctx context.Context, cur *clusterState, want *desired.Instances) ([]string, error) {
	wanted := make(map[string]bool, want.Len())
	for i := range want.Len() {
		wanted[want.Name(i)] = true
	}
	rt := retention{c: r.Client}
	background := metav1.DeletePropagationBackground
	owned := func(yield func(client.Object) bool) {
		for i := range cur.list {
			if !yield(&cur.list[i]) {
				return
			}
		}
	}
	gone, err := childset.Prune(ctx, r.Client, r.Applier, tiledv1alpha1.GroupVersion.WithKind("TiledInstance"), owned, cur.cluster.UID,
		func(k applier.Key) bool { return wanted[k.Name] },
		childset.PruneOptions{Propagation: &background, BeforeDelete: rt.release, UndoBeforeDelete: rt.undoRelease})
	if err != nil {
		return nil, err
	}
	pruned := make([]string, 0, len(gone))
	for _, g := range gone {
		msg := g.Object.GetLabels()[tiledv1alpha1.LabelInstance]
		if len(g.Kept) > 0 {
			msg += " (retained: " + strings.Join(g.Kept, ", ") + ")"
		}
		pruned = append(pruned, msg)
	}
	sort.Strings(pruned)
	return pruned, rt.releaseVolumes(ctx, cur.cluster, wanted)
}
