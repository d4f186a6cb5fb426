package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// The golden files of testdata/status are what `kubectl tiled status` prints; -update (the flag of
// importhelm_test.go) rewrites them. Ages are measured against testNow (backup_test.go).

// statusClient is a fake client holding objs, which lists events by type as the API server does
// (a field selector), with funcs intercepting its calls.
func statusClient(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TiledCluster{}, &v1alpha1.TiledInstance{}).
		WithIndex(&corev1.Event{}, "type", func(o client.Object) []string { return []string{o.(*corev1.Event).Type} })
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

func cond(typ string, status metav1.ConditionStatus, reason, message, when string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: at(when)}
}

func readyConds(when string) []metav1.Condition {
	return []metav1.Condition{
		cond("Ready", metav1.ConditionTrue, "Ready", "1 of 1 Tiled pods ready", when),
		cond("Reconciling", metav1.ConditionFalse, "Ready", "", when),
		cond("Stalled", metav1.ConditionFalse, "Ready", "", when),
		cond("DatabaseReady", metav1.ConditionTrue, "Ready", "PostgreSQL accepts connections", when),
	}
}

// statusCluster is TiledCluster nsls2/<name> of the beamlines shorts, with its generation observed.
func statusCluster(name string, shorts ...string) *v1alpha1.TiledCluster {
	tc := &v1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Namespace: backupNS, Name: name, UID: types.UID("uid-cluster-" + name), Generation: 4}}
	tc.Spec.ProfileSelector = &metav1.LabelSelector{}
	for _, s := range shorts {
		tc.Spec.Instances = append(tc.Spec.Instances, v1alpha1.ClusterInstance{Name: s})
	}
	n := int32(len(shorts))
	tc.Status = v1alpha1.TiledClusterStatus{
		ObservedGeneration: 4, ProfileNames: "facility,beamlines",
		Instances: n, ReadyInstances: n, UpdatedInstances: n,
		InstanceSelector: v1alpha1.LabelCluster + "=" + name,
		Conditions: []metav1.Condition{
			cond("Ready", metav1.ConditionTrue, "AllInstancesReady", "all 3 instances are ready", "2026-12-01T08:00:00Z"),
			cond("Reconciling", metav1.ConditionFalse, "AllInstancesReady", "", "2026-12-01T08:00:00Z"),
			cond("Stalled", metav1.ConditionFalse, "AllInstancesReady", "", "2026-12-01T08:00:00Z"),
			cond("ProfilesResolved", metav1.ConditionTrue, "Resolved", "2 profiles", "2026-11-01T08:00:00Z"),
		},
	}
	return tc
}

// statusInstance is the healthy TiledInstance of beamline short of cluster tc (nil: standalone).
func statusInstance(tc *v1alpha1.TiledCluster, short string) *v1alpha1.TiledInstance {
	name := short
	ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: backupNS, Generation: 2}}
	if tc != nil {
		name = names.Instance(tc.Name, short)
		ti.Labels = map[string]string{v1alpha1.LabelCluster: tc.Name, v1alpha1.LabelInstance: short}
		ti.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster",
			Name: tc.Name, UID: tc.UID, Controller: ptr.To(true)}}
	}
	ti.Name = name
	ti.Spec.Tiled = &v1alpha1.TiledServerSpec{Image: "ghcr.io/bluesky/tiled:0.2.20"}
	ti.Spec.Backup = claimTarget("30 7 * * *")
	ti.Status = v1alpha1.TiledInstanceStatus{
		ObservedGeneration: 2, ReadyReplicas: 1,
		URL:   "http://" + name + "." + backupNS + ".svc:8000",
		Image: "ghcr.io/bluesky/tiled:0.2.20", Version: "0.2.20",
		Database:   &v1alpha1.DatabaseStatus{Mode: "Managed", Ready: true, CatalogRevision: "ed3aab71aad8", AuthRevision: "a1b2c3d4e5f6"},
		Conditions: readyConds("2026-12-02T10:00:00Z"),
		Backup: &v1alpha1.BackupStatus{
			Target: "claim:tiled-backups/tiled-backups/nsls2/" + name,
			Last: &v1alpha1.BackupRecord{Name: "20261203T073000Z", Job: name + "-backup-29412345", Result: "Succeeded",
				CompletionTime: at("2026-12-03T07:30:04Z"), Bytes: 12897485, Seconds: 4, TiledVersion: "0.2.20"},
		},
		LastMigration: &v1alpha1.MigrationRecord{FromVersion: "0.2.19", ToVersion: "0.2.20", FromRevision: "45e7d1a3b2c0",
			ToRevision: "ed3aab71aad8", Backup: "20261120T100000Z", Result: "Succeeded",
			StartTime: at("2026-11-20T10:00:00Z"), CompletionTime: at("2026-11-20T10:04:10Z")},
	}
	ti.Status.Backup.LastSuccessful = ti.Status.Backup.Last.DeepCopy()
	return ti
}

