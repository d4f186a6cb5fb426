package kubectltiled_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

const statusNS = "status"

// viewerRole creates the operator's viewer ClusterRole (config/rbac/tiled_viewer_role.yaml, as
// kustomize leaves it but for the name prefix) and returns its name.
func viewerRole(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "tiled_viewer_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.UnmarshalStrict(b, role)).To(Succeed())
	if err := env.Client.Create(context.Background(), role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return role.Name
}

// bind binds the ClusterRole or Role (kind) named role to user in the status namespace.
func bind(t *testing.T, user, kind, role string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: user + "-" + role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
	}
	NewWithT(t).Expect(env.Client.Create(context.Background(), rb)).To(Succeed())
}

// readRole creates a Role of the status namespace allowing get and list on resources (core group).
func readRole(t *testing.T, name string, resources ...string) {
	t.Helper()
	NewWithT(t).Expect(env.Client.Create(context.Background(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: []string{"get", "list"}}},
	})).To(Succeed())
}

func condition(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))}
}

// statusFleet creates, as the operator would leave them, cluster nsls2 of beamlines chx (ready)
// and csx (stalled: its upgrade failed), the statuses through the status subresource, a pod of
// chx, and Warning events of csx written through both events APIs.
func statusFleet(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: statusNS}})).To(Succeed())

	tc := &v1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: "nsls2"}}
	tc.Spec.ProfileSelector = &metav1.LabelSelector{}
	tc.Spec.Instances = []v1alpha1.ClusterInstance{{Name: "chx"}, {Name: "csx"}}
	g.Expect(env.Client.Create(ctx, tc)).To(Succeed())
	tc.Status = v1alpha1.TiledClusterStatus{
		ObservedGeneration: tc.Generation, ProfileNames: "facility", Instances: 2, ReadyInstances: 2, UpdatedInstances: 2,
		InstanceSelector: v1alpha1.LabelCluster + "=nsls2",
		Conditions: []metav1.Condition{
			condition("Ready", metav1.ConditionFalse, "InstancesStalled", "1 of 2 instances stalled: nsls2-csx (MigrationFailed)"),
			condition("Reconciling", metav1.ConditionFalse, "InstancesStalled", ""),
			condition("Stalled", metav1.ConditionTrue, "InstancesStalled", "nsls2-csx: MigrationFailed"),
		},
	}
	g.Expect(env.Client.Status().Update(ctx, tc)).To(Succeed())

	for _, short := range []string{"chx", "csx"} {
		ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: "nsls2-" + short,
			Labels: map[string]string{v1alpha1.LabelCluster: "nsls2", v1alpha1.LabelInstance: short},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster", Name: "nsls2",
				UID: tc.UID, Controller: ptr.To(true)}}}}
		g.Expect(env.Client.Create(ctx, ti)).To(Succeed())
		ti.Status = v1alpha1.TiledInstanceStatus{
			ObservedGeneration: ti.Generation, ReadyReplicas: 1, Image: "ghcr.io/bluesky/tiled:0.2.20", Version: "0.2.20",
			Database: &v1alpha1.DatabaseStatus{Mode: "Managed", Ready: true, CatalogRevision: "ed3aab71aad8"},
			Conditions: []metav1.Condition{
				condition("Ready", metav1.ConditionTrue, "Ready", "1 of 1 Tiled pods ready"),
				condition("Reconciling", metav1.ConditionFalse, "Ready", ""),
				condition("Stalled", metav1.ConditionFalse, "Ready", ""),
			},
		}
		if short == "csx" {
			ti.Status.Conditions[2] = condition("Stalled", metav1.ConditionTrue, "MigrationFailed", "the migration to 0.2.21 failed and was rolled back")
			ti.Status.Upgrade = &v1alpha1.UpgradeStatus{Phase: v1alpha1.UpgradeFailed, FromImage: "ghcr.io/bluesky/tiled:0.2.20",
				ToImage: "ghcr.io/bluesky/tiled:0.2.21", FromVersion: "0.2.20", ToVersion: "0.2.21",
				StartTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second)), Message: "alembic: Can't locate revision"}
		}
		g.Expect(env.Client.Status().Update(ctx, ti)).To(Succeed())
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: "tiled-nsls2-chx-0", Labels: map[string]string{
			v1alpha1.LabelAppName: "tiled", v1alpha1.LabelAppInstance: "nsls2-chx", v1alpha1.LabelAppComponent: "server"}},
		Spec: corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{Name: "tiled", Image: "ghcr.io/bluesky/tiled:0.2.20"}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	started := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &started, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "tiled", Image: "ghcr.io/bluesky/tiled:0.2.20", ImageID: "ghcr.io/bluesky/tiled@sha256:" + strings.Repeat("0", 64),
		Ready: true, RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())

	csx := corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledInstance", Namespace: statusNS, Name: "nsls2-csx"}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	g.Expect(env.Client.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: statusNS, Name: "nsls2-csx.backupfailed"},
		InvolvedObject: csx, Type: corev1.EventTypeWarning, Reason: "BackupFailed", Message: "backup claim tiled-backups is full",
		FirstTimestamp: now, LastTimestamp: now, Count: 3, Source: corev1.EventSource{Component: "tiled-operator"},
	})).To(Succeed())
	// As the operator's recorder writes them (events.k8s.io/v1).
	g.Expect(env.Client.Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: "nsls2-csx.migrationfailed"},
		EventTime:  metav1.NewMicroTime(time.Now().Add(-time.Minute)), ReportingController: "tiled-operator", ReportingInstance: "tiled-operator-0",
		Action: "Upgrade", Reason: "MigrationFailed", Regarding: csx, Note: "migrating the catalog failed", Type: corev1.EventTypeWarning,
	})).To(Succeed())
	// Not shown: a Normal event.
	g.Expect(env.Client.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: statusNS, Name: "nsls2-chx.ready"},
		InvolvedObject: corev1.ObjectReference{Kind: "TiledInstance", Namespace: statusNS, Name: "nsls2-chx"},
		Type:           corev1.EventTypeNormal, Reason: "Ready", Message: "ready", FirstTimestamp: now, LastTimestamp: now, Count: 1,
	})).To(Succeed())
}

