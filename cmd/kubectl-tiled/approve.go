package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

type approveOptions struct {
	*options
	allPending    bool
	throughWindow bool
	hash          string
}

func newApproveCommand(opts *options) *cobra.Command {
	o := &approveOptions{options: opts}
	cmd := &cobra.Command{
		Use:   "approve INSTANCE|CLUSTER [--all-pending] [--through-window] [--hash HASH]",
		Short: "Approve the change that waits for a person's approval (spec.maintenance.approval Manual)",
		Long: `Approve the pending change of a TiledInstance whose spec.maintenance.approval is Manual: a change of
the Tiled or PostgreSQL pod template, or the start of a Tiled upgrade, that waits for a person
(status.pendingRollout.approval Required). The approval names that exact change, by its hash
(status.pendingRollout.changeHash): a change that differs in any way has another hash and waits
again (docs/maintenance.md, "Approvals").

The command reads the pending change, refuses when none waits for approval (or when --hash names
another one: a stale approval), and sets the label tiled.blueskyproject.io/approve to the hash. The
API server's admission webhook records who you are (tiled.blueskyproject.io/approved-by, from the
authenticated request, not from this command); the operator then lets the change through when the
maintenance window is open, records the approval in status.lastApproval and sends an Approved
Event naming you. --through-window lets it through a closed window as well. An approved change of a
TiledCluster's beamline still rolls within the cluster's spec.rollout.maxUnavailable.

CLUSTER, with --all-pending, approves the pending change of each of its instances that waits for
one, as each reads now. INSTANCE is the TiledInstance's name (nsls2-chx) or its short name (chx).
The command needs get, list and patch on tiledinstances (the edit role) and get on tiledclusters.`,
		Example: `  # What waits, and its hash
  kubectl tiled status chx -n nsls2

  # Approve it (when the maintenance window is open)
  kubectl tiled approve chx -n nsls2

  # Approve exactly the change you reviewed, and let it through a closed window
  kubectl tiled approve chx -n nsls2 --hash 3f9a0c1d2e4b5a6c7d8e --through-window

  # Approve every beamline's pending change in TiledCluster nsls2
  kubectl tiled approve nsls2 -n nsls2 --all-pending`,
		ValidArgsFunction: completeInstances(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf(cmd, "expected INSTANCE or CLUSTER, got %d argument(s)", len(args))
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().BoolVar(&o.allPending, "all-pending", false, "With a TiledCluster: approve the pending change of each of its instances.")
	cmd.Flags().BoolVar(&o.throughWindow, "through-window", false, "Let the change through a closed maintenance window as well.")
	cmd.Flags().StringVar(&o.hash, "hash", "", "The change's hash as you reviewed it (status.pendingRollout.changeHash): refused when another change is pending.")
	return cmd
}

func (o *approveOptions) run(ctx context.Context, name string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ns, c, err := liveClient(o.config)
	if err != nil {
		return err
	}
	ti, err := liveInstance(ctx, c, ns, name)
	if err != nil {
		cluster := &v1alpha1.TiledCluster{}
		if cerr := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster); cerr != nil {
			if apierrors.IsNotFound(cerr) {
				return fmt.Errorf("no TiledInstance nor TiledCluster %q in namespace %q", name, ns)
			}
			return cerr
		}
		return o.approveCluster(ctx, c, cluster)
	}
	if o.allPending {
		return fmt.Errorf("--all-pending approves the instances of a TiledCluster; %s is a TiledInstance", ti.Name)
	}
	p, err := approvable(ti, o.hash)
	if err != nil {
		return err
	}
	return o.approve(ctx, c, ti, p)
}

// approveCluster approves, with --all-pending, the pending change of each instance of cluster that
// waits for approval.
func (o *approveOptions) approveCluster(ctx context.Context, c client.Client, cluster *v1alpha1.TiledCluster) error {
	if !o.allPending {
		return fmt.Errorf("%s is a TiledCluster: give --all-pending to approve the pending change of each of its instances, or name one instance", cluster.Name)
	}
	if o.hash != "" {
		return fmt.Errorf("--hash names one instance's change; it does not go with --all-pending")
	}
	var list v1alpha1.TiledInstanceList
	if err := c.List(ctx, &list, client.InNamespace(cluster.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: cluster.Name}); err != nil {
		return err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.TiledInstance) int { return strings.Compare(a.Name, b.Name) })
	n := 0
	for i := range list.Items {
		ti := &list.Items[i]
		if ref := metav1.GetControllerOf(ti); ref == nil || ref.UID != cluster.UID {
			continue
		}
		p, err := approvable(ti, "")
		if err != nil {
			continue // nothing of it waits for approval
		}
		if err := o.approve(ctx, c, ti, p); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no instance of TiledCluster %s/%s has a change waiting for approval", cluster.Namespace, cluster.Name)
	}
	return nil
}

