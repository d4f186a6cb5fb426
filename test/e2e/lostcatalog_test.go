//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/catalog"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// The lost-catalog case (issue 44, item 2): a serving beamline's database claim deleted and its
// PostgreSQL pod killed, as an accident would do it. The StatefulSet then starts PostgreSQL on a new,
// empty claim; the operator must never start Tiled on it nor report it Ready: within a minute the
// instance is Stalled (CatalogLost) naming the claim and the backup that would restore it, Tiled is at
// 0 replicas and the backup CronJob suspended. Then spec.backup.onCatalogLost RestoreLatest restores
// that backup and the data written before reads back the same. Its own namespace and one-beamline
// fleet (OwnNamespace); not yet registered in suite() — the lead registers it.
//
// Figures: claim_loss_served_empty (the polls, one a second from the claim's deletion to the
// restore's start, that found the instance Ready or a Tiled pod started on the new database ready:
// 0), catalog_lost_detected_seconds
// (the claim's deletion -> status.catalogLost) and catalog_lost_restored_seconds (RestoreLatest
// applied -> the instance Ready with the record gone).

const (
	lostNS        = "e2e-lost-catalog"
	lostCluster   = "lc"
	lostFacility  = "e2e-lost-catalog"
	lostBeamline  = "l1"
	lostBackups   = "lost-backups"
	lostDetection = 90 * time.Second
	// lostStallWatch is how long the stalled instance is watched for anything serving the lost
	// catalog before the restore is asked for: a duration, not a condition, because what it proves
	// is an absence. It spans six of the operator's claim rechecks (every 3 s): a reconcile that
	// scaled Tiled up again would have run by then, and the poll counts the instance Ready or a
	// Tiled pod made since the loss and ready.
	lostStallWatch = 20 * time.Second
)

// lostClusterYAML is the one-beamline TiledCluster backing up to the namespace's claim, with
// onCatalogLost policy ("" leaves it unset: Stall).
func lostClusterYAML(policy string) string {
	backup := fmt.Sprintf("claim: {claimName: %s}", lostBackups)
	if policy != "" {
		backup += ", onCatalogLost: " + policy
	}
	return fmt.Sprintf(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata:
  name: %s
  namespace: %s
spec:
  profileSelector: {matchLabels: {facility: %s}}
  instances:
  - name: %s
    overrides:
      backup: {%s}
`, lostCluster, lostNS, lostFacility, lostBeamline, backup)
}

// lostBackupClaimYAML is the namespace's backup claim.
func lostBackupClaimYAML() string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s, namespace: %s}
spec:
  storageClassName: %s
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 2Gi}}
`, lostBackups, lostNS, storageClass)
}

