//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/tiledversion"
)

const (
	upgradeNS       = "e2e-upgrade"
	upgradeCluster  = "upg"
	upgradeFloor    = "upgfloor"
	upgradeFacility = "e2e-upgrade"
	floorFacility   = "e2e-upgrade-floor"
	// conflictTable is created by hand in u4's catalog database before the upgrade. Tiled 0.2.20's
	// last catalog revision, 917dbbcfc4b1, renames access_tag_principal_scopes_association to
	// access_grants; with access_grants already there it fails with `relation "access_grants" already
	// exists`. Revisions before it have been committed by then (3bc110ce44e9 commits part-way, before
	// a VACUUM), so the database is left half migrated: only the restore of the backup lets 0.2.14
	// serve again.
	conflictTable = "access_grants"
	// floorJob is the migration Job the floor runs by hand.
	floorJob = "floor-migrate"
)

// upgradeBeamlines of the upgrade cluster: u1 plain, u2 with two replicas, u3 held, u4 failing.
var upgradeBeamlines = []string{"u1", "u2", "u3", "u4"}

func oldTiledImg() string { return "docker.io/local/tiled:" + tiledversion.Oldest }

func upgInstance(cluster, b string) string { return names.Instance(cluster, b) }

// upgradeProfileYAML is profileYAML's shape in the upgrade namespace, with its own name, label and
// Tiled image.
func upgradeProfileYAML(name, facility, image string) string {
	return profileYAMLIn(upgradeNS, name, facility, image)
}

// profileYAMLIn is upgradeProfileYAML's profile in namespace ns.
func profileYAMLIn(ns, name, facility, image string) string {
	return fmt.Sprintf(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata:
  name: %s
  namespace: %s
  labels: {facility: %s}
spec:
  priority: 0
  tiled:
    image: %s
    imagePullPolicy: IfNotPresent
    # Small CPU requests, as the first fleet's profile's (fleet_test.go).
    resources:
      requests: {cpu: 10m, memory: 256Mi}
      limits: {memory: 1Gi}
  storage:
    data: {storageClassName: %s, size: 1Gi, accessModes: [ReadWriteOnce]}
    retention: Retain
  database:
    managed:
      image: %s
      storageClassName: %s
      size: 1Gi
      resources:
        requests: {cpu: 10m, memory: 64Mi}
        limits: {memory: 512Mi}
  auth:
    singleUserAPIKey: {}
  streaming:
    managed:
      image: %s
      resources:
        requests: {cpu: 10m, memory: 16Mi}
        limits: {memory: 128Mi}
`, name, ns, facility, image, storageClass, postgresImg, storageClass, cacheImg)
}

// upgradeClusterSpec is a TiledCluster of the upgrade case; its YAML is applied whole each time.
type upgradeClusterSpec struct {
	ns             string // upgradeNS when empty
	name, facility string
	paused         bool
	beamlines      []string
	replicas       map[string]int    // beamline -> tiled.replicas (the data claim then ReadWriteMany)
	hold           map[string]bool   // beamline -> hold
	image          map[string]string // beamline -> tiled.image pinned in its overrides
	tiledExtra     map[string]string // beamline -> more of its tiled overrides, flow YAML ("env: [...]")
	database       map[string]string // beamline -> its database overrides, flow YAML ("managed: {image: x}")
}

func (c upgradeClusterSpec) yaml() string {
	ns := c.ns
	if ns == "" {
		ns = upgradeNS
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata:
  name: %s
  namespace: %s
spec:
  profileSelector: {matchLabels: {facility: %s}}
  paused: %t
  rollout: {maxUnavailable: 1}
  instances:
`, c.name, ns, c.facility, c.paused)
	for _, n := range c.beamlines {
		fmt.Fprintf(&b, "  - name: %s\n", n)
		if c.hold[n] {
			b.WriteString("    hold: true\n")
		}
		var tiled []string
		if r := c.replicas[n]; r > 0 {
			tiled = append(tiled, fmt.Sprintf("replicas: %d", r))
		}
		if img := c.image[n]; img != "" {
			tiled = append(tiled, fmt.Sprintf("image: %q", img))
		}
		if x := c.tiledExtra[n]; x != "" {
			tiled = append(tiled, x)
		}
		db := c.database[n]
		if len(tiled) == 0 && db == "" {
			continue
		}
		b.WriteString("    overrides:\n")
		if len(tiled) > 0 {
			fmt.Fprintf(&b, "      tiled: {%s}\n", strings.Join(tiled, ", "))
		}
		if c.replicas[n] > 1 {
			// Admission refuses more than one replica on a ReadWriteOnce data claim; the node's
			// PersistentVolumes offer ReadWriteMany.
			b.WriteString("      storage: {data: {accessModes: [ReadWriteMany]}}\n")
		}
		if db != "" {
			fmt.Fprintf(&b, "      database: {%s}\n", db)
		}
	}
	return b.String()
}

// upgradeClientScript writes (mode write) or only reads (mode read) an array, a table in a Parquet
// file and a table in SQL storage (an appendable table, appended to twice), and prints what it
// reads as one JSON line, E2E-DATA {...}, so that a read on another Tiled version can be compared
// with it byte for byte. It uses only client API present in Tiled 0.2.14 and 0.2.20.
const upgradeClientScript = `
import json, os, sys
import numpy, pandas, pyarrow
from tiled.client import from_uri
mode, seed = sys.argv[1], int(sys.argv[2])
c = from_uri(os.environ["TILED_URL"], api_key=os.environ["TILED_API_KEY"])
if mode == "write":
    c.write_array(numpy.arange(10) + seed, key="upg_array", metadata={"seed": seed})
    c.write_dataframe(pandas.DataFrame({"x": [seed, seed + 1, seed + 2], "y": ["a", "b", "c"]}), key="upg_table")
    first = pyarrow.Table.from_pydict({"n": [seed, seed + 10], "s": ["one", "two"]})
    sql = c.create_appendable_table(first.schema, key="upg_sql", table_name="upg_rows")
    sql.append_partition(0, first)
    sql.append_partition(0, pyarrow.Table.from_pydict({"n": [seed + 20], "s": ["three"]}))
def rows(df, cols):
    return sorted(list(r) for r in zip(*[df[k].tolist() for k in cols]))
out = {
    "keys": sorted(c),
    "array": [int(v) for v in c["upg_array"].read()],
    "array_metadata": dict(c["upg_array"].metadata),
    "table": rows(c["upg_table"].read(), ["x", "y"]),
    "sql": rows(c["upg_sql"].read(), ["n", "s"]),
}
print("E2E-DATA " + json.dumps(out, sort_keys=True))
print("E2E-OK")
`