func warning(kind, name, reason, message, when string, count int32) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: backupNS, Name: name + "." + strings.ToLower(reason) + "." + strings.NewReplacer(":", "", "-", "").Replace(when)},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: backupNS, Name: name},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: message,
		LastTimestamp: at(when), Count: count,
	}
}

func healthyFleet() []client.Object {
	tc := statusCluster("nsls2", "chx", "csx", "iss")
	objs := []client.Object{tc}
	for _, s := range []string{"chx", "csx", "iss"} {
		objs = append(objs, statusInstance(tc, s))
	}
	// A Normal event is not shown; neither is a Warning of another object.
	normal := warning("TiledInstance", "nsls2-chx", "Ready", "ready", "2026-12-03T09:00:00Z", 1)
	normal.Type = corev1.EventTypeNormal
	return append(objs, normal, warning("TiledInstance", "other-chx", "CrashLoopBackOff", "not ours", "2026-12-03T09:00:00Z", 1))
}

// degradedFleet is cluster nsls2 with a stalled instance whose upgrade failed (csx), one whose
// render change waits for the rollout (chx), and one held back (iss); the cluster is Stalled.
func degradedFleet() []client.Object {
	tc := statusCluster("nsls2", "chx", "csx", "iss")
	tc.Generation = 5
	tc.Spec.Rollout = &v1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromString("34%"))}
	tc.Status.ReadyInstances, tc.Status.UpdatedInstances, tc.Status.HeldInstances, tc.Status.PendingInstances = 2, 2, 1, 0
	tc.Status.Held = []v1alpha1.HeldInstance{{Name: "nsls2-iss", Fields: []string{"spec.tiled.image", "spec.tiled.version"}, FieldCount: 3,
		Since: ptr.To(at("2026-12-02T09:30:00Z"))}}
	tc.Status.Conditions = []metav1.Condition{
		cond("Ready", metav1.ConditionFalse, "InstancesStalled", "1 of 3 instances stalled: nsls2-csx (MigrationFailed)", "2026-12-03T08:10:00Z"),
		cond("Reconciling", metav1.ConditionFalse, "InstancesStalled", "", "2026-12-03T08:10:00Z"),
		cond("Stalled", metav1.ConditionTrue, "InstancesStalled", "nsls2-csx: MigrationFailed", "2026-12-03T08:10:00Z"),
	}

	chx := statusInstance(tc, "chx")
	chx.Status.PendingRollout = &v1alpha1.PendingRollout{StatefulSet: "tiled-nsls2-chx", TemplateHash: "5f9c2d",
		Differs:     []string{"spec.template.metadata.annotations[example.org/build]", "spec.template.spec.containers[tiled].env[TILED_X]"},
		DifferCount: 2, Since: ptr.To(at("2026-12-03T08:00:00Z")),
		AddedImages:  []string{"valkey/valkey:8.1"},
		AddedObjects: []string{"Secret/nsls2-chx-cache", "Service/nsls2-chx-cache", "StatefulSet/nsls2-chx-cache"},
		Window:       "outside every maintenance window; opens at 2026-12-04T03:00:00Z"}
	chx.Status.Maintenance = &v1alpha1.MaintenanceStatus{Open: false, Reason: "OutsideWindows",
		Message:  "outside every maintenance window (0 22 * * * for 2h in America/New_York)",
		NextOpen: ptr.To(at("2026-12-04T03:00:00Z"))}
	chx.Status.Conditions = append(chx.Status.Conditions,
		cond("RolloutPending", metav1.ConditionTrue, "RenderChanged", "StatefulSet tiled-nsls2-chx: 2 paths differ", "2026-12-03T08:00:00Z"))

	csx := statusInstance(tc, "csx")
	csx.Spec.Tiled.Image = "ghcr.io/bluesky/tiled:0.2.21"
	csx.Status.Upgrade = &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeFailed, FromImage: "ghcr.io/bluesky/tiled:0.2.20", ToImage: "ghcr.io/bluesky/tiled:0.2.21",
		FromVersion: "0.2.20", ToVersion: "0.2.21", FromRevision: "ed3aab71aad8", ToRevision: "9b1f0e2a7c3d", Backup: "20261203T080000Z",
		StartTime: at("2026-12-03T08:00:00Z"), PhaseTime: ptr.To(at("2026-12-03T08:09:30Z")),
		Message: "migrating the catalog to 9b1f0e2a7c3d failed:\nalembic.util.exc.CommandError: Can't locate revision"}
	csx.Status.LastMigration = &v1alpha1.MigrationRecord{FromVersion: "0.2.20", ToVersion: "0.2.21", FromRevision: "ed3aab71aad8", ToRevision: "9b1f0e2a7c3d",
		Backup: "20261203T080000Z", Result: "RolledBack", StartTime: at("2026-12-03T08:00:00Z"), CompletionTime: at("2026-12-03T08:09:30Z")}
	csx.Status.Conditions = []metav1.Condition{
		cond("Ready", metav1.ConditionTrue, "Ready", "1 of 1 Tiled pods ready (0.2.20, the upgrade was undone)", "2026-12-03T08:10:00Z"),
		cond("Reconciling", metav1.ConditionFalse, "MigrationFailed", "", "2026-12-03T08:10:00Z"),
		cond("Stalled", metav1.ConditionTrue, "MigrationFailed", "the migration to 0.2.21 failed and was rolled back; change spec.tiled.image to retry", "2026-12-03T08:10:00Z"),
		cond("DatabaseReady", metav1.ConditionTrue, "Ready", "PostgreSQL accepts connections", "2026-12-02T10:00:00Z"),
	}
	csx.Status.Backup.Last = &v1alpha1.BackupRecord{Job: "nsls2-csx-backup-29412400", Result: "Failed", CompletionTime: at("2026-12-03T09:00:05Z"),
		Message: "backup claim tiled-backups is full"}

	iss := statusInstance(tc, "iss")
	iss.Status.ReadyReplicas = 0
	iss.Status.Database.Ready = false
	iss.Status.Conditions = []metav1.Condition{
		cond("Ready", metav1.ConditionFalse, "WaitingForDatabase", "PostgreSQL pod postgres-nsls2-iss-0 is not ready", "2026-12-03T09:20:00Z"),
		cond("Reconciling", metav1.ConditionTrue, "WaitingForDatabase", "", "2026-12-03T09:20:00Z"),
		cond("Stalled", metav1.ConditionFalse, "WaitingForDatabase", "", "2026-12-03T09:20:00Z"),
		cond("DatabaseReady", metav1.ConditionFalse, "DatabaseUnavailable", "pod postgres-nsls2-iss-0: readiness probe failed", "2026-12-03T09:20:00Z"),
	}
	return []client.Object{tc, chx, csx, iss,
		warning("TiledInstance", "nsls2-csx", "MigrationFailed", "migrating the catalog to 9b1f0e2a7c3d failed:\nalembic.util.exc.CommandError", "2026-12-03T08:09:30Z", 1),
		warning("TiledInstance", "nsls2-csx", "BackupFailed", "backup claim tiled-backups is full", "2026-12-03T09:00:05Z", 1),
		warning("TiledCluster", "nsls2", "InstancesStalled", "nsls2-csx: MigrationFailed", "2026-12-03T08:10:00Z", 1),
		warning("TiledInstance", "nsls2-iss", "DatabaseUnavailable", "pod postgres-nsls2-iss-0: readiness probe failed", "2026-12-03T09:28:00Z", 6),
	}
}