// TestStatusAsAReadOnlyUser runs status against the API server as users bound to the operator's
// viewer role, with and without the right to list pods and events: what they may not read is left
// out with a note, the rest is printed.
func TestStatusAsAReadOnlyUser(t *testing.T) {
	statusFleet(t)
	viewer := viewerRole(t)
	readRole(t, "pods-and-events", "pods", "events")
	readRole(t, "pods", "pods")

	kubeconfig := func(user string) string {
		t.Helper()
		path, err := env.UserKubeconfig(user, "tiled-users")
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	alice, bob, carol := kubeconfig("alice"), kubeconfig("bob"), kubeconfig("carol")
	bind(t, "alice", "ClusterRole", viewer)
	bind(t, "alice", "Role", "pods-and-events")
	bind(t, "bob", "ClusterRole", viewer)
	bind(t, "bob", "Role", "pods")
	bind(t, "carol", "ClusterRole", viewer)

	status := func(kubeconfig string, args ...string) string {
		t.Helper()
		code, out, errOut := runPlugin(t, append([]string{"status", "-n", statusNS, "--kubeconfig", kubeconfig}, args...)...)
		NewWithT(t).Expect(code).To(Equal(0), errOut)
		NewWithT(t).Expect(errOut).To(BeEmpty())
		return out
	}

	t.Run("cluster, with pods and events", func(t *testing.T) {
		g := NewWithT(t)
		out := status(alice, "nsls2")
		g.Expect(out).To(HavePrefix("Cluster:          nsls2 (namespace status)\n"))
		g.Expect(out).To(ContainSubstring("Ready:            False InstancesStalled: 1 of 2 instances stalled: nsls2-csx (MigrationFailed)\n"))
		g.Expect(out).To(ContainSubstring("Stalled:          True InstancesStalled: nsls2-csx: MigrationFailed\n"))
		g.Expect(out).To(ContainSubstring("Rollout:          2 of 2 instances updated, 2 ready, 0 pending, 0 held; maxUnavailable 1\n"))
		g.Expect(out).To(MatchRegexp(`(?m)^nsls2-chx +1/1 +0\.2\.20 +Managed/ready +ed3aab71aad8 +no target +- +- +Ready$`))
		g.Expect(out).To(MatchRegexp(`(?m)^nsls2-csx +1/1 +0\.2\.20 +Managed/ready +ed3aab71aad8 +no target +Failed +- +Stalled: MigrationFailed$`))
		g.Expect(out).To(MatchRegexp(`(?m)^\S+ +tiledinstance/nsls2-csx +MigrationFailed +migrating the catalog failed$`))
		g.Expect(out).To(MatchRegexp(`(?m)^\S+ \(x3\) +tiledinstance/nsls2-csx +BackupFailed +backup claim tiled-backups is full$`))
		g.Expect(out).NotTo(ContainSubstring("Ready   ready"), "a Normal event")
		g.Expect(out).NotTo(ContainSubstring("Note:"))
		g.Expect(out).NotTo(ContainSubstring("\x1b["), "not a terminal")

		var doc struct {
			Scope     string `json:"scope"`
			Instances []struct {
				Name    string `json:"name"`
				Ready   string `json:"ready"`
				Stalled bool   `json:"stalled"`
			} `json:"instances"`
			Events []struct {
				Object, Reason string
			} `json:"events"`
			Unreadable []string `json:"unreadable"`
		}
		g.Expect(json.Unmarshal([]byte(status(alice, "nsls2", "-o", "json")), &doc)).To(Succeed())
		g.Expect(doc.Scope).To(Equal("Cluster"))
		g.Expect(doc.Instances).To(HaveLen(2))
		g.Expect(doc.Instances[1].Name).To(Equal("nsls2-csx"))
		g.Expect(doc.Instances[1].Stalled).To(BeTrue())
		g.Expect(doc.Events).To(HaveLen(2))
		g.Expect(doc.Events[0].Reason).To(Equal("BackupFailed"), "newest first")
		g.Expect(doc.Unreadable).To(BeEmpty())
	})

	t.Run("instance, with its pods", func(t *testing.T) {
		g := NewWithT(t)
		out := status(alice, "tiledinstance/chx")
		g.Expect(out).To(HavePrefix("Instance:         nsls2-chx (namespace status, cluster nsls2)\n"))
		g.Expect(out).To(MatchRegexp(`(?m)^tiled-nsls2-chx-0 +server +1/1 +Running +2 +\S+$`))
		g.Expect(out).To(ContainSubstring("Warning events (newest first)\nNone.\n"))
		g.Expect(status(alice, "nsls2-csx")).To(ContainSubstring("Upgrade:          Failed 0.2.20 -> 0.2.21"))
	})

	t.Run("namespace", func(t *testing.T) {
		g := NewWithT(t)
		out := status(alice)
		g.Expect(out).To(MatchRegexp(`(?m)^nsls2 +False +2/2 +2 +0 +0 +no +Stalled: InstancesStalled$`))
	})

	t.Run("without events", func(t *testing.T) {
		g := NewWithT(t)
		out := status(bob, "nsls2")
		g.Expect(out).To(ContainSubstring("Warning events (newest first)\nNot readable: see the note below.\n"))
		g.Expect(out).To(HaveSuffix("\nNote: events in namespace status could not be read: forbidden (you may not list them)\n"))
		g.Expect(out).To(MatchRegexp(`(?m)^nsls2-csx .* Stalled: MigrationFailed$`), "the rest is printed")
		out = status(bob, "nsls2-chx")
		g.Expect(out).To(MatchRegexp(`(?m)^tiled-nsls2-chx-0 +server +1/1 +Running`))
		g.Expect(out).To(HaveSuffix("\nNote: events in namespace status could not be read: forbidden (you may not list them)\n"))
	})

	t.Run("without pods or events", func(t *testing.T) {
		g := NewWithT(t)
		out := status(carol, "nsls2-chx")
		g.Expect(out).To(ContainSubstring("Pods\nNot readable: see the note below.\n"))
		g.Expect(out).To(HaveSuffix("\nNote: pods in namespace status could not be read: forbidden (you may not list them)\n" +
			"Note: events in namespace status could not be read: forbidden (you may not list them)\n"))
	})

	t.Run("a missing object", func(t *testing.T) {
		g := NewWithT(t)
		code, out, errOut := runPlugin(t, "status", "nsls3", "-n", statusNS, "--kubeconfig", alice)
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(Equal(`error: no TiledCluster or TiledInstance named "nsls3" in namespace "status"` + "\n"))
	})

	// Only the viewer's reads: the user may not even get a Secret.
	t.Run("the user is not an administrator", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, err := env.Kubectl(context.Background(), "auth", "can-i", "list", "secrets", "-n", statusNS, "--as", "alice")
		g.Expect(err).To(HaveOccurred(), out+errOut)
		g.Expect(out).To(Equal("no\n"))
	})
}

