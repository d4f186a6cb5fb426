package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

type restoreOptions struct {
	*options
	from    string
	dryRun  bool
	wait    bool
	timeout time.Duration
}

func newRestoreCommand(opts *options) *cobra.Command {
	o := &restoreOptions{options: opts, timeout: 30 * time.Minute}
	cmd := &cobra.Command{
		Use:   "restore INSTANCE --from NAME|latest",
		Short: "Restore a serving instance's databases from one of its backups",
		Long: `Restore the databases of a TiledInstance that serves from one of its whole backups, in place:
its catalog, SQL tabular data and auth sessions go back to what they were when the backup was taken.
The files on the data volume are not touched (docs/backups.md).

The command asks the operator: it sets three annotations on the TiledInstance,
tiled.blueskyproject.io/restore (the backup), tiled.blueskyproject.io/restore-request (a new id, so
that the operator acts on the request once) and tiled.blueskyproject.io/restore-requested-by (you,
as the API server authenticates you: a SelfSubjectReview). The operator then:

  1. backs the databases up as they are, to <time>-pre-restore on the same target (Tiled serves;
     nothing is pruned), so that the restore can be undone with
     "kubectl tiled restore INSTANCE --from <time>-pre-restore";
  2. stops Tiled (0 replicas) and waits for its pods to go;
  3. runs a Job that checks the backup (checksums, each dump readable, not from a newer Tiled) and
     restores each database in one transaction;
  4. starts Tiled on the restored databases (migrating them if the backup is from an older Tiled),
     and records who restored what in status.inPlaceRestore, the condition Restored and an Event.

The operator refuses the request (status.inPlaceRestore.phase Refused, a Warning Event) while an
upgrade, a bootstrap restore or a lost catalog holds the instance, without a backup target, or when
the target holds no whole backup of that name; this command checks the same first, and says why.

--from takes a backup's name as "kubectl tiled backups" lists it, or latest (the newest, resolved to
its name here, before the pre-restore backup becomes the newest). --dry-run prints what would be
replaced (the backup, its time and size, the catalog now, whether Tiled stops and for about how
long) and changes nothing. --wait waits until the restore ends, at most --timeout, and prints the
outcome; a refused or failed restore exits 1.

INSTANCE is the TiledInstance's name (nsls2-chx) or, when no TiledInstance has that name, its short
name (chx). The command needs get and patch on tiledinstances (the edit role).`,
		Example: `  # What restoring yesterday's backup into chx would replace; nothing is changed
  kubectl tiled restore chx -n nsls2 --from 20261203T023000Z --dry-run

  # Restore it, and wait for Tiled to serve it
  kubectl tiled restore chx -n nsls2 --from 20261203T023000Z --wait

  # Undo that restore: the databases as they were before it
  kubectl tiled restore chx -n nsls2 --from 20261207T093000Z-pre-restore --wait`,
		ValidArgsFunction: completeInstances(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf(cmd, "expected INSTANCE, got %d argument(s)", len(args))
			}
			if o.from == "" {
				return usageErrorf(cmd, "--from is required: a backup's name (kubectl tiled backups %s) or latest", args[0])
			}
			if cmd.Flags().Changed("timeout") && !o.wait {
				return usageErrorf(cmd, "--timeout is how long --wait waits: give --wait too")
			}
			if o.wait && o.dryRun {
				return usageErrorf(cmd, "--dry-run changes nothing: there is nothing to --wait for")
			}
			if o.timeout <= 0 {
				return usageErrorf(cmd, "--timeout must be positive, got %s", o.timeout)
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().StringVar(&o.from, "from", "", "The backup to restore: its name (kubectl tiled backups INSTANCE) or latest.")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "Print what would be replaced, and change nothing.")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Wait until the restore ends, and print its outcome.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", o.timeout, "How long --wait waits for the restore to end (it goes on after).")
	return cmd
}

// newRequestID is a restore request's id: the UTC time and a random suffix. Tests replace it.
var newRequestID = func(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

// whoAmI is the user the API server authenticates the client as ("" when it cannot say): a
// SelfSubjectReview, as kubectl auth whoami makes. Tests replace it.
var whoAmI = func(ctx context.Context, c client.Client) string {
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, r); err != nil {
		return ""
	}
	return r.Status.UserInfo.Username
}

// pollInterval is how often --wait reads the instance.
var pollInterval = time.Second

func (o *restoreOptions) run(ctx context.Context, instance string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, ti, err := openInstance(ctx, o.config, instance)
	if err != nil {
		return err
	}
	p, err := planRestore(ti, o.from)
	if err != nil {
		return err
	}
	p.requestedBy = whoAmI(ctx, c)
	if o.dryRun {
		printRestorePlan(o.streams.Out, ti, p, clock())
		return nil
	}
	id := newRequestID(clock())
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.AnnotationRestore:            p.backup.Name,
		v1alpha1.AnnotationRestoreRequest:     id,
		v1alpha1.AnnotationRestoreRequestedBy: p.requestedBy,
	}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, ti, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("requesting the restore of TiledInstance %s/%s: %w", ti.Namespace, ti.Name, err)
	}
	fmt.Fprintf(o.streams.Out, "tiledinstance.tiled.blueskyproject.io/%s: restore of backup %s requested (request %s by %s)\n",
		ti.Name, p.backup.Name, id, cmp.Or(p.requestedBy, "an unnamed requester"))
	if !o.wait {
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	st, err := waitForRestore(waitCtx, c, client.ObjectKeyFromObject(ti), id)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the restore of TiledInstance %s/%s did not end within %s (it goes on: kubectl tiled status %s -n %s)", ti.Namespace, ti.Name, o.timeout, ti.Name, ti.Namespace)
		}
		return err
	}
	return printRestoreOutcome(o.streams.Out, ti, st)
}