// clientRun is one run of the upgrade client pod.
type clientRun struct {
	pod, instance, image, mode string
	seed                       int
}

// runUpgradeClients runs the client pods of the upgrade case's namespace (runClientsIn).
func runUpgradeClients(t *testing.T, runs []clientRun) map[string]string {
	t.Helper()
	return runClientsIn(t, upgradeNS, runs)
}

// runClientsIn runs the client pods (upgradeClientScript) in namespace ns at once, waits for all,
// requires E2E-OK of each and returns, per instance, the E2E-DATA line each printed.
func runClientsIn(t *testing.T, ns string, runs []clientRun) map[string]string {
	t.Helper()
	for _, r := range runs {
		ti := getInstanceIn(t, ns, r.instance)
		_, _ = kubectl(nil, "-n", ns, "delete", "pod", r.pod, "--ignore-not-found", "--wait=true")
		pod := pythonClientPodYAML(r.pod, ns, r.image, upgradeClientScript, ti.Status.URL, fleet.NamesOf(ti).Secret, r.mode, strconv.Itoa(r.seed))
		mustKubectl(t, []byte(pod), "apply", "--server-side", "-f", "-")
	}
	out := map[string]string{}
	for _, r := range runs {
		var phase corev1.PodPhase
		eventually(t, clientPodTimeout, time.Second, "client pod "+r.pod+" finished", func() (bool, string) {
			var p corev1.Pod
			if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: r.pod}, &p); err != nil {
				return false, err.Error()
			}
			phase = p.Status.Phase
			return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
		})
		logs, _ := kubectl(nil, "-n", ns, "logs", r.pod)
		if phase != corev1.PodSucceeded || !strings.Contains(logs, "E2E-OK") {
			t.Fatalf("client %s (%s, %s) against %s: phase %s\n%s", r.pod, r.mode, r.image, r.instance, phase, logs)
		}
		for _, l := range strings.Split(logs, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "E2E-DATA "); ok {
				out[r.instance] = s
			}
		}
		if out[r.instance] == "" {
			t.Fatalf("client %s printed no E2E-DATA line:\n%s", r.pod, logs)
		}
		_, _ = kubectl(nil, "-n", ns, "delete", "pod", r.pod, "--wait=false")
	}
	return out
}

// clientData is the E2E-DATA line parsed.
type clientData struct {
	Keys  []string `json:"keys"`
	Array []int    `json:"array"`
	Table [][]any  `json:"table"`
	SQL   [][]any  `json:"sql"`
}

// checkWritten checks that a write run read back what the script writes: the three nodes, ten array
// values and three rows of each table.
func checkWritten(t *testing.T, instance, line string) {
	t.Helper()
	var d clientData
	if err := json.Unmarshal([]byte(line), &d); err != nil {
		t.Fatalf("%s: E2E-DATA %q: %v", instance, line, err)
	}
	if strings.Join(d.Keys, ",") != "upg_array,upg_sql,upg_table" || len(d.Array) != 10 || len(d.Table) != 3 || len(d.SQL) != 3 {
		t.Errorf("%s: written and read back: %s", instance, line)
	}
}

func getInstanceIn(t *testing.T, ns, name string) *v1alpha1.TiledInstance {
	t.Helper()
	var ti v1alpha1.TiledInstance
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &ti); err != nil {
		t.Fatalf("TiledInstance %s/%s: %v", ns, name, err)
	}
	return &ti
}

// serverPodsOf lists the Tiled pods of an instance.
func serverPodsOf(t *testing.T, ns, instance string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.LabelAppInstance: instance, v1alpha1.LabelAppComponent: render.ComponentServer}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func podImage(p *corev1.Pod, container string) string {
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	return ""
}

// readyOn counts the Ready (and not terminating) Tiled pods of an instance running image.
func readyOn(t *testing.T, ns, instance, image string) int {
	n := 0
	for _, p := range serverPodsOf(t, ns, instance) {
		if p.DeletionTimestamp == nil && podReady(&p) && podImage(&p, "tiled") == image {
			n++
		}
	}
	return n
}

func condition(ti *v1alpha1.TiledInstance, typ string) *metav1.Condition {
	return meta.FindStatusCondition(ti.Status.Conditions, typ)
}

func isTrue(ti *v1alpha1.TiledInstance, typ string) bool {
	c := condition(ti, typ)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == ti.Generation
}

// instanceEvents counts the occurrences of Events of reason about the TiledInstance name (a series
// counts as its count) and returns their notes.
func instanceEvents(t *testing.T, ns, name, reason string) (int, []string) {
	t.Helper()
	var evs eventsv1.EventList
	if err := cl.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	var notes []string
	for _, ev := range evs.Items {
		if ev.Regarding.Kind != "TiledInstance" || ev.Regarding.Name != name || ev.Reason != reason {
			continue
		}
		c := int32(1)
		if ev.Series != nil && ev.Series.Count > c {
			c = ev.Series.Count
		}
		if ev.DeprecatedCount > c {
			c = ev.DeprecatedCount
		}
		n += int(c)
		notes = append(notes, ev.Note)
	}
	return n, notes
}

func psql(t *testing.T, ns string, n names.Objects, database, sql string) string {
	t.Helper()
	return strings.TrimSpace(mustKubectl(t, nil, "-n", ns, "exec", n.Postgres+"-0", "-c", "postgres", "--",
		"psql", "-U", render.DatabaseUser, "-d", database, "-v", "ON_ERROR_STOP=1", "-tAc", sql))
}

// checkSQLStorage checks that the appendable table went to SQL storage: the catalog has its node
// with the SQL table mimetype, and the storage database has its three rows.
func checkSQLStorage(t *testing.T, ns, instance string) {
	t.Helper()
	n := fleet.NamesOf(getInstanceIn(t, ns, instance))
	keys := psql(t, ns, n, render.CatalogDatabase,
		"select n.key from nodes n join data_sources d on d.node_id = n.id where d.mimetype = 'application/x-tiled-sql-table'")
	if keys != "upg_sql" {
		t.Errorf("%s: catalog nodes stored as SQL tables: %q, want upg_sql", instance, keys)
	}
	if rows := psql(t, ns, n, render.StorageDatabase, "select count(*) from upg_rows"); rows != "3" {
		t.Errorf("%s: rows in table upg_rows of the storage database: %q, want 3", instance, rows)
	}
}