// lostFleet is cluster nsls2 whose beamline csx lost its catalog (its claim deleted and made again
// empty; a whole backup would restore it), iss's restored from its backup, and a standalone instance
// on an external database found empty, with no backup.
func lostFleet() []client.Object {
	tc := statusCluster("nsls2", "chx", "csx", "iss")
	tc.Status.ReadyInstances = 1
	chx := statusInstance(tc, "chx")
	csx := statusInstance(tc, "csx")
	csx.Status.ReadyReplicas = 0
	csx.Status.Database.CatalogRevision = ""
	csx.Status.CatalogLost = &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled, Claim: "nsls2-csx-postgres-data",
		OldClaimUID: "6b1e-old", NewClaimUID: "9f3a-new", Revision: "ed3aab71aad8", Backup: "20261203T073000Z",
		Reason: "ClaimDeleted", Time: at("2026-12-03T09:00:00Z")}
	csx.Status.Conditions = []metav1.Condition{
		cond("Ready", metav1.ConditionFalse, "CatalogLost", "Tiled is stopped: its catalog is lost", "2026-12-03T09:00:00Z"),
		cond("Reconciling", metav1.ConditionFalse, "CatalogLost", "", "2026-12-03T09:00:00Z"),
		cond("Stalled", metav1.ConditionTrue, "CatalogLost", "TiledInstance nsls2/nsls2-csx: its catalog (revision ed3aab71aad8) is lost", "2026-12-03T09:00:00Z"),
	}
	iss := statusInstance(tc, "iss")
	iss.Status.CatalogLost = &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostRestored, Claim: "nsls2-iss-postgres-data",
		OldClaimUID: "1111-old", NewClaimUID: "2222-new", Revision: "ed3aab71aad8", Backup: "20261203T073000Z",
		Reason: "ClaimReplaced", Time: at("2026-12-03T08:00:00Z"), RestoreCompletionTime: ptr.To(at("2026-12-03T08:20:00Z"))}
	demo := statusInstance(nil, "demo")
	demo.Spec.Backup = nil
	demo.Status.Backup = nil
	demo.Status.Database.Mode = "External"
	demo.Status.CatalogLost = &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled, Revision: "ed3aab71aad8",
		Reason: "DatabaseEmpty", Time: at("2026-12-03T09:10:00Z")}
	return []client.Object{tc, chx, csx, iss, demo}
}

