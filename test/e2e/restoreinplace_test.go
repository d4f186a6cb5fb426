//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/inplace"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The restore-in-place case (issue 44, item 3): a serving beamline restored to an earlier backup
// with one command, `kubectl tiled restore --wait`. Data is written and backed up, more is written
// after the backup; the restore brings the catalog back to the backup: what was written before reads
// back the same, what was written after is gone. A dry run before it changes nothing. Its own
// namespace and one-beamline fleet, run together with the lost-catalog case (Together).
//
// Figures: restore_in_place_seconds (the command's start to its end: the backup first, Tiled
// stopped, the restore, Tiled ready again) and restore_in_place_downtime_seconds
// (status.inPlaceRestore.downtimeSeconds).

const (
	inPlaceNS       = "e2e-restore-in-place"
	inPlaceCluster  = "rp"
	inPlaceFacility = "e2e-restore-in-place"
	inPlaceBeamline = "r1"
	inPlaceBackups  = "inplace-backups"
)

// inPlaceClusterYAML is the one-beamline TiledCluster backing up to the namespace's claim.
func inPlaceClusterYAML() string {
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
      backup: {claim: {claimName: %s}}
`, inPlaceCluster, inPlaceNS, inPlaceFacility, inPlaceBeamline, inPlaceBackups)
}

// afterBackupScript writes nodes the backup does not hold.
const afterBackupScript = `
import os, sys, numpy
from tiled.client import from_uri
c = from_uri(os.environ["TILED_URL"], api_key=os.environ["TILED_API_KEY"])
for i in range(int(sys.argv[1])):
    c.write_array(numpy.arange(10) + i, key="after_backup_%d" % i)
print("E2E-KEYS " + ",".join(sorted(c)))
print("E2E-OK")
`

func testRestoreInPlace(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("namespace %s is kept for inspection", inPlaceNS)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", inPlaceNS, "--wait=false")
	})
	mustKubectl(t, []byte(namespaceYAML(inPlaceNS)), "apply", "--server-side", "-f", "-")
	requireFreeVolumes(t, 3) // data, database, backups
	mustKubectl(t, []byte(strings.NewReplacer(lostBackups, inPlaceBackups, lostNS, inPlaceNS).Replace(lostBackupClaimYAML())), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(profileYAMLIn(inPlaceNS, "inplace-defaults", inPlaceFacility, tiledImg())), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(inPlaceClusterYAML()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", inPlaceNS, "wait", "--for=condition=Ready", "tc/"+inPlaceCluster, "--timeout=6m")
	instance := names.Instance(inPlaceCluster, inPlaceBeamline)

	// Data, a whole backup of it, then more data the backup does not hold.
	written := runClientsIn(t, inPlaceNS, []clientRun{{pod: "write-r1", instance: instance, image: tiledImg(), mode: "write", seed: 500}})
	if out, err := kubectlTiled(t, "backup", instance, "-n", inPlaceNS, "--wait"); err != nil {
		t.Fatalf("kubectl tiled backup %s --wait: %v\n%s", instance, err, out)
	}
	var ti *v1alpha1.TiledInstance
	eventually(t, time.Minute, time.Second, instance+" records the backup", func() (bool, string) {
		ti = getInstanceIn(t, inPlaceNS, instance)
		st := ti.Status.Backup
		return st != nil && st.LastSuccessful != nil && len(st.Available) > 0, fmt.Sprintf("%+v", st)
	})
	earlier := ti.Status.Backup.LastSuccessful.Name
	ti0 := getInstanceIn(t, inPlaceNS, instance)
	after := pythonClientPodYAML("after-r1", inPlaceNS, tiledImg(), afterBackupScript, ti0.Status.URL, fleet.NamesOf(ti0).Secret, "3")
	mustKubectl(t, []byte(after), "apply", "--server-side", "-f", "-")
	eventually(t, clientPodTimeout, time.Second, "the writes after the backup", func() (bool, string) {
		logs, _ := kubectl(nil, "-n", inPlaceNS, "logs", "after-r1")
		return strings.Contains(logs, "E2E-OK"), logs
	})
	if logs, _ := kubectl(nil, "-n", inPlaceNS, "logs", "after-r1"); !strings.Contains(logs, "after_backup_2") {
		t.Fatalf("the writes after the backup are not listed:\n%s", logs)
	}
	// Another backup, so that the one restored is not the newest: "latest" is not what is asked.
	if out, err := kubectlTiled(t, "backup", instance, "-n", inPlaceNS, "--wait"); err != nil {
		t.Fatalf("kubectl tiled backup %s --wait: %v\n%s", instance, err, out)
	}
	eventually(t, time.Minute, time.Second, instance+" records the second backup", func() (bool, string) {
		ti = getInstanceIn(t, inPlaceNS, instance)
		return ti.Status.Backup != nil && len(ti.Status.Backup.Available) >= 2, fmt.Sprintf("%+v", ti.Status.Backup)
	})

	// The dry run: what would be replaced, nothing changed.
	before := getInstanceIn(t, inPlaceNS, instance).ResourceVersion
	out, err := kubectlTiled(t, "restore", instance, "-n", inPlaceNS, "--from", earlier, "--dry-run")
	if err != nil || !strings.Contains(out, "Backup:        "+earlier) || !strings.Contains(out, "dry run: nothing was changed") {
		t.Fatalf("kubectl tiled restore --dry-run: %v\n%s", err, out)
	}
	t.Logf("kubectl tiled restore %s --from %s --dry-run:\n%s", instance, earlier, out)
	if rv := getInstanceIn(t, inPlaceNS, instance).ResourceVersion; rv != before {
		t.Errorf("the dry run changed the instance: resourceVersion %s -> %s", before, rv)
	}

	// The restore, timed from the command to its end.
	start := time.Now()
	out, err = kubectlTiled(t, "restore", instance, "-n", inPlaceNS, "--from", earlier, "--wait", "--timeout", "10m")
	took := time.Since(start).Seconds()
	if err != nil {
		t.Fatalf("kubectl tiled restore %s --from %s --wait: %v\n%s", instance, earlier, err, out)
	}
	t.Logf("kubectl tiled restore %s --from %s --wait: %.1f s\n%s", instance, earlier, took, out)
	eventually(t, 3*time.Minute, time.Second, instance+" Ready after the restore", func() (bool, string) {
		cur := getInstanceIn(t, inPlaceNS, instance)
		return isTrue(cur, "Ready") && isTrue(cur, inplace.ConditionRestored), fmt.Sprintf("%+v", cur.Status.InPlaceRestore)
	})
	rec := getInstanceIn(t, inPlaceNS, instance).Status.InPlaceRestore
	if rec.Phase != v1alpha1.InPlaceRestoreSucceeded || rec.Backup != earlier || rec.RequestedBy == "" || rec.PreRestoreBackup == "" || !rec.CacheFlushed {
		t.Errorf("status.inPlaceRestore %+v, want Succeeded from %s with its requester, its pre-restore backup and the managed cache flushed", rec, earlier)
	}
	if n, _ := instanceEvents(t, inPlaceNS, instance, inplace.ReasonRestoredInPlace); n != 1 {
		t.Errorf("%s: %d %s Events, want 1", instance, n, inplace.ReasonRestoredInPlace)
	}

	// As it was then: the data written before the backup, and none written after.
	read := runClientsIn(t, inPlaceNS, []clientRun{{pod: "read-r1", instance: instance, image: tiledImg(), mode: "read", seed: 500}})
	sameData(t, instance, written[instance], read[instance])
	var d clientData
	if err := json.Unmarshal([]byte(read[instance]), &d); err != nil {
		t.Fatal(err)
	}
	for _, k := range d.Keys {
		if strings.HasPrefix(k, "after_backup_") {
			t.Errorf("%s after the restore still lists %s, written after backup %s (keys %v)", instance, k, earlier, d.Keys)
		}
	}
	t.Logf("restore_in_place_seconds %.1f, Tiled stopped %d s", took, rec.DowntimeSeconds)
	figMu.Lock()
	fig.RestoreInPlaceSeconds, fig.RestoreInPlaceDowntimeSeconds = took, float64(rec.DowntimeSeconds)
	figMu.Unlock()
}