func testTiledUpgrade(t *testing.T) {
	oldImg, newImg := oldTiledImg(), tiledImg()
	oldV, newV := tiledversion.Oldest, expansion.TiledVersion
	mustKubectl(t, []byte(namespaceYAML(upgradeNS)), "apply", "--server-side", "-f", "-")
	// The watch runs from before the first pod to the end: it times readiness and images of the
	// Tiled pods, sees every container restart of every pod (pods the upgrade replaces included) and
	// the lifecycle Jobs' times, which are gone once the operator deletes the Jobs.
	w := watchUpgrade(t, upgradeNS)
	t.Cleanup(func() {
		w.stop(t)
		if t.Failed() {
			t.Logf("namespace %s is kept for inspection", upgradeNS)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", upgradeNS, "--wait=false")
	})
	inst := func(b string) string { return upgInstance(upgradeCluster, b) }

	// 1. Four beamlines on the oldest supported Tiled; u2 with two replicas.
	mustKubectl(t, []byte(upgradeProfileYAML("upgrade-defaults", upgradeFacility, oldImg)), "apply", "--server-side", "-f", "-")
	tc := upgradeClusterSpec{name: upgradeCluster, facility: upgradeFacility, beamlines: upgradeBeamlines, replicas: map[string]int{"u2": 2}}
	mustKubectl(t, []byte(tc.yaml()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", upgradeNS, "wait", "--for=condition=Ready", "tc/"+upgradeCluster, "--timeout=10m")
	// The instances' NetworkPolicies are on (the default): the check, backup, migrate and restore
	// Jobs below reach the databases under them (<instance>-postgres admits component lifecycle).
	for _, b := range upgradeBeamlines {
		requireInstancePolicies(t, upgradeNS, inst(b), "", "-postgres")
	}
	before := map[string]string{} // instance -> catalog revision on the oldest version
	eventually(t, 2*time.Minute, time.Second, "every instance reports Tiled "+oldV+" and its catalog revision", func() (bool, string) {
		for _, b := range upgradeBeamlines {
			ti := getInstanceIn(t, upgradeNS, inst(b))
			if ti.Status.Version != oldV || ti.Status.Database == nil || ti.Status.Database.CatalogRevision == "" {
				return false, fmt.Sprintf("%s: version %q, database %+v", ti.Name, ti.Status.Version, ti.Status.Database)
			}
			before[ti.Name] = ti.Status.Database.CatalogRevision
		}
		return true, ""
	})
	if n := readyOn(t, upgradeNS, inst("u2"), oldImg); n != 2 {
		t.Fatalf("u2: %d Ready Tiled pods on %s, want 2", n, oldImg)
	}
	t.Logf("on Tiled %s: catalog revisions %v", oldV, before)

	// 2. Data in each instance, written by the old client: an array, a Parquet table, an appendable
	// table in SQL storage.
	var runs []clientRun
	for i, b := range upgradeBeamlines {
		runs = append(runs, clientRun{pod: "client-write-" + b, instance: inst(b), image: oldImg, mode: "write", seed: 100 * (i + 1)})
	}
	written := runUpgradeClients(t, runs)
	for _, b := range upgradeBeamlines {
		checkWritten(t, inst(b), written[inst(b)])
		checkSQLStorage(t, upgradeNS, inst(b))
	}

	// 3. u3 in beamtime: held. u4's catalog gets the table a migration on the way creates.
	tc.hold = map[string]bool{"u3": true}
	mustKubectl(t, []byte(tc.yaml()), "apply", "--server-side", "-f", "-")
	eventually(t, time.Minute, 500*time.Millisecond, "the cluster observed the hold", func() (bool, string) {
		var c v1alpha1.TiledCluster
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: upgradeNS, Name: upgradeCluster}, &c); err != nil {
			return false, err.Error()
		}
		return c.Status.ObservedGeneration == c.Generation, fmt.Sprintf("observed %d of %d", c.Status.ObservedGeneration, c.Generation)
	})
	n4 := fleet.NamesOf(getInstanceIn(t, upgradeNS, inst("u4")))
	psql(t, upgradeNS, n4, render.CatalogDatabase, "CREATE TABLE "+conflictTable+" (id integer)")

	// 4. The watch has run since the start. 5. One change of the profile's image.
	upgradeStart := time.Now()
	mustKubectl(t, []byte(upgradeProfileYAML("upgrade-defaults", upgradeFacility, newImg)), "apply", "--server-side", "-f", "-")
	eventually(t, 15*time.Minute, 2*time.Second, "u1, u2 migrated; u4 failed and undone; u3 held", func() (bool, string) {
		var why []string
		for _, b := range []string{"u1", "u2"} {
			ti := getInstanceIn(t, upgradeNS, inst(b))
			m := ti.Status.LastMigration
			if m != nil && m.Result == upgrade.ResultRolledBack {
				t.Fatalf("%s: the migration was rolled back: %+v; upgrade %+v", b, m, ti.Status.Upgrade)
			}
			if m == nil || m.Result != upgrade.ResultSucceeded || ti.Status.Version != newV || ti.Status.Upgrade != nil || !isTrue(ti, "Ready") {
				why = append(why, fmt.Sprintf("%s: version %q, upgrade %s, lastMigration %s, Ready %+v", b, ti.Status.Version, phaseOf(ti), resultOf(ti), condition(ti, "Ready")))
			}
		}
		ti := getInstanceIn(t, upgradeNS, inst("u4"))
		if m := ti.Status.LastMigration; m != nil && m.Result == upgrade.ResultSucceeded {
			t.Fatalf("u4 migrated in spite of table %s in its catalog: %+v", conflictTable, m)
		}
		st := condition(ti, "Stalled")
		if st == nil || st.Status != metav1.ConditionTrue || st.Reason != upgrade.ReasonMigrationFailed ||
			ti.Status.Upgrade == nil || ti.Status.Upgrade.Phase != v1alpha1.UpgradeFailed || readyOn(t, upgradeNS, ti.Name, oldImg) == 0 {
			why = append(why, fmt.Sprintf("u4: upgrade %s, Stalled %+v, %d Ready pods on %s", phaseOf(ti), st, readyOn(t, upgradeNS, ti.Name, oldImg), oldImg))
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
	upgradeEnd := time.Now()
	t.Logf("u1, u2 migrated and u4 undone %.1fs after the profile changed", upgradeEnd.Sub(upgradeStart).Seconds())

	// 6. What the upgrade left.
	// u3 was held: still the old version, Ready, listed by the cluster; its pods never unready.
	ti3 := getInstanceIn(t, upgradeNS, inst("u3"))
	if ti3.Status.Version != oldV || !isTrue(ti3, "Ready") || ti3.Status.Upgrade != nil || ti3.Status.LastMigration != nil {
		t.Errorf("held u3: version %q, Ready %+v, upgrade %s, lastMigration %s", ti3.Status.Version, condition(ti3, "Ready"), phaseOf(ti3), resultOf(ti3))
	}
	if n := readyOn(t, upgradeNS, ti3.Name, oldImg); n != 1 {
		t.Errorf("held u3: %d Ready Tiled pods on %s, want 1", n, oldImg)
	}
	var c v1alpha1.TiledCluster
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: upgradeNS, Name: upgradeCluster}, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Held) != 1 || c.Status.Held[0].Name != ti3.Name || c.Status.HeldInstances != 1 {
		t.Errorf("cluster status lists held %+v (heldInstances %d), want %s", c.Status.Held, c.Status.HeldInstances, ti3.Name)
	}
	if n, at, which := w.maxWithoutReady([]string{ti3.Name}, upgradeStart, upgradeEnd); n != 0 {
		t.Errorf("held u3 had no Ready Tiled pod at %s (%v)", at.Format(time.RFC3339Nano), which)
	}
	// The budget: at most one of the others without a Ready Tiled pod at any moment.
	budgeted := []string{inst("u1"), inst("u2"), inst("u4")}
	maxOut, at, which := w.maxWithoutReady(budgeted, upgradeStart, upgradeEnd)
	t.Logf("most instances of %v without a Ready Tiled pod at once during the upgrade: %d", budgeted, maxOut)
	if maxOut > 1 {
		t.Errorf("%d instances had no Ready Tiled pod at once at %s (%v); rollout.maxUnavailable is 1", maxOut, at.Format(time.RFC3339Nano), which)
	}
	if mixed, at, imgs := w.mixedReady(inst("u2"), upgradeStart, upgradeEnd); mixed {
		t.Errorf("u2 had Ready Tiled pods of two images at once at %s: %v", at.Format(time.RFC3339Nano), imgs)
	}
	if n := readyOn(t, upgradeNS, inst("u2"), newImg); n != 2 {
		t.Errorf("u2: %d Ready Tiled pods on %s after the upgrade, want 2", n, newImg)
	}
	// u1 and u2: one migration each, recorded and announced once.
	downtime := map[string]float64{}
	for _, b := range []string{"u1", "u2"} {
		ti := getInstanceIn(t, upgradeNS, inst(b))
		checkMigrated(t, w, ti, before[ti.Name], oldV, newV)
		d, ok := w.downtime(ti.Name, newImg, upgradeStart)
		if !ok {
			t.Errorf("%s: the watch saw no Tiled pod on %s Ready", b, newImg)
		}
		downtime[b] = d.Seconds()
		t.Logf("%s: %s -> %s, revision %s -> %s, backup %s; migration %ss, downtime by the operator %ss, by the watch %.1fs",
			b, ti.Status.LastMigration.FromVersion, ti.Status.LastMigration.ToVersion, ti.Status.LastMigration.FromRevision,
			ti.Status.LastMigration.ToRevision, ti.Status.LastMigration.Backup, ti.Status.LastMigration.MigrationSeconds,
			ti.Status.LastMigration.DowntimeSeconds, d.Seconds())
	}
	// u4: the failure is named, the backup restored, the old version serves.
	ti4 := getInstanceIn(t, upgradeNS, inst("u4"))
	st := condition(ti4, "Stalled")
	if st == nil {
		t.Fatalf("u4: no Stalled condition any more: %+v", ti4.Status.Conditions)
	}
	t.Logf("u4: Stalled %s: %s", st.Reason, st.Message)
	if !strings.Contains(st.Message, before[ti4.Name]) {
		t.Errorf("u4: the Stalled message does not name the catalog's revision %s: %q", before[ti4.Name], st.Message)
	}
	if !strings.Contains(st.Message, "already exists") {
		t.Errorf("u4: the Stalled message does not quote the migration's error (relation %q already exists): %q", conflictTable, st.Message)
	}
	if m := ti4.Status.LastMigration; m == nil || m.Result != upgrade.ResultRolledBack || m.Backup == "" {
		t.Errorf("u4: lastMigration %+v, want result %s with its backup", m, upgrade.ResultRolledBack)
	}
	if ti4.Status.Version != oldV {
		t.Errorf("u4: status.version %q after the restore, want %s", ti4.Status.Version, oldV)
	}
	if n, _ := instanceEvents(t, upgradeNS, ti4.Name, upgrade.ReasonMigrationFailed); n != 1 {
		t.Errorf("u4: %d Events %s, want 1", n, upgrade.ReasonMigrationFailed)
	}
	if n, _ := instanceEvents(t, upgradeNS, ti4.Name, upgrade.ReasonMigrated); n != 0 {
		t.Errorf("u4: %d Events %s, want 0", n, upgrade.ReasonMigrated)
	}
	if got := w.jobCount(ti4.Name, string(render.StepMigrate)); got != 1 {
		t.Errorf("u4: %d migrate Jobs, want 1", got)
	}
	if got := w.jobCount(ti4.Name, string(render.StepRestore)); got != 1 {
		t.Errorf("u4: %d restore Jobs, want 1", got)
	}
	// The backups stay on their claim, which no prune removes (retention Retain).
	for _, b := range []string{"u1", "u2", "u4"} {
		ti := getInstanceIn(t, upgradeNS, inst(b))
		var pvc corev1.PersistentVolumeClaim
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: upgradeNS, Name: fleet.NamesOf(ti).BackupClaim}, &pvc)
		if err != nil || pvc.Status.Phase != corev1.ClaimBound || pvc.DeletionTimestamp != nil {
			t.Errorf("%s: backup claim %s after the upgrade: phase %s, deleting %t, %v", b, fleet.NamesOf(ti).BackupClaim, pvc.Status.Phase, pvc.DeletionTimestamp != nil, err)
		}
	}
	// No container restarted, in any pod of the namespace, replaced ones included.
	restartsAtUpgrade, by := w.restartTotal()
	if restartsAtUpgrade != 0 {
		t.Errorf("containers restarted %d times up to the upgrade (goal 0): %v", restartsAtUpgrade, by)
	}
	// The data, read by the new client from u1 and u2, by the old one from u4.
	runs = nil
	for _, b := range []string{"u1", "u2", "u4"} {
		img := newImg
		if b == "u4" {
			img = oldImg
		}
		runs = append(runs, clientRun{pod: "client-read-" + b, instance: inst(b), image: img, mode: "read"})
	}
	for name, got := range runUpgradeClients(t, runs) {
		if got != written[name] {
			t.Errorf("%s: read after the upgrade differs from what was written:\nwritten %s\nread    %s", name, written[name], got)
		}
	}

	// 7. Beamtime over: u3's hold released while u4 is still Stalled. u4 serves its old version again,
	// so it takes nothing from the rollout budget (controllers.instanceReady): u3 migrates too, within
	// the budget, and u4 stays as it is.
	releaseStart := time.Now()
	tc.hold = nil
	mustKubectl(t, []byte(tc.yaml()), "apply", "--server-side", "-f", "-")
	eventually(t, 10*time.Minute, 2*time.Second, "u3 migrated after its hold was released, u4 Stalled meanwhile", func() (bool, string) {
		ti := getInstanceIn(t, upgradeNS, inst("u3"))
		m := ti.Status.LastMigration
		if m != nil && m.Result == upgrade.ResultRolledBack {
			t.Fatalf("u3: the migration was rolled back: %+v; upgrade %+v", m, ti.Status.Upgrade)
		}
		return m != nil && m.Result == upgrade.ResultSucceeded && ti.Status.Version == newV && ti.Status.Upgrade == nil && isTrue(ti, "Ready"),
			fmt.Sprintf("version %q, upgrade %s, lastMigration %s, Ready %+v", ti.Status.Version, phaseOf(ti), resultOf(ti), condition(ti, "Ready"))
	})
	releaseEnd := time.Now()
	ti3 = getInstanceIn(t, upgradeNS, inst("u3"))
	checkMigrated(t, w, ti3, before[ti3.Name], oldV, newV)
	all := []string{inst("u1"), inst("u2"), inst("u3"), inst("u4")}
	if n, at, which := w.maxWithoutReady(all, releaseStart, releaseEnd); n > 1 {
		t.Errorf("%d instances had no Ready Tiled pod at once at %s (%v) after the release; rollout.maxUnavailable is 1", n, at.Format(time.RFC3339Nano), which)
	}
	if n, at, _ := w.maxWithoutReady([]string{inst("u4")}, releaseStart, releaseEnd); n != 0 {
		t.Errorf("u4 (Stalled, serving its old version) had no Ready Tiled pod at %s while u3 upgraded", at.Format(time.RFC3339Nano))
	}
	if ti := getInstanceIn(t, upgradeNS, inst("u4")); ti.Status.Upgrade == nil || ti.Status.Upgrade.Phase != v1alpha1.UpgradeFailed || !isTrue(ti, "Stalled") {
		t.Errorf("u4 after u3's upgrade: upgrade %s, Stalled %+v; want it left Failed", phaseOf(ti), condition(ti, "Stalled"))
	}
	if d, ok := w.downtime(ti3.Name, newImg, releaseStart); ok {
		t.Logf("u3: migration %ss, downtime by the operator %ss, by the watch %.1fs",
			ti3.Status.LastMigration.MigrationSeconds, ti3.Status.LastMigration.DowntimeSeconds, d.Seconds())
	}
	got := runUpgradeClients(t, []clientRun{{pod: "client-read-u3", instance: ti3.Name, image: newImg, mode: "read"}})
	if got[ti3.Name] != written[ti3.Name] {
		t.Errorf("u3: read after the upgrade differs from what was written:\nwritten %s\nread    %s", written[ti3.Name], got[ti3.Name])
	}

	// The remedy the Stalled message names: u4's image set back to the old one. The upgrade is
	// dropped, the old pods serve on as they are, and the cluster is Ready again.
	remedyStart := time.Now()
	tc.image = map[string]string{"u4": oldImg}
	mustKubectl(t, []byte(tc.yaml()), "apply", "--server-side", "-f", "-")
	eventually(t, 5*time.Minute, time.Second, "u4 Ready on "+oldImg+" with its upgrade dropped", func() (bool, string) {
		ti := getInstanceIn(t, upgradeNS, inst("u4"))
		return ti.Status.Upgrade == nil && isTrue(ti, "Ready") && condition(ti, "Stalled") == nil,
			fmt.Sprintf("upgrade %s, Ready %+v, Stalled %+v", phaseOf(ti), condition(ti, "Ready"), condition(ti, "Stalled"))
	})
	mustKubectl(t, nil, "-n", upgradeNS, "wait", "--for=condition=Ready", "tc/"+upgradeCluster, "--timeout=3m")
	if n, at, _ := w.maxWithoutReady([]string{inst("u4")}, remedyStart, time.Now()); n != 0 {
		t.Errorf("u4 had no Ready Tiled pod at %s when its image was set back to the one it serves", at.Format(time.RFC3339Nano))
	}
	if n, _ := instanceEvents(t, upgradeNS, inst("u4"), upgrade.ReasonUpgradeCancelled); n != 1 {
		t.Errorf("u4: %d Events %s after its image was set back, want 1", n, upgrade.ReasonUpgradeCancelled)
	}

	// 8. The floor: the same upgrade by hand, on a paused cluster of one beamline.
	floorSeconds := upgradeFloorRun(t, w, oldImg, newImg)

	// 9. Figures.
	fig.UpgradeDowntimeSeconds = math.Max(downtime["u1"], downtime["u2"])
	fig.UpgradeFloorSeconds = floorSeconds
	if floorSeconds > 0 {
		fig.UpgradeDowntimeRatio = fig.UpgradeDowntimeSeconds / floorSeconds
	}
	fig.MigrationSeconds = 0
	for _, b := range []string{"u1", "u2", "u3"} {
		if m := getInstanceIn(t, upgradeNS, inst(b)).Status.LastMigration; m != nil {
			if s, err := strconv.ParseFloat(m.MigrationSeconds, 64); err == nil {
				fig.MigrationSeconds = math.Max(fig.MigrationSeconds, s)
			} else {
				t.Errorf("%s: lastMigration.migrationSeconds %q: %v", b, m.MigrationSeconds, err)
			}
		}
	}
	fig.UpgradeBackupSeconds = 0
	for _, b := range []string{"u1", "u2", "u3"} {
		for _, j := range w.jobsOf(inst(b), string(render.StepBackup)) {
			if j.complete && !j.start.IsZero() && !j.completion.IsZero() {
				fig.UpgradeBackupSeconds = math.Max(fig.UpgradeBackupSeconds, j.completion.Sub(j.start).Seconds())
			}
		}
	}
	fig.UpgradeRestarts, by = w.restartTotal()
	t.Logf("upgrade figures: downtime %.1fs (u1 %.1fs, u2 %.1fs), floor %.1fs, downtime/floor %.2f, migration %.1fs, backup Job %.0fs, restarts %d",
		fig.UpgradeDowntimeSeconds, downtime["u1"], downtime["u2"], fig.UpgradeFloorSeconds, fig.UpgradeDowntimeRatio,
		fig.MigrationSeconds, fig.UpgradeBackupSeconds, fig.UpgradeRestarts)
	if fig.UpgradeRestarts > restartsAtUpgrade {
		t.Errorf("containers restarted %d times in %s after the upgrade of u1, u2 and u4 (goal 0): %v", fig.UpgradeRestarts-restartsAtUpgrade, upgradeNS, by)
	}
}