func pod(name, component string, ready bool, restarts int32, waiting string, created string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: backupNS, Name: name, CreationTimestamp: at(created),
		Labels: map[string]string{v1alpha1.LabelAppName: "tiled", v1alpha1.LabelAppInstance: "nsls2-iss", v1alpha1.LabelAppComponent: component}}}
	p.Spec.Containers = []corev1.Container{{Name: component, Image: "x"}}
	cs := corev1.ContainerStatus{Name: component, Ready: ready, RestartCount: restarts}
	if waiting != "" {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waiting}
	} else {
		cs.State.Running = &corev1.ContainerStateRunning{}
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{cs}}
	return p
}

// instanceFleet is degradedFleet with the pods of nsls2-iss, one of another instance, and their
// events.
func instanceFleet() []client.Object {
	other := pod("tiled-nsls2-chx-0", "server", true, 0, "", "2026-12-01T08:00:00Z")
	other.Labels[v1alpha1.LabelAppInstance] = "nsls2-chx"
	return append(degradedFleet(),
		pod("tiled-nsls2-iss-0", "server", false, 0, "", "2026-12-02T10:00:00Z"),
		pod("postgres-nsls2-iss-0", "database", false, 4, "CrashLoopBackOff", "2026-12-03T09:05:00Z"),
		other,
		warning("Pod", "postgres-nsls2-iss-0", "BackOff", "Back-off restarting failed container postgres", "2026-12-03T09:29:00Z", 12),
		warning("Pod", "tiled-nsls2-chx-0", "Unhealthy", `Readiness probe failed: catalog: HTTP 500; database postgres-nsls2-chx.nsls2.svc:5432/catalog: relation "nodes" does not exist`, "2026-12-03T09:29:30Z", 1),
	)
}

// forbid makes the fake client refuse to list the given kind, as the API server refuses a user
// without the right.
func forbid(resources ...string) *interceptor.Funcs {
	return &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		var res string
		switch list.(type) {
		case *corev1.EventList:
			res = "events"
		case *corev1.PodList:
			res = "pods"
		}
		for _, r := range resources {
			if r == res {
				return apierrors.NewForbidden(schema.GroupResource{Resource: res}, "", nil)
			}
		}
		return c.List(ctx, list, opts...)
	}}
}

