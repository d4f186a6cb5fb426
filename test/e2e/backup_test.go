//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

const (
	backupNS       = "e2e-backup"
	backupCluster  = "bk"
	backupFacility = "e2e-backup"
	// backupClaim is the facility's backup claim (an NFS export, in a real facility).
	backupClaim = "facility-backups"
	// s3Image is the S3-compatible server hack/images builds (versitygw, posix backend).
	s3Image   = "docker.io/local/versitygw:1.8.0"
	s3Bucket  = "tiled-backups"
	s3Access  = "e2eaccesskey"
	s3Secret  = "e2e-secret-key-0123456789abcdef"
	s3Service = "s3"
	// corruptBackup is a copy of a whole backup with one byte of its catalog dump changed; its
	// name is older than every real one, so "latest" never picks it.
	corruptBackup = "20200101T000000Z"
	// bulkRows go into b1's storage database beside Tiled's tables, so that a dump takes seconds
	// and the backup's and restore's overheads are measured against real work.
	bulkRows = 5000000
)

// backupSetupYAML is the namespace's S3 server (versitygw on an emptyDir, with its bucket made by a
// Job signing with curl), the facility's backup claim and the S3 credentials.
func backupSetupYAML() string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  storageClassName: %[3]s
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 4Gi}}
---
apiVersion: v1
kind: Secret
metadata: {name: s3-credentials, namespace: %[2]s}
stringData:
  AWS_ACCESS_KEY_ID: %[5]s
  AWS_SECRET_ACCESS_KEY: %[6]s
  ROOT_ACCESS_KEY: %[5]s
  ROOT_SECRET_KEY: %[6]s
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[7]s, namespace: %[2]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: s3}}
  template:
    metadata: {labels: {app: s3}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: versitygw
        image: %[4]s
        imagePullPolicy: IfNotPresent
        args: [--port, ":7070", --region, us-east-1, --health, /health, posix, /data]
        envFrom: [{secretRef: {name: s3-credentials}}]
        ports: [{containerPort: 7070}]
        readinessProbe: {httpGet: {path: /health, port: 7070}, periodSeconds: 1}
        volumeMounts: [{name: data, mountPath: /data}]
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: %[7]s, namespace: %[2]s}
spec:
  selector: {app: s3}
  ports: [{port: 7070, targetPort: 7070}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: make-bucket, namespace: %[2]s}
spec:
  backoffLimit: 30
  template:
    spec:
      restartPolicy: OnFailure
      securityContext: {runAsNonRoot: true, runAsUser: 999, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: curl
        image: %[8]s
        command: [sh, -c, 'curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT http://%[7]s:7070/%[9]s']
        envFrom: [{secretRef: {name: s3-credentials}}]
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, backupClaim, backupNS, storageClass, s3Image, s3Access, s3Secret, s3Service, postgresImg, s3Bucket)
}

// backupProfileYAML is the facility's profile: upgradeProfileYAML's settings (Retain), and backups
// keeping two; each beamline names its target in its overrides.
func backupProfileYAML() string {
	p := strings.Replace(upgradeProfileYAML("bk-facility", backupFacility, tiledImg()), "namespace: "+upgradeNS, "namespace: "+backupNS, 1)
	return p + "  backup:\n    retention: {count: 2}\n"
}

// backupBeamline is one beamline of the backup cluster: its target, and its backup overrides.
type backupBeamline struct {
	name, target, restoreFrom, schedule string
}

func backupClusterYAML(beamlines []backupBeamline) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata:
  name: %s
  namespace: %s
spec:
  profileSelector: {matchLabels: {facility: %s}}
  instances:
`, backupCluster, backupNS, backupFacility)
	for _, bl := range beamlines {
		fields := []string{}
		switch bl.target {
		case "claim":
			fields = append(fields, fmt.Sprintf("claim: {claimName: %s}", backupClaim))
		case "s3":
			fields = append(fields, fmt.Sprintf("s3: {endpoint: %q, bucket: %s, credentialsSecret: {name: s3-credentials}}", "http://"+s3Service+":7070", s3Bucket))
		}
		if bl.restoreFrom != "" {
			fields = append(fields, "restoreFrom: "+strconv.Quote(bl.restoreFrom))
		}
		if bl.schedule != "" {
			fields = append(fields, "schedule: "+strconv.Quote(bl.schedule))
		}
		fmt.Fprintf(&b, "  - name: %s\n    overrides:\n      backup: {%s}\n", bl.name, strings.Join(fields, ", "))
	}
	return b.String()
}

// kubectlTiled runs `kubectl tiled ARGS` with the plugin the run script built on PATH, as an admin
// would.
func kubectlTiled(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(e.repo, "bin")
	if _, err := os.Stat(filepath.Join(bin, "kubectl-tiled")); err != nil {
		t.Fatalf("the kubectl plugin was not built (hack/e2e/run.sh builds bin/kubectl-tiled): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"tiled"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// timedInPostgres runs script in the instance's PostgreSQL container and returns the seconds it
// took, measured inside the container (no kubectl overhead).
func timedInPostgres(t *testing.T, n names.Objects, script string) float64 {
	t.Helper()
	out := mustKubectl(t, nil, "-n", backupNS, "exec", n.Postgres+"-0", "-c", "postgres", "--", "sh", "-ec",
		`export PGUSER=`+render.DatabaseUser+`; s=$(date +%s.%N); `+script+`; e=$(date +%s.%N); echo "E2E-SECONDS $s $e"`)
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "E2E-SECONDS" {
			s, _ := strconv.ParseFloat(f[1], 64)
			e, _ := strconv.ParseFloat(f[2], 64)
			return e - s
		}
	}
	t.Fatalf("no timing from the PostgreSQL pod:\n%s", out)
	return 0
}

// expectRefused waits for the instance to stall on restoring the corrupt backup name, and checks
// that the stall names the instance, the field and the file, that its catalog database is empty
// (nothing half restored) and that no Tiled pod runs.
func expectRefused(t *testing.T, instance, name string) {
	t.Helper()
	eventually(t, 5*time.Minute, time.Second, instance+" stalled on the corrupt backup", func() (bool, string) {
		ti := instanceIfAny(t, backupNS, instance)
		if ti == nil {
			return false, "no instance yet"
		}
		c := condition(ti, "Stalled")
		return c != nil && c.Status == "True" && c.Reason == backup.ReasonRestoreFailed && c.ObservedGeneration == ti.Generation, fmt.Sprintf("%+v", c)
	})
	c := condition(getInstanceIn(t, backupNS, instance), "Stalled")
	for _, want := range []string{"TiledInstance " + backupNS + "/" + instance, "spec.backup.restoreFrom=" + name, "is corrupt", "catalog.dump"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the stall does not say %q: %s", want, c.Message)
		}
	}
	n := names.For(backupNS, instance)
	if tables := psql(t, backupNS, n, render.CatalogDatabase, "select count(*) from information_schema.tables where table_schema = 'public'"); tables != "0" {
		t.Errorf("%s's catalog after the refused restore holds %s tables, want 0 (nothing half restored)", instance, tables)
	}
	if pods := serverPodsOf(t, backupNS, instance); len(pods) != 0 {
		t.Errorf("Tiled started on an unrestored database: %d pods", len(pods))
	}
}

// instanceIfAny returns the TiledInstance ns/name, nil while it does not exist (yet).
func instanceIfAny(t *testing.T, ns, name string) *v1alpha1.TiledInstance {
	t.Helper()
	var ti v1alpha1.TiledInstance
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &ti); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatalf("TiledInstance %s/%s: %v", ns, name, err)
	}
	return &ti
}

// podOnClaim is a pod running script (then echo E2E-OK) with the backup claim at /target, as the
// backup Jobs' user.
func podOnClaim(name, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 999, runAsGroup: 999, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: sh
    image: %s
    command: [sh, -ec, %q]
    volumeMounts: [{name: t, mountPath: /target}]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  volumes: [{name: t, persistentVolumeClaim: {claimName: %s}}]
`, name, backupNS, postgresImg, script+" && echo E2E-OK", backupClaim)
}