// checkMigrated checks an instance the upgrade migrated: its record, one Migrated Event, one
// backup and one migrate Job.
func checkMigrated(t *testing.T, w *upgradeWatch, ti *v1alpha1.TiledInstance, fromRevision, oldV, newV string) {
	t.Helper()
	m := ti.Status.LastMigration
	if m == nil {
		t.Errorf("%s: no lastMigration", ti.Name)
		return
	}
	if m.Result != upgrade.ResultSucceeded || m.FromVersion != oldV || m.ToVersion != newV || m.FromRevision == "" ||
		m.FromRevision == m.ToRevision || m.FromRevision != fromRevision || m.Backup == "" || m.MigrationSeconds == "" || m.DowntimeSeconds == "" {
		t.Errorf("%s: lastMigration %+v; want %s -> %s from revision %s to another, with a backup and durations", ti.Name, m, oldV, newV, fromRevision)
	}
	if ti.Status.Database == nil || ti.Status.Database.CatalogRevision != m.ToRevision {
		t.Errorf("%s: status.database %+v, want catalogRevision %s", ti.Name, ti.Status.Database, m.ToRevision)
	}
	if n, notes := instanceEvents(t, ti.Namespace, ti.Name, upgrade.ReasonMigrated); n != 1 {
		t.Errorf("%s: %d Events %s, want exactly 1: %q", ti.Name, n, upgrade.ReasonMigrated, notes)
	}
	for _, step := range []render.StepKind{render.StepBackup, render.StepMigrate} {
		if got := w.jobCount(ti.Name, string(step)); got != 1 {
			t.Errorf("%s: %d %s Jobs, want 1", ti.Name, got, step)
		}
	}
	if got := w.jobCount(ti.Name, string(render.StepRestore)); got != 0 {
		t.Errorf("%s: %d restore Jobs, want 0", ti.Name, got)
	}
}