var statusCases = []struct {
	name  string
	objs  []client.Object
	funcs *interceptor.Funcs
	args  []string
}{
	{name: "healthy-cluster", objs: healthyFleet(), args: []string{"nsls2"}},
	{name: "degraded-cluster", objs: degradedFleet(), args: []string{"tiledcluster/nsls2"}},
	{name: "degraded-cluster-color", objs: degradedFleet(), args: []string{"nsls2", "--color=always"}},
	{name: "instance", objs: instanceFleet(), args: []string{"nsls2-iss"}},
	{name: "instance-stalled", objs: instanceFleet(), args: []string{"instance/csx"}},
	{name: "instance-pending-rollout", objs: instanceFleet(), args: []string{"nsls2-chx", "--events=3"}},
	{name: "instance-forbidden", objs: instanceFleet(), funcs: forbid("pods", "events"), args: []string{"ti/nsls2-iss"}},
	{name: "cluster-events-forbidden", objs: degradedFleet(), funcs: forbid("events"), args: []string{"nsls2"}},
	{name: "namespace", objs: append(degradedFleet(), statusCluster("empty"), statusInstance(nil, "demo")), args: nil},
	{name: "instance-json", objs: instanceFleet(), args: []string{"nsls2-iss", "-o", "json"}},
	{name: "degraded-cluster-json", objs: degradedFleet(), args: []string{"nsls2", "-o", "json"}},
	{name: "lost-catalog-cluster", objs: lostFleet(), args: []string{"nsls2"}},
	{name: "lost-catalog-instance", objs: lostFleet(), args: []string{"nsls2-csx"}},
	{name: "lost-catalog-namespace", objs: lostFleet(), args: nil},
	{name: "lost-catalog-instance-json", objs: lostFleet(), args: []string{"nsls2-csx", "-o", "json"}},
	{name: "restored-in-place-instance", objs: restoredFleet(), args: []string{"nsls2-chx"}},
	{name: "refused-in-place-instance", objs: restoredFleet(), args: []string{"nsls2-csx"}},
}

// restoredFleet is a cluster whose chx was restored in place and whose csx refused a restore.
func restoredFleet() []client.Object {
	tc := statusCluster("nsls2", "chx", "csx")
	chx := statusInstance(tc, "chx")
	done := at("2026-12-03T09:20:41Z")
	chx.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{Request: "20261203T092000Z-3fa1c2", Backup: "20261202T073000Z", RequestedBy: "alice@bnl.gov",
		Target: "claim:tiled-backups/tiled-backups/nsls2/nsls2-chx", Phase: v1alpha1.InPlaceRestoreSucceeded, PreRestoreBackup: "20261203T092000Z-pre-restore",
		StartTime: at("2026-12-03T09:20:00Z"), CompletionTime: &done, RestoreSeconds: 6, DowntimeSeconds: 14}
	csx := statusInstance(tc, "csx")
	csx.Status.InPlaceRestore = &v1alpha1.InPlaceRestoreStatus{Request: "r7", Backup: "20261202T073000Z", Phase: v1alpha1.InPlaceRestoreRefused,
		StartTime: at("2026-12-03T09:25:00Z"), CompletionTime: ptr.To(at("2026-12-03T09:25:00Z")),
		Message: "TiledInstance nsls2/nsls2-csx: annotation tiled.blueskyproject.io/restore=20261202T073000Z (request r7 by an unnamed requester) refused: an upgrade holds it; nothing was changed"}
	return []client.Object{tc, chx, csx}
}

func TestStatusGolden(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	for _, tc := range statusCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			useClient(t, statusClient(t, tc.funcs, tc.objs...))
			code, out, errOut := runCmd("", append([]string{"status", "-n", backupNS}, tc.args...)...)
			g.Expect(errOut).To(BeEmpty())
			g.Expect(code).To(Equal(0))
			ext := ".txt"
			if strings.HasSuffix(tc.name, "-json") {
				ext = ".json"
			}
			golden := filepath.Join("testdata", "status", tc.name+ext)
			if *update {
				g.Expect(os.MkdirAll(filepath.Dir(golden), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(golden, []byte(out), 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(golden)
			g.Expect(err).NotTo(HaveOccurred(), "run go test -run TestStatusGolden -update to write it")
			g.Expect(out).To(Equal(string(want)), "%s (-update rewrites it)", golden)
		})
	}
}

// The colour is only there when asked for, or on a terminal; NO_COLOR and --color=never win.
func TestStatusColor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		noColor string
		want    bool
	}{
		{name: "auto, not a terminal", args: nil, want: false},
		{name: "always", args: []string{"--color=always"}, want: true},
		{name: "always, NO_COLOR", args: []string{"--color=always"}, noColor: "1", want: false},
		{name: "never", args: []string{"--color", "never"}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			t.Setenv("NO_COLOR", tc.noColor)
			useClient(t, statusClient(t, nil, degradedFleet()...))
			code, out, errOut := runCmd("", append([]string{"status", "nsls2", "-n", backupNS}, tc.args...)...)
			g.Expect(code).To(Equal(0), errOut)
			if tc.want {
				g.Expect(out).To(ContainSubstring(colorRed + "False" + colorReset))
				g.Expect(out).To(ContainSubstring(colorYellow + "Stalled: MigrationFailed" + colorReset))
			} else {
				g.Expect(out).NotTo(ContainSubstring("\x1b["))
			}
			// Without the escapes, the same text.
			plainOut := out
			for _, esc := range []string{colorRed, colorGreen, colorYellow, colorBold, colorReset} {
				plainOut = strings.ReplaceAll(plainOut, esc, "")
			}
			want, err := os.ReadFile(filepath.Join("testdata", "status", "degraded-cluster.txt"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(plainOut).To(Equal(string(want)))
		})
	}
	g := NewWithT(t)
	t.Setenv("NO_COLOR", "")
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	g.Expect(useColor("auto", f)).To(BeFalse(), "a file is no terminal")
	g.Expect(useColor("always", f)).To(BeTrue())
}