// approvable is the pending change of ti that an approval may name: one that waits for approval
// (or was approved, to approve it again through the window), and, with hash, that one.
func approvable(ti *v1alpha1.TiledInstance, hash string) (*v1alpha1.PendingRollout, error) {
	p := ti.Status.PendingRollout
	if p == nil || p.ChangeHash == "" || p.Approval == "" {
		what := "no change waits for approval"
		if p != nil {
			what = "its pending change does not wait for approval (spec.maintenance.approval is not Manual, or the change is already approved and rolls)"
		}
		if hash != "" {
			return nil, fmt.Errorf("refused: the approval of change %s is stale: TiledInstance %s/%s: %s", hash, ti.Namespace, ti.Name, what)
		}
		return nil, fmt.Errorf("TiledInstance %s/%s: %s", ti.Namespace, ti.Name, what)
	}
	if hash != "" && hash != p.ChangeHash {
		return nil, fmt.Errorf("refused: the approval of change %s is stale: the change pending on TiledInstance %s/%s is %s (kubectl tiled status %s)",
			hash, ti.Namespace, ti.Name, p.ChangeHash, ti.Name)
	}
	return p, nil
}

// approve sets the approval of p on ti: the label, and the through-window annotation (removed
// without --through-window). The approval webhook adds who sent it.
func (o *approveOptions) approve(ctx context.Context, c client.Client, ti *v1alpha1.TiledInstance, p *v1alpha1.PendingRollout) error {
	var through any // null: removed
	if o.throughWindow {
		through = p.ChangeHash // bound to this change
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{v1alpha1.LabelApprove: p.ChangeHash},
		"annotations": map[string]any{v1alpha1.AnnotationApproveThroughWindow: through},
	}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, ti, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("approving change %s of TiledInstance %s/%s: %w", p.ChangeHash, ti.Namespace, ti.Name, err)
	}
	printApproval(o.streams.Out, ti, p, o.throughWindow)
	return nil
}

// printApproval says what was approved.
func printApproval(w io.Writer, ti *v1alpha1.TiledInstance, p *v1alpha1.PendingRollout, through bool) {
	what := p.Change
	if p.Change == "Upgrade" && p.From != "" {
		what += fmt.Sprintf(" from %s to %s (with its migration)", p.From, p.To)
	}
	paths := strings.Join(p.Differs, ", ")
	if more := int(p.DifferCount) - len(p.Differs); more > 0 {
		paths += fmt.Sprintf(" and %d more", more)
	}
	when := "when the maintenance window is open"
	switch {
	case through:
		when = "now, through a closed maintenance window if need be"
	case p.Window == "":
		when = "now (the maintenance window is open)"
	}
	fmt.Fprintf(w, "Approved change %s of TiledInstance %s/%s: %s, StatefulSet %s: %s; it goes through %s\n",
		p.ChangeHash, ti.Namespace, ti.Name, what, p.StatefulSet, paths, when)
}