func phaseOf(ti *v1alpha1.TiledInstance) string {
	if ti.Status.Upgrade == nil {
		return "none"
	}
	return string(ti.Status.Upgrade.Phase)
}

func resultOf(ti *v1alpha1.TiledInstance) string {
	if ti.Status.LastMigration == nil {
		return "none"
	}
	return ti.Status.LastMigration.Result
}

// upgradeFloorRun is the floor of the upgrade: a second cluster of one beamline on the old image,
// paused, then upgraded by hand the way the operator does it without its checks and backup (Tiled
// stopped, one Job with the new image running the migrate init container's command, the
// StatefulSet on the new image started). It returns the downtime the watch measured, the last old
// pod unready -> the first new pod Ready.
func upgradeFloorRun(t *testing.T, w *upgradeWatch, oldImg, newImg string) float64 {
	t.Helper()
	name := upgInstance(upgradeFloor, "f1")
	mustKubectl(t, []byte(upgradeProfileYAML("upgrade-floor", floorFacility, oldImg)), "apply", "--server-side", "-f", "-")
	fc := upgradeClusterSpec{name: upgradeFloor, facility: floorFacility, beamlines: []string{"f1"}}
	mustKubectl(t, []byte(fc.yaml()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", upgradeNS, "wait", "--for=condition=Ready", "tc/"+upgradeFloor, "--timeout=8m")
	written := runUpgradeClients(t, []clientRun{{pod: "client-write-f1", instance: name, image: oldImg, mode: "write", seed: 900}})
	checkWritten(t, name, written[name])
	fc.paused = true
	mustKubectl(t, []byte(fc.yaml()), "apply", "--server-side", "-f", "-")
	// The operator reads paused from its cache: give it a moment.
	time.Sleep(3 * time.Second)
	n := fleet.NamesOf(getInstanceIn(t, upgradeNS, name))
	var sts appsv1.StatefulSet
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: upgradeNS, Name: n.Tiled}, &sts); err != nil {
		t.Fatal(err)
	}
	ps := sts.Spec.Template.Spec
	initIdx, tiledIdx := -1, -1
	for i, c := range ps.InitContainers {
		if c.Name == "migrate" {
			initIdx = i
		}
	}
	for i, c := range ps.Containers {
		if c.Name == "tiled" {
			tiledIdx = i
		}
	}
	if initIdx < 0 || tiledIdx < 0 {
		t.Fatalf("StatefulSet %s has no init container migrate (%d) or container tiled (%d)", n.Tiled, initIdx, tiledIdx)
	}
	mig := ps.InitContainers[initIdx]
	used := map[string]bool{}
	for _, m := range mig.VolumeMounts {
		used[m.Name] = true
	}
	var vols []corev1.Volume
	for _, v := range ps.Volumes {
		if used[v.Name] {
			vols = append(vols, v)
		}
	}
	// The Job's pods are labelled as the operator labels its upgrade steps' (render.ComponentJob):
	// the instance's NetworkPolicy <instance>-postgres admits the database's port to those only, as
	// it would an administrator's Job run by hand.
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: floorJob, Namespace: upgradeNS},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
				v1alpha1.LabelAppName: render.AppName, v1alpha1.LabelAppInstance: name, v1alpha1.LabelAppComponent: render.ComponentJob,
			}}, Spec: corev1.PodSpec{
				RestartPolicy:                corev1.RestartPolicyNever,
				SecurityContext:              ps.SecurityContext,
				EnableServiceLinks:           ps.EnableServiceLinks,
				AutomountServiceAccountToken: ps.AutomountServiceAccountToken,
				Containers: []corev1.Container{{
					Name: "migrate", Image: newImg, ImagePullPolicy: mig.ImagePullPolicy,
					Command: mig.Command, Args: mig.Args, Env: mig.Env, EnvFrom: mig.EnvFrom, VolumeMounts: mig.VolumeMounts,
					Resources: mig.Resources, SecurityContext: mig.SecurityContext, TerminationMessagePolicy: mig.TerminationMessagePolicy,
				}},
				Volumes: vols,
			}},
		},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
	if err != nil {
		t.Fatal(err)
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	jobYAML, err := yaml.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	writeTemp(t, "upgrade-floor-job.yaml", jobYAML)

	// By hand: stop, migrate, start.
	start := time.Now()
	mustKubectl(t, nil, "-n", upgradeNS, "scale", "statefulset/"+n.Tiled, "--replicas=0")
	eventually(t, 3*time.Minute, 200*time.Millisecond, "the floor's Tiled pods gone", func() (bool, string) {
		p := serverPodsOf(t, upgradeNS, name)
		return len(p) == 0, fmt.Sprintf("%d pods", len(p))
	})
	mustKubectl(t, jobYAML, "apply", "--server-side", "-f", "-")
	eventually(t, 5*time.Minute, 200*time.Millisecond, "the floor's migration Job complete", func() (bool, string) {
		var j batchv1.Job
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: upgradeNS, Name: floorJob}, &j); err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				return true, ""
			case batchv1.JobFailed:
				logs, _ := kubectl(nil, "-n", upgradeNS, "logs", "job/"+floorJob)
				t.Fatalf("the floor's migration Job failed: %s\n%s", c.Message, logs)
			}
		}
		return false, fmt.Sprintf("%+v", j.Status)
	})
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/initContainers/%d/image","value":%q},`+
		`{"op":"replace","path":"/spec/template/spec/containers/%d/image","value":%q},{"op":"replace","path":"/spec/replicas","value":1}]`,
		initIdx, newImg, tiledIdx, newImg)
	mustKubectl(t, nil, "-n", upgradeNS, "patch", "statefulset", n.Tiled, "--type=json", "-p", patch)
	var d time.Duration
	eventually(t, 5*time.Minute, 200*time.Millisecond, "the floor's Tiled pod Ready on "+newImg+" (seen by the watch)", func() (bool, string) {
		var ok bool
		d, ok = w.downtime(name, newImg, start)
		return ok, "not yet"
	})
	t.Logf("floor: stopped, migrated by a Job and started on %s by hand in %.1fs; downtime by the watch %.1fs", newImg, time.Since(start).Seconds(), d.Seconds())
	got := runUpgradeClients(t, []clientRun{{pod: "client-read-f1", instance: name, image: newImg, mode: "read"}})
	if got[name] != written[name] {
		t.Errorf("floor: read after the upgrade by hand differs from what was written:\nwritten %s\nread    %s", written[name], got[name])
	}
	mustKubectl(t, nil, "-n", upgradeNS, "delete", "job", floorJob, "--cascade=background", "--wait=false")
	mustKubectl(t, nil, "-n", upgradeNS, "delete", "tc", upgradeFloor, "--wait=false")
	return d.Seconds()
}