// The document of -o json and -o yaml: the same, with stable field names.
func TestStatusDocument(t *testing.T) {
	g := NewWithT(t)
	useClient(t, statusClient(t, forbid("events"), instanceFleet()...))
	var docs [2]StatusDocument
	for i, format := range []string{"json", "yaml"} {
		code, out, errOut := runCmd("", "status", "nsls2-iss", "-n", backupNS, "-o", format)
		g.Expect(code).To(Equal(0), errOut)
		if format == "json" {
			g.Expect(json.Unmarshal([]byte(out), &docs[i])).To(Succeed())
		} else {
			g.Expect(yaml.UnmarshalStrict([]byte(out), &docs[i])).To(Succeed())
		}
	}
	a, _ := json.Marshal(docs[0])
	b, _ := json.Marshal(docs[1])
	g.Expect(string(a)).To(Equal(string(b)))
	d := docs[0]
	g.Expect(d.APIVersion).To(Equal("kubectl-tiled/v1alpha1"))
	g.Expect(d.Kind).To(Equal("TiledStatus"))
	g.Expect(d.Scope).To(Equal("Instance"))
	g.Expect(d.Instance.Name).To(Equal("nsls2-iss"))
	g.Expect(d.Instance.Cluster).To(Equal("nsls2"))
	g.Expect(d.Instance.Ready).To(Equal("False"))
	g.Expect(d.Instance.Held).To(BeTrue())
	g.Expect(d.Pods).To(HaveLen(2))
	g.Expect(d.Events).To(BeEmpty())
	g.Expect(d.Unreadable).To(ConsistOf(ContainSubstring("events in namespace nsls2 could not be read: forbidden")))
}

func TestStatusEventsAreNewestFirstAndLimited(t *testing.T) {
	g := NewWithT(t)
	useClient(t, statusClient(t, nil, degradedFleet()...))
	code, out, errOut := runCmd("", "status", "nsls2", "-n", backupNS, "-o", "json", "--events", "2")
	g.Expect(code).To(Equal(0), errOut)
	var d StatusDocument
	g.Expect(json.Unmarshal([]byte(out), &d)).To(Succeed())
	g.Expect(d.Events).To(HaveLen(2))
	g.Expect(d.Events[0].Reason).To(Equal("DatabaseUnavailable"))
	g.Expect(d.Events[0].Count).To(Equal(int32(6)))
	g.Expect(d.Events[1].Reason).To(Equal("BackupFailed"))

	code, out, _ = runCmd("", "status", "nsls2", "-n", backupNS, "--events", "0")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("Warning events (newest first)\nNone.\n"))
}

// An event written through events.k8s.io/v1 (the operator's recorder) is read by its series'
// last time, else its eventTime.
func TestEventTime(t *testing.T) {
	g := NewWithT(t)
	e := &corev1.Event{EventTime: metav1.NewMicroTime(at("2026-12-03T09:00:00Z").Time)}
	g.Expect(eventTime(e)).To(Equal(at("2026-12-03T09:00:00Z").Time))
	g.Expect(eventCount(e)).To(Equal(int32(1)))
	e.Series = &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(at("2026-12-03T09:10:00Z").Time)}
	g.Expect(eventTime(e)).To(Equal(at("2026-12-03T09:10:00Z").Time))
	g.Expect(eventCount(e)).To(Equal(int32(4)))
}

