package main

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// restoreInstance is chx serving with two whole backups on its claim target.
func restoreInstance() *v1alpha1.TiledInstance {
	ti := instance("chx", claimTarget("30 2 * * *"), &v1alpha1.BackupStatus{
		Target:         "claim:tiled-backups/tiled-backups/nsls2/nsls2-chx",
		LastSuccessful: &v1alpha1.BackupRecord{Name: "20261203T023000Z", Job: "j", Result: "Succeeded", CompletionTime: at("2026-12-03T02:30:09Z"), Bytes: 50438144, Seconds: 9},
		Available:      []v1alpha1.AvailableBackup{{Name: "20261202T023000Z", Bytes: 50229248}, {Name: "20261203T023000Z", Bytes: 50438144}},
	})
	ti.Status.Database = &v1alpha1.DatabaseStatus{CatalogRevision: "917dbbcfc4b1"}
	ti.Status.Version = "0.2.20"
	ti.Status.ReadyReplicas = 2
	ti.Spec.Database = &v1alpha1.DatabaseSpec{Managed: &v1alpha1.ManagedDatabase{}}
	return ti
}

// fixedRequest makes the request id "r1" and the user "alice" until the test ends.
func fixedRequest(t *testing.T) {
	oldID, oldWho, oldPoll := newRequestID, whoAmI, pollInterval
	newRequestID = func(time.Time) string { return "r1" }
	whoAmI = func(context.Context, client.Client) string { return "alice" }
	pollInterval = 10 * time.Millisecond
	t.Cleanup(func() { newRequestID, whoAmI, pollInterval = oldID, oldWho, oldPoll })
}

// writes counts the client's writes.
func writes(n *int) *interceptor.Funcs {
	return &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			*n++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			*n++
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			*n++
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
}

func TestRestoreDryRunChangesNothing(t *testing.T) {
	g := NewWithT(t)
	fixedRequest(t)
	n := 0
	c := fakeClient(t, writes(&n), restoreInstance())
	useClient(t, c)
	code, out, errOut := runCmd("", "restore", "chx", "-n", backupNS, "--from", "20261202T023000Z", "--dry-run")
	g.Expect(errOut).To(BeEmpty())
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(Equal(`Restore of TiledInstance nsls2/nsls2-chx (dry run: nothing was changed)
Backup:        20261202T023000Z on claim:tiled-backups/tiled-backups/nsls2/nsls2-chx, taken 2026-12-02T02:30:00Z (31h ago), 47.9 MiB
Replaces:      the catalog at revision 917dbbcfc4b1, served by Tiled 0.2.20, the SQL tabular data and the auth sessions, as they are now (the managed database)
Last backup:   20261203T023000Z at 2026-12-03T02:30:09Z (what was written since is kept only in the backup of step 1)
Steps:         1. back up the databases as they are to 20261203T093000Z-pre-restore (Tiled serves)
               2. stop Tiled (2 Tiled pod(s) ready now)
               3. restore backup 20261202T023000Z, each database in one transaction
               4. start Tiled on the restored databases
Tiled stopped: yes, from step 2 to step 4: roughly 9 s or more: about as long as the last backup's dumps took (9 s), plus Tiled's start
Requested by:  alice
Undo:          kubectl tiled restore nsls2-chx -n nsls2 --from <the pre-restore backup>
`))
	g.Expect(n).To(BeZero(), "a dry run writes nothing")
	var ti v1alpha1.TiledInstance
	g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: "nsls2-chx"}, &ti)).To(Succeed())
	g.Expect(ti.Annotations).To(BeEmpty())
}

func TestRestoreRequests(t *testing.T) {
	for _, tc := range []struct{ from, backup string }{{"20261202T023000Z", "20261202T023000Z"}, {"latest", "20261203T023000Z"}} {
		t.Run(tc.from, func(t *testing.T) {
			g := NewWithT(t)
			fixedRequest(t)
			c := fakeClient(t, nil, restoreInstance())
			useClient(t, c)
			code, out, errOut := runCmd("", "restore", "chx", "-n", backupNS, "--from", tc.from)
			g.Expect(errOut).To(BeEmpty())
			g.Expect(code).To(Equal(0))
			g.Expect(out).To(Equal("tiledinstance.tiled.blueskyproject.io/nsls2-chx: restore of backup " + tc.backup + " requested (request r1 by alice)\n"))
			var ti v1alpha1.TiledInstance
			g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: "nsls2-chx"}, &ti)).To(Succeed())
			g.Expect(ti.Annotations).To(Equal(map[string]string{
				v1alpha1.AnnotationRestore: tc.backup, v1alpha1.AnnotationRestoreRequest: "r1", v1alpha1.AnnotationRestoreRequestedBy: "alice",
			}))
		})
	}
}