// serverPodState is what the upgrade watch keeps of a Tiled pod.
type serverPodState struct {
	instance, image string
	ready           bool // Ready and not terminating
	terminating     bool // deleted, not yet gone
}

// podTransition is a change of a Tiled pod's state, by this process's clock.
type podTransition struct {
	at    time.Time
	pod   string // name/uid
	state serverPodState
	gone  bool
}

// jobSeen is what the upgrade watch kept of a Job of the upgrade procedure.
type jobSeen struct {
	instance, step    string
	start, completion time.Time
	complete, failed  bool
	name              string
}

// upgradeWatch follows the pods and Jobs of a namespace (list, then watch from the list's
// resourceVersion, resumed where it stopped when the server ends it, listed again after an error):
// the Ready state and image of every Tiled pod as a log of transitions, the highest restart count
// of every container of every pod, and the times of the upgrade's Jobs.
type upgradeWatch struct {
	ns       string
	mu       sync.Mutex
	pods     map[string]serverPodState
	log      []podTransition
	restarts map[string]int32
	jobs     map[string]*jobSeen
	lists    map[string]int
	errs     []string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopped  bool
}

func watchUpgrade(t *testing.T, ns string) *upgradeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &upgradeWatch{ns: ns, pods: map[string]serverPodState{}, restarts: map[string]int32{}, jobs: map[string]*jobSeen{},
		lists: map[string]int{}, cancel: cancel}
	w.wg.Add(2)
	go w.follow(ctx, "pods", func() client.ObjectList { return &corev1.PodList{} }, w.seenPod, w.vanishedPods)
	go w.follow(ctx, "jobs", func() client.ObjectList { return &batchv1.JobList{} }, w.seenJob, func(map[string]bool, time.Time) {})
	return w
}