func TestStatusErrors(t *testing.T) {
	twin := statusInstance(nil, "chx")
	twin.Name = "other-chx"
	twin.Labels = map[string]string{v1alpha1.LabelInstance: "chx"}
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
		usage  bool
	}{
		{name: "nothing of that name", args: []string{"xyz"}, stderr: `error: no TiledCluster or TiledInstance named "xyz" in namespace "nsls2"` + "\n"},
		{name: "no such cluster", args: []string{"tiledcluster/nsls2-chx"}, stderr: `error: TiledCluster "nsls2-chx" not found in namespace "nsls2"` + "\n"},
		{name: "no such instance", args: []string{"ti/nsls2"}, stderr: `error: TiledInstance "nsls2" not found in namespace "nsls2"` + "\n"},
		{name: "ambiguous short name", args: []string{"chx"}, stderr: `error: instance "chx" is ambiguous in namespace "nsls2": name one of nsls2-chx, other-chx` + "\n"},
		{name: "other kind", args: []string{"pod/x"}, stderr: `error: "pod/x": a TiledCluster or TiledInstance is named NAME, tiledcluster/NAME or tiledinstance/NAME` + "\n"},
		{name: "no name", args: []string{"tc/"}, stderr: `error: "tc/" names no object` + "\n"},
		{name: "two arguments", args: []string{"a", "b"}, stderr: "error: expected at most one CLUSTER or INSTANCE, got 2 arguments", usage: true},
		{name: "output", args: []string{"-o", "wide"}, stderr: `error: unable to match a printer suitable for the output format "wide", allowed formats are: json,yaml`, usage: true},
		{name: "color", args: []string{"--color", "yes"}, stderr: `error: --color must be auto, always or never, got "yes"`, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			useClient(t, statusClient(t, nil, append(healthyFleet(), twin)...))
			expectRefused(g, "status", tc.args, tc.stderr, tc.usage)
		})
	}
}

func TestStatusCompletion(t *testing.T) {
	g := NewWithT(t)
	useClient(t, statusClient(t, nil, healthyFleet()...))
	code, out, _ := runCmd("", "__complete", "status", "-n", backupNS, "nsls2")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(HavePrefix("nsls2\nnsls2-chx\nnsls2-csx\nnsls2-iss\n:4\n"))
}

// A user who may not read TiledClusters still gets an instance by its bare name; a cluster named
// so is an error that says why.
func TestStatusWithoutTheRightToReadClusters(t *testing.T) {
	g := NewWithT(t)
	useClient(t, statusClient(t, &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*v1alpha1.TiledCluster); ok {
			return apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "tiledclusters"}, key.Name, nil)
		}
		return c.Get(ctx, key, obj, opts...)
	}}, healthyFleet()...))
	code, out, errOut := runCmd("", "status", "-n", backupNS, "nsls2-chx")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(HavePrefix("Instance:         nsls2-chx (namespace nsls2, cluster nsls2)\n"))
	code, _, errOut = runCmd("", "status", "-n", backupNS, "tc/nsls2")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(HavePrefix(`error: reading TiledCluster nsls2/nsls2: tiledclusters.tiled.blueskyproject.io "nsls2" is forbidden`))
}

// The command that accepts a lost catalog names the new claim's UID (true for an external
// database), and is given only while the loss waits for a person and can be accepted.
func TestAcceptCatalogLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost v1alpha1.CatalogLost
		want string
	}{
		{name: "managed, new claim", lost: v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled, Claim: "c", NewClaimUID: "uid-2"},
			want: "kubectl annotate tiledinstance nsls2-csx -n nsls2 tiled.blueskyproject.io/accept-catalog-loss=uid-2"},
		{name: "managed, no new claim yet", lost: v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled, Claim: "c"}},
		{name: "external", lost: v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled},
			want: "kubectl annotate tiledinstance nsls2-csx -n nsls2 tiled.blueskyproject.io/accept-catalog-loss=true"},
		{name: "restoring", lost: v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostRestoring, Claim: "c", NewClaimUID: "uid-2"}},
		{name: "restored", lost: v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostRestored, Claim: "c", NewClaimUID: "uid-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(acceptCatalogLoss(backupNS, "nsls2-csx", &tc.lost)).To(Equal(tc.want))
		})
	}
}
