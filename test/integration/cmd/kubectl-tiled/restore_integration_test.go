package kubectltiled_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// TestRestoreAsAnEditor: a user with the editor role (aggregated into edit) asks for a restore in
// place. The dry run writes nothing (the instance's resourceVersion stays) and names the user the
// API server authenticates; the request sets the three annotations, the requester being that user;
// --wait ends with the operator's record (written here as the operator would).
func TestRestoreAsAnEditor(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ensureBackupsNamespace(t)
	ti, _ := backupInstance(t, "rst", true, false)
	ti.Status.Backup = &v1alpha1.BackupStatus{
		Target:    "claim:tiled-backups/tiled-backups/backups/nsls2-rst",
		Available: []v1alpha1.AvailableBackup{{Name: "20261203T073000Z", Bytes: 12897485}, {Name: "20261202T073000Z", Bytes: 12000000}},
	}
	g.Expect(env.Client.Status().Update(ctx, ti)).To(Succeed())

	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "tiled_editor_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.UnmarshalStrict(b, role)).To(Succeed())
	if err := env.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: backupsNS, Name: "dave-" + role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "dave"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	})).To(Succeed())
	dave, err := env.UserKubeconfig("dave", "tiled-users")
	g.Expect(err).NotTo(HaveOccurred())

	get := func() *v1alpha1.TiledInstance {
		cur := &v1alpha1.TiledInstance{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ti), cur)).To(Succeed())
		return cur
	}
	before := get().ResourceVersion

	code, out, errOut := runPlugin(t, "restore", "rst", "-n", backupsNS, "--kubeconfig", dave, "--from", "latest", "--dry-run")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(HavePrefix("Restore of TiledInstance backups/nsls2-rst (dry run: nothing was changed)\n" +
		"Backup:        20261203T073000Z on claim:tiled-backups/tiled-backups/backups/nsls2-rst, taken 2026-12-03T07:30:00Z ("))
	g.Expect(out).To(ContainSubstring("\nRequested by:  dave\n"))
	g.Expect(get().ResourceVersion).To(Equal(before), "a dry run writes nothing")

	// The request, and the operator's record of it once seen.
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			cur := &v1alpha1.TiledInstance{}
			if env.Client.Get(ctx, client.ObjectKeyFromObject(ti), cur) == nil && cur.Annotations[v1alpha1.AnnotationRestoreRequest] != "" {
				now := metav1.Now()
				cur.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{
					Request: cur.Annotations[v1alpha1.AnnotationRestoreRequest], Backup: cur.Annotations[v1alpha1.AnnotationRestore],
					RequestedBy: cur.Annotations[v1alpha1.AnnotationRestoreRequestedBy], Phase: v1alpha1.InPlaceRestoreSucceeded,
					PreRestoreBackup: "20261207T093000Z-pre-restore", StartTime: now, CompletionTime: &now, RestoreSeconds: 3, DowntimeSeconds: 9,
				}
				if env.Client.Status().Update(ctx, cur) == nil {
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	code, out, errOut = runPlugin(t, "restore", "rst", "-n", backupsNS, "--kubeconfig", dave, "--from", "20261202T073000Z", "--wait", "--timeout", "1m")
	<-done
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(MatchRegexp(`^tiledinstance\.tiled\.blueskyproject\.io/nsls2-rst: restore of backup 20261202T073000Z requested \(request \d{8}T\d{6}Z-[0-9a-f]{6} by dave\)\n` +
		regexp.QuoteMeta("restored backup 20261202T073000Z into TiledInstance backups/nsls2-rst at ")))
	g.Expect(out).To(ContainSubstring("the restore took 3 s, Tiled was stopped 9 s\nthe databases as they were are backup 20261207T093000Z-pre-restore"))
	a := get().Annotations
	g.Expect(a).To(HaveKeyWithValue(v1alpha1.AnnotationRestore, "20261202T073000Z"))
	g.Expect(a).To(HaveKeyWithValue(v1alpha1.AnnotationRestoreRequestedBy, "dave"))
	g.Expect(a[v1alpha1.AnnotationRestoreRequest]).To(MatchRegexp(`^\d{8}T\d{6}Z-[0-9a-f]{6}$`))

	// Refused before anything is written: no such backup.
	before = get().ResourceVersion
	code, _, errOut = runPlugin(t, "restore", "rst", "-n", backupsNS, "--kubeconfig", dave, "--from", "20261101T000000Z")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring(`has no whole backup named "20261101T000000Z"`))
	g.Expect(get().ResourceVersion).To(Equal(before))
}