func objKey(o client.Object) string { return o.GetName() + "/" + string(o.GetUID()) }

func (w *upgradeWatch) follow(ctx context.Context, what string, newList func() client.ObjectList,
	seen func(o client.Object, gone bool, at time.Time), vanished func(present map[string]bool, at time.Time)) {
	defer w.wg.Done()
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			list := newList()
			if err := cl.List(ctx, list, client.InNamespace(w.ns)); err != nil {
				w.note(what, err)
				sleepCtx(ctx, time.Second)
				continue
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				w.note(what, err)
				sleepCtx(ctx, time.Second)
				continue
			}
			at := time.Now()
			present := map[string]bool{}
			for _, it := range items {
				if o, ok := it.(client.Object); ok {
					present[objKey(o)] = true
					seen(o, false, at)
				}
			}
			vanished(present, at)
			rv = list.GetResourceVersion()
			w.mu.Lock()
			w.lists[what]++
			w.mu.Unlock()
		}
		wi, err := cl.Watch(ctx, newList(), &client.ListOptions{Namespace: w.ns,
			Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			w.note(what, err)
			rv = ""
			sleepCtx(ctx, time.Second)
			continue
		}
		rv = w.drain(ctx, wi, rv, seen)
		wi.Stop()
	}
}

// drain hands the watch's events to seen until the watch ends, and returns the resourceVersion to
// resume from ("" to list again).
func (w *upgradeWatch) drain(ctx context.Context, wi watch.Interface, rv string, seen func(o client.Object, gone bool, at time.Time)) string {
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return rv
			}
			switch ev.Type {
			case watch.Error:
				w.note("watch", fmt.Errorf("%v", ev.Object))
				return ""
			case watch.Bookmark:
				if o, ok := ev.Object.(client.Object); ok {
					rv = o.GetResourceVersion()
				}
			case watch.Added, watch.Modified, watch.Deleted:
				if o, ok := ev.Object.(client.Object); ok {
					rv = o.GetResourceVersion()
					seen(o, ev.Type == watch.Deleted, time.Now())
				}
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *upgradeWatch) note(what string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, fmt.Sprintf("%s %s: %v", time.Now().Format(time.RFC3339), what, err))
}