// restorePlan is what a restore would do.
type restorePlan struct {
	backup      v1alpha1.AvailableBackup
	target      string
	requestedBy string
}

// planRestore checks, as the operator will, that ti can be restored from backup from (a name, or
// latest: the newest whole backup), and returns the plan; an error says why not.
func planRestore(ti *v1alpha1.TiledInstance, from string) (*restorePlan, error) {
	what := fmt.Sprintf("TiledInstance %s/%s", ti.Namespace, ti.Name)
	if !render.HasBackupTarget(ti) {
		return nil, fmt.Errorf("%s has no backup target: its spec.backup sets neither claim nor s3, so it has no backups to restore", what)
	}
	st := ti.Status
	switch {
	case st.Upgrade != nil:
		u := st.Upgrade
		return nil, fmt.Errorf("%s is being upgraded (Tiled %s -> %s, status.upgrade.phase %s): a restore is refused while an upgrade runs; request it once the upgrade ends",
			what, cmp.Or(u.FromVersion, u.FromImage), cmp.Or(u.ToVersion, u.ToImage), u.Phase)
	case st.CatalogLost != nil:
		return nil, fmt.Errorf("%s has lost its catalog (status.catalogLost): restore it as docs/backups.md says under \"A lost catalog\" (spec.backup.onCatalogLost), not in place", what)
	case st.InPlaceRestore != nil && runningRestore(st.InPlaceRestore):
		r := st.InPlaceRestore
		return nil, fmt.Errorf("%s is being restored from backup %s (request %s, phase %s): wait for it to end", what, r.Backup, r.Request, r.Phase)
	}
	var available []v1alpha1.AvailableBackup
	if st.Backup != nil {
		available = slices.Clone(st.Backup.Available)
	}
	slices.SortStableFunc(available, func(a, b v1alpha1.AvailableBackup) int { return strings.Compare(b.Name, a.Name) })
	target := render.BackupTarget(ti)
	if st.Backup != nil && st.Backup.Target != "" {
		target = st.Backup.Target
	}
	if len(available) == 0 {
		return nil, fmt.Errorf("%s has no whole backup on %s (status.backup.available is empty): take one with kubectl tiled backup %s -n %s", what, target, ti.Name, ti.Namespace)
	}
	if from == "latest" {
		return &restorePlan{backup: available[0], target: target}, nil
	}
	i := slices.IndexFunc(available, func(b v1alpha1.AvailableBackup) bool { return b.Name == from })
	if i < 0 {
		return nil, fmt.Errorf("%s has no whole backup named %q on %s: kubectl tiled backups %s -n %s lists them", what, from, target, ti.Name, ti.Namespace)
	}
	return &restorePlan{backup: available[i], target: target}, nil
}

// runningRestore says the restore in place st is under way.
func runningRestore(st *v1alpha1.InPlaceRestoreStatus) bool {
	switch st.Phase {
	case v1alpha1.InPlaceRestoreBackingUp, v1alpha1.InPlaceRestoreStopping, v1alpha1.InPlaceRestoreRestoring, v1alpha1.InPlaceRestoreStarting:
		return true
	}
	return false
}