func TestRestoreWait(t *testing.T) {
	done := metav1.NewTime(testNow)
	for _, tc := range []struct {
		name   string
		st     v1alpha1.InPlaceRestoreStatus
		code   int
		out    string
		stderr string
	}{
		{"succeeded", v1alpha1.InPlaceRestoreStatus{Request: "r1", Backup: "20261202T023000Z", Phase: v1alpha1.InPlaceRestoreSucceeded,
			PreRestoreBackup: "20261203T093000Z-pre-restore", CompletionTime: &done, RestoreSeconds: 4, DowntimeSeconds: 11}, 0,
			"restored backup 20261202T023000Z into TiledInstance nsls2/nsls2-chx at 2026-12-03T09:30:00Z: the restore took 4 s, Tiled was stopped 11 s\n" +
				"the databases as they were are backup 20261203T093000Z-pre-restore: kubectl tiled restore nsls2-chx -n nsls2 --from 20261203T093000Z-pre-restore undoes it\n", ""},
		{"refused", v1alpha1.InPlaceRestoreStatus{Request: "r1", Backup: "20261202T023000Z", Phase: v1alpha1.InPlaceRestoreRefused, Message: "an upgrade holds it"}, 1,
			"", "error: restore refused: an upgrade holds it\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			fixedRequest(t)
			ti := restoreInstance()
			// The operator's record, as it would write it once the request is seen.
			c := fakeClient(t, &interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				cur := &v1alpha1.TiledInstance{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
					return err
				}
				cur.Status.InPlaceRestore = tc.st.DeepCopy()
				return cl.Update(ctx, cur) // no status subresource in the fake client: the update writes it
			}}, ti)
			useClient(t, c)
			code, out, errOut := runCmd("", "restore", "chx", "-n", backupNS, "--from", "20261202T023000Z", "--wait", "--timeout", "5s")
			g.Expect(errOut).To(Equal(tc.stderr))
			g.Expect(code).To(Equal(tc.code))
			g.Expect(strings.TrimPrefix(out, "tiledinstance.tiled.blueskyproject.io/nsls2-chx: restore of backup 20261202T023000Z requested (request r1 by alice)\n")).To(Equal(tc.out))
		})
	}
}

func TestRestoreRefused(t *testing.T) {
	upgrading := restoreInstance()
	upgrading.Status.Upgrade = &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeMigrating, FromVersion: "0.2.14", ToVersion: "0.2.20"}
	running := restoreInstance()
	running.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{Request: "r0", Backup: "20261202T023000Z", Phase: v1alpha1.InPlaceRestoreRestoring}
	lost := restoreInstance()
	lost.Status.CatalogLost = &v1alpha1.CatalogLost{}
	none := restoreInstance()
	none.Status.Backup.Available = nil
	for _, tc := range []struct {
		name   string
		ti     *v1alpha1.TiledInstance
		args   []string
		stderr string
		usage  bool
	}{
		{"no target", instance("chx", nil, nil), []string{"chx", "--from", "latest"},
			"error: TiledInstance nsls2/nsls2-chx has no backup target: its spec.backup sets neither claim nor s3, so it has no backups to restore\n", false},
		{"an upgrade runs", upgrading, []string{"chx", "--from", "latest"},
			"error: TiledInstance nsls2/nsls2-chx is being upgraded (Tiled 0.2.14 -> 0.2.20, status.upgrade.phase Migrating): a restore is refused while an upgrade runs; request it once the upgrade ends\n", false},
		{"a restore runs", running, []string{"chx", "--from", "latest", "--dry-run"},
			"error: TiledInstance nsls2/nsls2-chx is being restored from backup 20261202T023000Z (request r0, phase Restoring): wait for it to end\n", false},
		{"a lost catalog", lost, []string{"chx", "--from", "latest"},
			"error: TiledInstance nsls2/nsls2-chx has lost its catalog (status.catalogLost)", false},
		{"no backups", none, []string{"chx", "--from", "latest"},
			"error: TiledInstance nsls2/nsls2-chx has no whole backup on claim:tiled-backups/tiled-backups/nsls2/nsls2-chx (status.backup.available is empty): take one with kubectl tiled backup nsls2-chx -n nsls2\n", false},
		{"no such backup", restoreInstance(), []string{"chx", "--from", "20261101T000000Z", "--dry-run"},
			`error: TiledInstance nsls2/nsls2-chx has no whole backup named "20261101T000000Z" on claim:tiled-backups/tiled-backups/nsls2/nsls2-chx: kubectl tiled backups nsls2-chx -n nsls2 lists them` + "\n", false},
		{"no --from", restoreInstance(), []string{"chx"}, "error: --from is required", true},
		{"wait and dry run", restoreInstance(), []string{"chx", "--from", "latest", "--dry-run", "--wait"}, "error: --dry-run changes nothing", true},
		{"timeout without wait", restoreInstance(), []string{"chx", "--from", "latest", "--timeout", "1m"}, "error: --timeout is how long --wait waits", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			fixedRequest(t)
			n := 0
			useClient(t, fakeClient(t, writes(&n), tc.ti))
			if strings.HasSuffix(tc.stderr, "\n") || tc.usage {
				expectRefused(g, "restore", tc.args, tc.stderr, tc.usage)
			} else {
				code, out, errOut := runCmd("", append([]string{"restore", "-n", backupNS}, tc.args...)...)
				g.Expect(code).To(Equal(1))
				g.Expect(out).To(BeEmpty())
				g.Expect(errOut).To(HavePrefix(tc.stderr))
			}
			g.Expect(n).To(BeZero(), "nothing written")
		})
	}
}