func (w *upgradeWatch) seenPod(o client.Object, gone bool, at time.Time) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		k := objKey(p) + "/" + cs.Name
		if cs.RestartCount > w.restarts[k] {
			w.restarts[k] = cs.RestartCount
		}
	}
	if p.Labels[v1alpha1.LabelAppComponent] != render.ComponentServer {
		return
	}
	st := serverPodState{instance: p.Labels[v1alpha1.LabelAppInstance], image: podImage(p, "tiled"),
		ready: !gone && p.DeletionTimestamp == nil && podReady(p), terminating: p.DeletionTimestamp != nil}
	w.setPod(objKey(p), st, gone, at)
}

// vanishedPods marks the Tiled pods a fresh list no longer has as gone (deleted while no watch ran).
func (w *upgradeWatch) vanishedPods(present map[string]bool, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, st := range w.pods {
		if !present[k] {
			w.setPod(k, st, true, at)
		}
	}
}

// setPod records a transition when the pod's state changed; w.mu is held.
func (w *upgradeWatch) setPod(key string, st serverPodState, gone bool, at time.Time) {
	prev, had := w.pods[key]
	if gone {
		if had {
			delete(w.pods, key)
			w.log = append(w.log, podTransition{at: at, pod: key, state: prev, gone: true})
		}
		return
	}
	if had && prev == st {
		return
	}
	w.pods[key] = st
	w.log = append(w.log, podTransition{at: at, pod: key, state: st})
}

func (w *upgradeWatch) seenJob(o client.Object, gone bool, at time.Time) {
	j, ok := o.(*batchv1.Job)
	if !ok || j.Labels[v1alpha1.LabelStep] == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k := objKey(j)
	js := w.jobs[k]
	if js == nil {
		js = &jobSeen{name: j.Name, instance: j.Labels[v1alpha1.LabelAppInstance], step: j.Labels[v1alpha1.LabelStep]}
		w.jobs[k] = js
	}
	if s := j.Status.StartTime; s != nil {
		js.start = s.Time
	}
	if c := j.Status.CompletionTime; c != nil {
		js.completion = c.Time
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			js.complete = true
		case batchv1.JobFailed:
			js.failed = true
			if js.completion.IsZero() {
				js.completion = c.LastTransitionTime.Time
			}
		}
	}
}

// stop ends the watches; errors they met are logged (they were resumed).
func (w *upgradeWatch) stop(t *testing.T) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 || w.lists["pods"] > 1 || w.lists["jobs"] > 1 {
		t.Logf("upgrade watch: lists %v (1 each unless a watch failed); errors: %v", w.lists, w.errs)
	}
}

// replay calls f after each transition of the Tiled pods, in order, with the number of Ready pods
// per instance and image at that moment.
func (w *upgradeWatch) replay(f func(at time.Time, ready map[string]map[string]int)) {
	w.mu.Lock()
	log := append([]podTransition(nil), w.log...)
	w.mu.Unlock()
	state := map[string]serverPodState{}
	for _, tr := range log {
		if tr.gone {
			delete(state, tr.pod)
		} else {
			state[tr.pod] = tr.state
		}
		ready := map[string]map[string]int{}
		for _, s := range state {
			if !s.ready {
				continue
			}
			if ready[s.instance] == nil {
				ready[s.instance] = map[string]int{}
			}
			ready[s.instance][s.image]++
		}
		f(tr.at, ready)
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// maxWithoutReady is the most of instances that had no Ready Tiled pod at one moment in [from, to],
// when it first happened, and which they were.
func (w *upgradeWatch) maxWithoutReady(instances []string, from, to time.Time) (int, time.Time, []string) {
	most, when := 0, time.Time{}
	var which []string
	var last map[string]map[string]int
	started := false
	eval := func(at time.Time, ready map[string]map[string]int) {
		var out []string
		for _, i := range instances {
			if total(ready[i]) == 0 {
				out = append(out, i)
			}
		}
		if len(out) > most {
			most, when, which = len(out), at, out
		}
	}
	w.replay(func(at time.Time, ready map[string]map[string]int) {
		if at.Before(from) {
			last = ready
			return
		}
		if at.After(to) {
			return
		}
		if !started {
			started = true
			eval(from, last)
		}
		eval(at, ready)
	})
	if !started {
		eval(from, last)
	}
	return most, when, which
}

// mixedReady reports the first moment in [from, to] at which instance had Ready Tiled pods of more
// than one image.
func (w *upgradeWatch) mixedReady(instance string, from, to time.Time) (bool, time.Time, []string) {
	found, when := false, time.Time{}
	var imgs []string
	w.replay(func(at time.Time, ready map[string]map[string]int) {
		if found || at.Before(from) || at.After(to) {
			return
		}
		var on []string
		for img, n := range ready[instance] {
			if n > 0 {
				on = append(on, img)
			}
		}
		if len(on) > 1 {
			sort.Strings(on)
			found, when, imgs = true, at, on
		}
	})
	return found, when, imgs
}

// downtime is, for the first Tiled pod of instance on image Ready after from, how long before it
// the instance had no Ready Tiled pod: from the moment its last Ready pod went unready (or away)
// to that pod Ready; 0 when pods overlapped. ok is false while no such pod has been seen.
func (w *upgradeWatch) downtime(instance, image string, from time.Time) (time.Duration, bool) {
	var zeroSince time.Time
	prev := -1
	var d time.Duration
	done := false
	w.replay(func(at time.Time, ready map[string]map[string]int) {
		if done {
			return
		}
		tot := total(ready[instance])
		if at.Before(from) {
			prev = tot
			return
		}
		if tot == 0 && prev != 0 {
			zeroSince = at
		}
		if ready[instance][image] > 0 {
			if prev == 0 && !zeroSince.IsZero() {
				d = at.Sub(zeroSince)
			}
			done = true
		}
		prev = tot
	})
	return d, done
}

// jobsOf returns the Jobs of step seen for instance.
func (w *upgradeWatch) jobsOf(instance, step string) []jobSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []jobSeen
	for _, j := range w.jobs {
		if j.instance == instance && j.step == step {
			out = append(out, *j)
		}
	}
	return out
}

func (w *upgradeWatch) jobCount(instance, step string) int { return len(w.jobsOf(instance, step)) }

// restartTotal sums the highest restart count seen of every container of every pod.
func (w *upgradeWatch) restartTotal() (int, map[string]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	by := map[string]int32{}
	for k, v := range w.restarts {
		if v > 0 {
			n += int(v)
			by[k] = v
		}
	}
	return n, by
}