func testLostCatalog(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("namespace %s is kept for inspection", lostNS)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", lostNS, "--wait=false")
	})
	mustKubectl(t, []byte(namespaceYAML(lostNS)), "apply", "--server-side", "-f", "-")
	requireFreeVolumes(t, 4) // data, database, backups, and the database's second claim
	mustKubectl(t, []byte(lostBackupClaimYAML()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(profileYAMLIn(lostNS, "lost-defaults", lostFacility, tiledImg())), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(lostClusterYAML("")), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", lostNS, "wait", "--for=condition=Ready", "tc/"+lostCluster, "--timeout=6m")
	instance := names.Instance(lostCluster, lostBeamline)
	n := names.For(lostNS, instance)

	// Data, and a whole backup of it.
	written := runClientsIn(t, lostNS, []clientRun{{pod: "write-l1", instance: instance, image: tiledImg(), mode: "write", seed: 400}})
	if out, err := kubectlTiled(t, "backup", instance, "-n", lostNS, "--wait"); err != nil {
		t.Fatalf("kubectl tiled backup %s --wait: %v\n%s", instance, err, out)
	}
	var ti *v1alpha1.TiledInstance
	eventually(t, time.Minute, time.Second, instance+" records the backup and its catalog's claim", func() (bool, string) {
		ti = getInstanceIn(t, lostNS, instance)
		st, db := ti.Status.Backup, ti.Status.Database
		return st != nil && st.LastSuccessful != nil && db != nil && db.ClaimUID != "" && db.CatalogRevision != "",
			fmt.Sprintf("backup %+v database %+v", st, db)
	})
	whole, oldUID, revision := ti.Status.Backup.LastSuccessful.Name, ti.Status.Database.ClaimUID, ti.Status.Database.CatalogRevision
	var cm corev1.ConfigMap
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: lostNS, Name: n.ConfigMap}, &cm); err != nil || cm.Data[render.CatalogExpectedKey] != "true" {
		t.Errorf("%s's ConfigMap does not say a catalog is expected: %v %v", instance, err, cm.Data[render.CatalogExpectedKey])
	}

	// The accident: the claim deleted (it waits for its pod), then the pod.
	lostAt := time.Now()
	mustKubectl(t, nil, "-n", lostNS, "delete", "pvc", n.DatabaseClaim, "--wait=false")
	mustKubectl(t, nil, "-n", lostNS, "delete", "pod", n.Postgres+"-0", "--wait=false")
	// Served empty: the instance reported Ready after the loss (the first seconds excepted: the
	// operator has not yet seen the claim go), or a Tiled pod started after the loss — on the new,
	// empty database — became ready. The Tiled pods of before may take their grace period to stop;
	// they never held the new database.
	servedEmpty := 0
	poll := func() {
		cur := getInstanceIn(t, lostNS, instance)
		if time.Since(lostAt) > 5*time.Second && isTrue(cur, "Ready") {
			servedEmpty++
			return
		}
		var pods corev1.PodList
		if err := cl.List(context.Background(), &pods, client.InNamespace(lostNS),
			client.MatchingLabels{v1alpha1.LabelAppInstance: instance, v1alpha1.LabelAppComponent: render.ComponentServer}); err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.CreationTimestamp.After(lostAt) && podReady(p) {
				servedEmpty++
				return
			}
		}
	}
	eventually(t, lostDetection, time.Second, instance+" Stalled CatalogLost", func() (bool, string) {
		poll()
		cur := getInstanceIn(t, lostNS, instance)
		c := condition(cur, "Stalled")
		return cur.Status.CatalogLost != nil && c != nil && c.Status == "True" && c.Reason == catalog.ReasonCatalogLost,
			fmt.Sprintf("%+v %+v", cur.Status.CatalogLost, c)
	})
	detected := time.Since(lostAt).Seconds()
	eventually(t, 3*time.Minute, time.Second, "the new claim named, Tiled at 0, the CronJob suspended", func() (bool, string) {
		poll()
		cur := getInstanceIn(t, lostNS, instance)
		l := cur.Status.CatalogLost
		var sts appsv1.StatefulSet
		var cj batchv1.CronJob
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: lostNS, Name: n.Tiled}, &sts); err != nil {
			return false, err.Error()
		}
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: lostNS, Name: n.BackupCronJob}, &cj); err != nil {
			return false, err.Error()
		}
		return l != nil && l.NewClaimUID != "" && sts.Spec.Replicas != nil && *sts.Spec.Replicas == 0 && sts.Status.Replicas == 0 &&
				cj.Spec.Suspend != nil && *cj.Spec.Suspend,
			fmt.Sprintf("lost %+v, Tiled replicas %v (%d running), CronJob suspended %v", l, sts.Spec.Replicas, sts.Status.Replicas, cj.Spec.Suspend)
	})
	cur := getInstanceIn(t, lostNS, instance)
	l, c := cur.Status.CatalogLost, condition(cur, "Stalled")
	for _, want := range []string{n.DatabaseClaim, oldUID, l.NewClaimUID, "revision " + revision, whole} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the CatalogLost condition does not name %q: %s", want, c.Message)
		}
	}
	if l.OldClaimUID != oldUID || l.Revision != revision || l.Backup != whole {
		t.Errorf("status.catalogLost %+v, want the claim %s, revision %s, backup %s", l, oldUID, revision, whole)
	}
	// A while stalled: nothing serves it.
	for end := time.Now().Add(lostStallWatch); time.Now().Before(end); time.Sleep(time.Second) {
		poll()
	}

	// RestoreLatest: the backup restored, the data read back the same.
	restoreAt := time.Now()
	mustKubectl(t, []byte(lostClusterYAML(string(v1alpha1.CatalogLostRestoreLatest))), "apply", "--server-side", "-f", "-")
	eventually(t, 8*time.Minute, time.Second, instance+" restored and Ready", func() (bool, string) {
		cur := getInstanceIn(t, lostNS, instance)
		return cur.Status.CatalogLost == nil && isTrue(cur, "Ready"), fmt.Sprintf("%+v", cur.Status.CatalogLost)
	})
	restored := time.Since(restoreAt).Seconds()
	read := runClientsIn(t, lostNS, []clientRun{{pod: "read-l1", instance: instance, image: tiledImg(), mode: "read", seed: 400}})
	sameData(t, instance, written[instance], read[instance])
	if servedEmpty != 0 {
		t.Errorf("the lost catalog was served (instance Ready or a Tiled pod ready) at %d polls", servedEmpty)
	}
	t.Logf("claim_loss_served_empty %d, catalog lost detected %.1fs after the claim's deletion, restored and Ready %.1fs after RestoreLatest",
		servedEmpty, detected, restored)
	figMu.Lock()
	fig.ClaimLossServedEmpty = &servedEmpty
	fig.CatalogLostDetectedSeconds, fig.CatalogLostRestoredSeconds = detected, restored
	figMu.Unlock()
}