// bootstrapJob returns the instance's bootstrap (restore) Job for spec.backup.restoreFrom, nil when
// none.
func bootstrapJob(t *testing.T, instance, restoreFrom string) *batchv1.Job {
	var jobs batchv1.JobList
	if err := cl.List(context.Background(), &jobs, client.InNamespace(backupNS),
		client.MatchingLabels{v1alpha1.LabelAppInstance: instance, v1alpha1.LabelStep: string(render.StepBootstrap)}); err != nil {
		t.Fatal(err)
	}
	var newest *batchv1.Job
	for i := range jobs.Items {
		if jobs.Items[i].Annotations[render.AnnotationBackup] != restoreFrom {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&jobs.Items[i].CreationTimestamp) {
			newest = &jobs.Items[i]
		}
	}
	return newest
}

// loseDatabase removes the beamline from the cluster and deletes its database claim (a lost
// database disk); the data claim is kept, retained.
func loseDatabase(t *testing.T, instance string, rest []backupBeamline) {
	t.Helper()
	mustKubectl(t, []byte(backupClusterYAML(rest)), "apply", "--server-side", "-f", "-")
	eventually(t, 3*time.Minute, time.Second, instance+" gone", func() (bool, string) {
		var ti v1alpha1.TiledInstance
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: instance}, &ti)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	n := names.For(backupNS, instance)
	mustKubectl(t, nil, "-n", backupNS, "delete", "pod", n.Postgres+"-0", "--ignore-not-found", "--wait=true")
	mustKubectl(t, nil, "-n", backupNS, "delete", "pvc", n.DatabaseClaim, "--wait=true")
	var pvc corev1.PersistentVolumeClaim
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: n.DataClaim}, &pvc); err != nil {
		t.Fatalf("%s's data claim was not kept: %v", instance, err)
	}
}

// waitRestored waits for the instance's restore to be recorded and the instance Ready, and returns
// the restore's seconds as its Job measured them (dbtool.sh's restoreSeconds: from the database
// answering to the last database restored, checks included), read from the Job's log, which the
// test follows while it runs (the operator prunes the Job once it has recorded the restore).
func waitRestored(t *testing.T, instance, restoreFrom string) float64 {
	t.Helper()
	var (
		mu      sync.Mutex
		logs    strings.Builder
		follows bool
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eventually(t, 8*time.Minute, 200*time.Millisecond, instance+" restored and Ready", func() (bool, string) {
		if j := bootstrapJob(t, instance, restoreFrom); j != nil && !follows {
			follows = true
			go func(job string) {
				for ctx.Err() == nil {
					cmd := exec.CommandContext(ctx, e.kubectl, "-n", backupNS, "logs", "-f", "job/"+job)
					cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
					out, err := cmd.CombinedOutput()
					if err == nil && strings.Contains(string(out), `"restored"`) {
						mu.Lock()
						logs.Write(out)
						mu.Unlock()
						return
					}
					time.Sleep(200 * time.Millisecond) // not started yet
				}
			}(j.Name)
		}
		ti := instanceIfAny(t, backupNS, instance)
		if ti == nil {
			return false, "no instance yet"
		}
		if ti.Spec.Backup == nil || ti.Spec.Backup.RestoreFrom != restoreFrom {
			return false, "the cluster has not given the instance restoreFrom " + restoreFrom + " yet"
		}
		if c := condition(ti, "Stalled"); c != nil && c.Status == "True" && c.ObservedGeneration == ti.Generation &&
			strings.Contains(c.Message, "restoreFrom="+restoreFrom+" ") {
			t.Fatalf("%s stalled: %s: %s", instance, c.Reason, c.Message)
		}
		return ti.Status.Backup != nil && ti.Status.Backup.Restore != nil && isTrue(ti, "Ready"), fmt.Sprintf("%+v", ti.Status.Backup)
	})
	ti := getInstanceIn(t, backupNS, instance)
	if r := ti.Status.Backup.Restore; r.Result != backup.ResultRestored {
		t.Fatalf("%s: status.backup.restore %+v, want Restored", instance, r)
	}
	var report struct {
		Restored       string `json:"restored"`
		RestoreSeconds string `json:"restoreSeconds"`
	}
	eventually(t, 30*time.Second, 200*time.Millisecond, instance+"'s restore Job's log read", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.HasPrefix(l, `{"restored"`) && json.Unmarshal([]byte(l), &report) == nil {
				return true, ""
			}
		}
		return false, logs.String()
	})
	t.Logf("%s's restore Job: %+v", instance, report)
	secs, err := strconv.ParseFloat(report.RestoreSeconds, 64)
	if err != nil || report.Restored != ti.Status.Backup.Restore.Backup {
		t.Fatalf("%s: the restore Job reported %+v; status.backup.restore %+v", instance, report, ti.Status.Backup.Restore)
	}
	return secs
}