// TestStatusShowsWhatWaits: a lost catalog and a pending render change that adds objects and an
// image, as the operator records them (written through the status subresource, so the CRD's
// schema keeps every field), are shown by status: the loss with the backup that would restore it
// and the command that accepts it, the change with what it adds.
func TestStatusShowsWhatWaits(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "status-waits"
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	found := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, name := range []string{"lost", "pending"} {
		ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Expect(env.Client.Create(ctx, ti)).To(Succeed())
		ti.Status = v1alpha1.TiledInstanceStatus{ObservedGeneration: ti.Generation, Image: "ghcr.io/bluesky/tiled:0.2.20", Version: "0.2.20",
			Database: &v1alpha1.DatabaseStatus{Mode: "Managed", Ready: true}}
		switch name {
		case "lost":
			ti.Status.CatalogLost = &v1alpha1.CatalogLost{Phase: v1alpha1.CatalogLostStalled, Claim: "lost-postgres-data",
				OldClaimUID: "uid-old", NewClaimUID: "uid-new", Revision: "ed3aab71aad8", Backup: "20261203T073000Z",
				Reason: "ClaimReplaced", Time: found}
			ti.Status.Conditions = []metav1.Condition{condition("Stalled", metav1.ConditionTrue, "CatalogLost", "its catalog is lost")}
		case "pending":
			ti.Status.PendingRollout = &v1alpha1.PendingRollout{StatefulSet: "pending", TemplateHash: "5f9c2d",
				Differs: []string{"spec.template.metadata.annotations[example.org/build]"}, DifferCount: 1, Since: &found,
				AddedImages: []string{"valkey/valkey:8.1"}, AddedObjects: []string{"Service/pending-cache", "StatefulSet/pending-cache"}}
		}
		g.Expect(env.Client.Status().Update(ctx, ti)).To(Succeed())
	}

	code, out, errOut := runPlugin(t, "status", "lost", "-n", ns, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(MatchRegexp(`(?m)^Catalog lost: +Stalled, found \S+ \(\S+ ago\): database claim lost-postgres-data replaced \(UID uid-new, was uid-old\); catalog revision ed3aab71aad8 lost$`))
	g.Expect(out).To(MatchRegexp(`(?m)^ +restore: 20261203T073000Z, the newest whole backup`))
	g.Expect(out).To(MatchRegexp(`(?m)^ +accept: +kubectl annotate tiledinstance lost -n status-waits tiled\.blueskyproject\.io/accept-catalog-loss=uid-new `))
	code, out, errOut = runPlugin(t, "status", "-n", ns, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("\nLost catalogs\nlost: Stalled, found "))

	code, out, errOut = runPlugin(t, "status", "pending", "-n", ns, "--kubeconfig", env.Kubeconfig)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(MatchRegexp(`(?m)^ +adds images: +valkey/valkey:8\.1$`))
	g.Expect(out).To(MatchRegexp(`(?m)^ +adds objects: Service/pending-cache, StatefulSet/pending-cache$`))
	var doc struct {
		Instance struct {
			PendingRollout v1alpha1.PendingRollout `json:"pendingRollout"`
		} `json:"instance"`
	}
	code, out, errOut = runPlugin(t, "status", "pending", "-n", ns, "--kubeconfig", env.Kubeconfig, "-o", "json")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(json.Unmarshal([]byte(out), &doc)).To(Succeed())
	g.Expect(doc.Instance.PendingRollout.AddedImages).To(Equal([]string{"valkey/valkey:8.1"}))
}