// printRestorePlan prints what restoring p into ti would replace, changing nothing.
func printRestorePlan(w io.Writer, ti *v1alpha1.TiledInstance, p *restorePlan, now time.Time) {
	line := func(key, format string, args ...any) {
		fmt.Fprintf(w, "%-15s%s\n", key+":", fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(w, "Restore of TiledInstance %s/%s (dry run: nothing was changed)\n", ti.Namespace, ti.Name)
	taken := ""
	if t, ok := render.BackupTime(p.backup.Name); ok {
		taken = fmt.Sprintf(", taken %s (%s ago)", t.UTC().Format(time.RFC3339), duration.HumanDuration(now.Sub(t)))
	}
	size := "size unknown"
	if p.backup.Bytes > 0 {
		size = humanBytes(p.backup.Bytes)
	}
	line("Backup", "%s on %s%s, %s", p.backup.Name, p.target, taken, size)
	st := ti.Status
	catalog := "the catalog"
	if db := st.Database; db != nil && db.CatalogRevision != "" {
		catalog += " at revision " + db.CatalogRevision
	}
	if st.Version != "" {
		catalog += ", served by Tiled " + st.Version
	}
	line("Replaces", "%s, the SQL tabular data and the auth sessions, as they are now (%s)", catalog, databaseOf(ti))
	if b := st.Backup; b != nil && b.LastSuccessful != nil {
		line("Last backup", "%s at %s (what was written since is kept only in the backup of step 1)", b.LastSuccessful.Name, b.LastSuccessful.CompletionTime.UTC().Format(time.RFC3339))
	}
	ready := "no Tiled pod is ready"
	if st.ReadyReplicas > 0 {
		ready = fmt.Sprintf("%d Tiled pod(s) ready now", st.ReadyReplicas)
	}
	line("Steps", "1. back up the databases as they are to %s (Tiled serves)", render.PreRestoreBackupName(now))
	fmt.Fprintf(w, "%15s2. stop Tiled (%s)\n", "", ready)
	fmt.Fprintf(w, "%15s3. restore backup %s, each database in one transaction\n", "", p.backup.Name)
	fmt.Fprintf(w, "%15s4. start Tiled on the restored databases\n", "")
	estimate := "about as long as restoring the backup takes, plus Tiled's start"
	if b := st.Backup; b != nil && b.LastSuccessful != nil && b.LastSuccessful.Seconds > 0 {
		estimate = fmt.Sprintf("roughly %d s or more: about as long as the last backup's dumps took (%d s), plus Tiled's start", b.LastSuccessful.Seconds, b.LastSuccessful.Seconds)
	}
	line("Tiled stopped", "yes, from step 2 to step 4: %s", estimate)
	line("Requested by", "%s", cmp.Or(p.requestedBy, "an unnamed requester (the API server did not say who you are)"))
	line("Undo", "kubectl tiled restore %s -n %s --from <the pre-restore backup>", ti.Name, ti.Namespace)
}

// databaseOf names the instance's databases.
func databaseOf(ti *v1alpha1.TiledInstance) string {
	if db := ti.Spec.Database; db != nil && db.External != nil {
		return "an external database"
	}
	return "the managed database"
}

// waitForRestore reads the instance until status.inPlaceRestore records request id with an outcome.
func waitForRestore(ctx context.Context, c client.Client, key client.ObjectKey, id string) (*v1alpha1.InPlaceRestoreStatus, error) {
	for {
		ti := &v1alpha1.TiledInstance{}
		if err := c.Get(ctx, key, ti); err != nil {
			return nil, err
		}
		if st := ti.Status.InPlaceRestore; st != nil && st.Request == id && !runningRestore(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// printRestoreOutcome prints how the restore st of ti ended: an error unless it succeeded.
func printRestoreOutcome(w io.Writer, ti *v1alpha1.TiledInstance, st *v1alpha1.InPlaceRestoreStatus) error {
	if st.Phase != v1alpha1.InPlaceRestoreSucceeded {
		return fmt.Errorf("restore %s: %s", strings.ToLower(string(st.Phase)), cmp.Or(st.Message, "no message"))
	}
	at := ""
	if st.CompletionTime != nil {
		at = " at " + st.CompletionTime.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "restored backup %s into TiledInstance %s/%s%s: the restore took %d s, Tiled was stopped %d s\n",
		st.Backup, ti.Namespace, ti.Name, at, st.RestoreSeconds, st.DowntimeSeconds)
	if st.PreRestoreBackup != "" {
		fmt.Fprintf(w, "the databases as they were are backup %s: kubectl tiled restore %s -n %s --from %s undoes it\n", st.PreRestoreBackup, ti.Name, ti.Namespace, st.PreRestoreBackup)
	}
	return nil
}