// sameData requires the read run's E2E-DATA to equal the write run's.
func sameData(t *testing.T, instance, written, read string) {
	t.Helper()
	var w, r clientData
	if err := json.Unmarshal([]byte(written), &w); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(read), &r); err != nil {
		t.Fatal(err)
	}
	wb, _ := json.Marshal(struct{ A, T, S any }{w.Array, w.Table, w.SQL})
	rb, _ := json.Marshal(struct{ A, T, S any }{r.Array, r.Table, r.SQL})
	if string(wb) != string(rb) {
		t.Errorf("%s after the restore reads %s, wrote %s", instance, rb, wb)
	}
	for _, k := range w.Keys {
		if !strings.Contains(strings.Join(r.Keys, ","), k) {
			t.Errorf("%s after the restore lacks node %s (has %v)", instance, k, r.Keys)
		}
	}
}

// writerScript writes arrays in a loop while a backup runs, and fails on any error.
const writerScript = `
import os, sys, numpy
from tiled.client import from_uri
c = from_uri(os.environ["TILED_URL"], api_key=os.environ["TILED_API_KEY"])
for i in range(int(sys.argv[1])):
    c.write_array(numpy.arange(1000) + i, key="during_backup_%d" % i)
print("E2E-OK")
`

func testBackupRestore(t *testing.T) {
	// Done with the namespace when the case passed: its schedule would go on making backup Jobs
	// beside the later cases (which the node's two cores are for).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("namespace %s is kept for inspection", backupNS)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", backupNS, "--wait=false")
	})
	mustKubectl(t, []byte(namespaceYAML(backupNS)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(backupSetupYAML()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(backupProfileYAML()), "apply", "--server-side", "-f", "-")
	b1, b2 := names.Instance(backupCluster, "b1"), names.Instance(backupCluster, "b2")
	all := []backupBeamline{{name: "b1", target: "claim"}, {name: "b2", target: "s3"}}
	mustKubectl(t, []byte(backupClusterYAML(all)), "apply", "--server-side", "-f", "-")
	eventually(t, 6*time.Minute, 2*time.Second, "b1 and b2 Ready, the bucket made", func() (bool, string) {
		for _, n := range []string{b1, b2} {
			if ti := instanceIfAny(t, backupNS, n); ti == nil || !isTrue(ti, "Ready") {
				return false, n + " not Ready"
			}
		}
		var j batchv1.Job
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: "make-bucket"}, &j); err != nil || j.Status.Succeeded == 0 {
			return false, "bucket Job not succeeded"
		}
		return true, ""
	})
	// The instances' NetworkPolicies are on (the default): the backup Jobs (component backups) and
	// the restores (component lifecycle) below reach the databases under them.
	for _, n := range []string{b1, b2} {
		requireInstancePolicies(t, backupNS, n, "", "-postgres")
	}
	for _, n := range []string{b1, b2} {
		c := condition(getInstanceIn(t, backupNS, n), backup.ConditionBackedUp)
		if c == nil || c.Reason != backup.ReasonNoBackupYet {
			t.Errorf("%s before any backup: BackedUp %+v, want reason %s", n, c, backup.ReasonNoBackupYet)
		}
	}

	// Data: an array, a table, an SQL table (Tiled's client), and bulk rows beside them.
	written := runClientsIn(t, backupNS, []clientRun{
		{pod: "write-b1", instance: b1, image: tiledImg(), mode: "write", seed: 100},
		{pod: "write-b2", instance: b2, image: tiledImg(), mode: "write", seed: 200},
	})
	n1 := names.For(backupNS, b1)
	mustKubectl(t, nil, "-n", backupNS, "exec", n1.Postgres+"-0", "-c", "postgres", "--", "psql", "-U", render.DatabaseUser, "-d", render.StorageDatabase,
		"-v", "ON_ERROR_STOP=1", "-c", fmt.Sprintf("CREATE TABLE e2e_bulk AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, %d) g", bulkRows))

	// A backup on demand while Tiled serves writes: the writes all succeed, the backup is whole.
	writer := pythonClientPodYAML("writer-b1", backupNS, tiledImg(), writerScript, getInstanceIn(t, backupNS, b1).Status.URL, fleet.NamesOf(getInstanceIn(t, backupNS, b1)).Secret, "40")
	mustKubectl(t, []byte(writer), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, 500*time.Millisecond, "the writer writing", func() (bool, string) {
		logs, _ := kubectl(nil, "-n", backupNS, "logs", "writer-b1")
		var p corev1.Pod
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: "writer-b1"}, &p)
		return err == nil && p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + logs
	})
	out, err := kubectlTiled(t, "backup", b1, "-n", backupNS, "--wait")
	if err != nil {
		t.Fatalf("kubectl tiled backup %s --wait (while writes go on): %v\n%s", b1, err, out)
	}
	t.Logf("kubectl tiled backup %s --wait, while a client writes:\n%s", b1, out)
	eventually(t, clientPodTimeout, time.Second, "the writer finished", func() (bool, string) {
		var p corev1.Pod
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: backupNS, Name: "writer-b1"}, &p); err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
	if logs, _ := kubectl(nil, "-n", backupNS, "logs", "writer-b1"); !strings.Contains(logs, "E2E-OK") {
		t.Errorf("writes during the backup failed:\n%s", logs)
	}

	// The figure: a backup on demand with nothing else running, then the same dumps by hand in the
	// database's own container (the floor), side by side, twice; the least of each is kept (the
	// machine's noise only ever adds).
	backupSeconds, floor := math.Inf(1), math.Inf(1)
	for i := 0; i < 2; i++ {
		start := time.Now()
		out, err = kubectlTiled(t, "backup", b1, "-n", backupNS, "--wait")
		took := time.Since(start).Seconds()
		if err != nil {
			t.Fatalf("kubectl tiled backup %s --wait: %v\n%s", b1, err, out)
		}
		f := timedInPostgres(t, n1, `for db in `+render.CatalogDatabase+` `+render.StorageDatabase+` `+render.AuthDatabase+
			`; do pg_dump --format=custom --no-owner --no-privileges --file /tmp/floor-$db.dump --dbname $db; done`)
		t.Logf("kubectl tiled backup %s --wait: %.1f s; by hand %.1f s:\n%s", b1, took, f, out)
		backupSeconds, floor = math.Min(backupSeconds, took), math.Min(floor, f)
	}
	var ti1 *v1alpha1.TiledInstance
	eventually(t, time.Minute, time.Second, b1+" records the backups", func() (bool, string) {
		ti1 = getInstanceIn(t, backupNS, b1)
		st := ti1.Status.Backup
		return st != nil && len(st.Available) == 2 && st.LastSuccessful != nil && st.LastSuccessful.Name == st.Available[0].Name &&
			isTrue(ti1, backup.ConditionBackedUp), fmt.Sprintf("%+v", st)
	})
	whole := ti1.Status.Backup.LastSuccessful
	if whole.Bytes < 1<<20 || !strings.Contains(out, whole.Name) {
		t.Errorf("%s: status.backup %+v; kubectl tiled backup said:\n%s", b1, ti1.Status.Backup, out)
	}
	list, err := kubectlTiled(t, "backups", b1, "-n", backupNS)
	if err != nil || !strings.Contains(list, ti1.Status.Backup.Available[0].Name) || !strings.Contains(list, ti1.Status.Backup.Available[1].Name) {
		t.Errorf("kubectl tiled backups %s: %v\n%s", b1, err, list)
	}
	t.Logf("kubectl tiled backups %s:\n%s", b1, list)
	figMu.Lock()
	fig.BackupSeconds, fig.BackupFloorSeconds, fig.BackupBytes = backupSeconds, floor, whole.Bytes
	fig.BackupRatio = backupSeconds / floor
	figMu.Unlock()
	t.Logf("backup: %.1f s for %d bytes, by hand %.1f s, ratio %.2f", backupSeconds, whole.Bytes, floor, backupSeconds/floor)

	// A corrupt copy of the backup, beside it on the claim.
	dir := "/target/tiled-backups/" + backupNS + "/" + b1
	corrupt := podOnClaim("corrupt", fmt.Sprintf("cp -a %s/%s %s/%s && printf XXXX | dd of=%s/%s/catalog.dump bs=1 seek=200 conv=notrunc",
		dir, whole.Name, dir, corruptBackup, dir, corruptBackup))
	mustKubectl(t, []byte(corrupt), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, time.Second, "the corrupt copy made", func() (bool, string) {
		logs, _ := kubectl(nil, "-n", backupNS, "logs", "corrupt")
		return strings.Contains(logs, "E2E-OK"), logs
	})

	// The database is lost; b1 comes back from the corrupt backup: refused, nothing restored.
	loseDatabase(t, b1, all[1:])
	withB1 := func(restoreFrom, schedule string) []backupBeamline {
		return []backupBeamline{{name: "b1", target: "claim", restoreFrom: restoreFrom, schedule: schedule}, all[1]}
	}
	mustKubectl(t, []byte(backupClusterYAML(withB1(corruptBackup, ""))), "apply", "--server-side", "-f", "-")
	expectRefused(t, b1, corruptBackup)

	// The latest backup: restored, Tiled serves the same data.
	mustKubectl(t, []byte(backupClusterYAML(withB1("latest", ""))), "apply", "--server-side", "-f", "-")
	restoreSeconds := waitRestored(t, b1, "latest")
	if r := getInstanceIn(t, backupNS, b1).Status.Backup.Restore; r.Backup != whole.Name {
		t.Errorf("%s restored %s, want the latest whole backup %s", b1, r.Backup, whole.Name)
	}
	read := runClientsIn(t, backupNS, []clientRun{{pod: "read-b1", instance: b1, image: tiledImg(), mode: "read"}})
	sameData(t, b1, written[b1], read[b1])
	if rows := psql(t, backupNS, n1, render.StorageDatabase, "select count(*) from e2e_bulk"); rows != strconv.Itoa(bulkRows) {
		t.Errorf("%s: %s bulk rows after the restore, want %d", b1, rows, bulkRows)
	}
	if n, _ := instanceEvents(t, backupNS, b1, "Restored"); n != 1 {
		t.Errorf("%s: %d Restored Events, want 1", b1, n)
	}
	// The floor: the same dumps restored by hand into new databases.
	timedInPostgres(t, n1, `for db in `+render.CatalogDatabase+` `+render.StorageDatabase+` `+render.AuthDatabase+
		`; do pg_dump --format=custom --file /tmp/floor-$db.dump --dbname $db; createdb floor_$db; done`)
	restoreFloor := timedInPostgres(t, n1, `for db in `+render.CatalogDatabase+` `+render.StorageDatabase+` `+render.AuthDatabase+
		`; do pg_restore --no-owner --no-privileges --dbname floor_$db /tmp/floor-$db.dump; done`)
	figMu.Lock()
	fig.RestoreSeconds, fig.RestoreFloorSeconds, fig.RestoreRatio = restoreSeconds, restoreFloor, restoreSeconds/restoreFloor
	figMu.Unlock()
	t.Logf("restore: %.1f s, by hand %.1f s, ratio %.2f", restoreSeconds, restoreFloor, restoreSeconds/restoreFloor)
	// The bulk rows have served the figures: the scheduled backups below (one a minute until two
	// are whole) and the node's other cases need not pay for them again, each dump a hundred
	// megabytes under the load of four cases. The floor's copies go with them.
	psql(t, backupNS, n1, render.StorageDatabase, "DROP TABLE e2e_bulk")
	timedInPostgres(t, n1, `for db in `+render.CatalogDatabase+` `+render.StorageDatabase+` `+render.AuthDatabase+
		`; do dropdb floor_$db; rm -f /tmp/floor-$db.dump; done`)

	// Scheduled backups fire and the retention (two) prunes; meanwhile, the S3 target.
	mustKubectl(t, []byte(backupClusterYAML(withB1("latest", "* * * * *"))), "apply", "--server-side", "-f", "-")
	scheduledFrom := time.Now()

	out, err = kubectlTiled(t, "backup", b2, "-n", backupNS, "--wait")
	if err != nil {
		t.Fatalf("kubectl tiled backup %s --wait (S3): %v\n%s", b2, err, out)
	}
	var ti2 *v1alpha1.TiledInstance
	eventually(t, time.Minute, time.Second, b2+" records the S3 backup", func() (bool, string) {
		ti2 = getInstanceIn(t, backupNS, b2)
		return ti2.Status.Backup != nil && ti2.Status.Backup.LastSuccessful != nil, fmt.Sprintf("%+v", ti2.Status.Backup)
	})
	if tg := ti2.Status.Backup.Target; !strings.HasPrefix(tg, "s3://"+s3Bucket+"/tiled-backups/"+backupNS+"/"+b2) {
		t.Errorf("%s: status.backup.target %q", b2, tg)
	}
	s3Whole := ti2.Status.Backup.LastSuccessful.Name
	// A corrupt copy in the bucket, put there with curl as any S3 client would.
	s3Dir := s3Bucket + "/tiled-backups/" + backupNS + "/" + b2
	corruptS3 := strings.Replace(podOnClaim("corrupt-s3", fmt.Sprintf(`c() { curl -fsS --aws-sigv4 aws:amz:us-east-1:s3 --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"; }
cd /tmp && for f in catalog.dump storage.dump auth.dump SHA256SUMS manifest.json; do c -o $f http://%[1]s:7070/%[2]s/%[3]s/$f; done
printf XXXX | dd of=catalog.dump bs=1 seek=200 conv=notrunc
for f in catalog.dump storage.dump auth.dump SHA256SUMS manifest.json; do c -T $f http://%[1]s:7070/%[2]s/%[4]s/$f; done`, s3Service, s3Dir, s3Whole, corruptBackup)),
		"    volumeMounts: [{name: t, mountPath: /target}]\n", "    envFrom: [{secretRef: {name: s3-credentials}}]\n    volumeMounts: [{name: tmp, mountPath: /tmp}]\n", 1)
	corruptS3 = strings.Replace(corruptS3, "volumes: [{name: t, persistentVolumeClaim: {claimName: "+backupClaim+"}}]", "volumes: [{name: tmp, emptyDir: {}}]", 1)
	mustKubectl(t, []byte(corruptS3), "apply", "--server-side", "-f", "-")
	eventually(t, 2*time.Minute, time.Second, "the corrupt copy put in the bucket", func() (bool, string) {
		logs, _ := kubectl(nil, "-n", backupNS, "logs", "corrupt-s3")
		return strings.Contains(logs, "E2E-OK"), logs
	})
	loseDatabase(t, b2, withB1("latest", "* * * * *")[:1])
	mustKubectl(t, []byte(backupClusterYAML([]backupBeamline{withB1("latest", "* * * * *")[0], {name: "b2", target: "s3", restoreFrom: corruptBackup}})),
		"apply", "--server-side", "-f", "-")
	expectRefused(t, b2, corruptBackup)
	mustKubectl(t, []byte(backupClusterYAML([]backupBeamline{withB1("latest", "* * * * *")[0], {name: "b2", target: "s3", restoreFrom: "latest"}})),
		"apply", "--server-side", "-f", "-")
	s3Restore := waitRestored(t, b2, "latest")
	if r := getInstanceIn(t, backupNS, b2).Status.Backup.Restore; r.Backup != s3Whole {
		t.Errorf("%s restored %s from S3, want %s", b2, r.Backup, s3Whole)
	}
	read = runClientsIn(t, backupNS, []clientRun{{pod: "read-b2", instance: b2, image: tiledImg(), mode: "read"}})
	sameData(t, b2, written[b2], read[b2])
	t.Logf("S3: restore %.1f s", s3Restore)
	figMu.Lock()
	fig.S3RestoreSeconds = s3Restore
	figMu.Unlock()

	// Two scheduled backups whole: the retention keeps the two newest, on the claim too.
	eventually(t, 5*time.Minute, 2*time.Second, "two scheduled backups of "+b1, func() (bool, string) {
		var jobs batchv1.JobList
		if err := cl.List(context.Background(), &jobs, client.InNamespace(backupNS), client.MatchingLabels{
			v1alpha1.LabelAppInstance: b1, v1alpha1.LabelStep: render.LabelStepScheduledBackup}); err != nil {
			return false, err.Error()
		}
		done := 0
		for _, j := range jobs.Items {
			if j.Annotations["cronjob.kubernetes.io/instantiate"] != "manual" && j.Status.Succeeded > 0 && j.CreationTimestamp.After(scheduledFrom) {
				done++
			}
		}
		st := getInstanceIn(t, backupNS, b1).Status.Backup
		return done >= 2 && st != nil && st.Last != nil && st.Last.CompletionTime.After(scheduledFrom.Add(time.Minute)), fmt.Sprintf("%d scheduled done", done)
	})
	mustKubectl(t, []byte(backupClusterYAML([]backupBeamline{withB1("latest", "")[0], {name: "b2", target: "s3", restoreFrom: "latest"}})),
		"apply", "--server-side", "-f", "-")
	st := getInstanceIn(t, backupNS, b1).Status.Backup
	if len(st.Available) != 2 || st.Available[0].Name != st.LastSuccessful.Name {
		t.Errorf("%s after scheduled backups: available %+v, last whole %s; want the two newest", b1, st.Available, st.LastSuccessful.Name)
	}
	for _, a := range st.Available {
		if a.Name == whole.Name || a.Name == corruptBackup {
			t.Errorf("%s: backup %s was not pruned (retention count 2)", b1, a.Name)
		}
	}
	lister := podOnClaim("list-backups", "ls -A "+dir)
	mustKubectl(t, []byte(lister), "apply", "--server-side", "-f", "-")
	var logs string
	eventually(t, 2*time.Minute, time.Second, "the claim listed", func() (bool, string) {
		logs, _ = kubectl(nil, "-n", backupNS, "logs", "list-backups")
		return strings.Contains(logs, "E2E-OK"), logs
	})
	var onClaim []string
	for _, l := range strings.Fields(logs) {
		if l != "E2E-OK" {
			onClaim = append(onClaim, l)
		}
	}
	if len(onClaim) != 2 || !strings.Contains(logs, st.Available[0].Name) || !strings.Contains(logs, st.Available[1].Name) {
		t.Errorf("the claim holds %v for %s, want the two available backups %+v", onClaim, b1, st.Available)
	}
}
