package backup

import (
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

var t0 = time.Date(2026, 12, 3, 2, 30, 0, 0, time.UTC)

func manifest(name string, bytes int64, available string) string {
	return `{"name":"` + name + `","instance":"b/chx","tiledVersion":"0.2.20","seconds":4,"bytes":` +
		strconv.FormatInt(bytes, 10) + `,"files":[],"available":"` + available + `"}`
}

func instance(b *v1alpha1.BackupSpec, managed bool) *v1alpha1.TiledInstance {
	ti := &v1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "chx"}}
	ti.Spec.Backup = b
	ti.Spec.Tiled = &v1alpha1.TiledServerSpec{Image: "ghcr.io/bluesky/tiled:0.2.20"}
	if managed {
		ti.Spec.Database = &v1alpha1.DatabaseSpec{Managed: &v1alpha1.ManagedDatabase{Image: "postgres:16"}}
	} else {
		ti.Spec.Database = &v1alpha1.DatabaseSpec{External: &v1alpha1.ExternalDatabase{URISecretRef: &v1alpha1.SecretKeyRef{Name: "db"}}}
	}
	return ti
}

var claimTarget = &v1alpha1.BackupSpec{Schedule: "30 2 * * *", Claim: &v1alpha1.BackupClaimTarget{ClaimName: "nfs"}}

const target = "claim:nfs/tiled-backups/b/chx"

func TestStatus(t *testing.T) {
	ok := func(name string, at time.Time, avail string) Job {
		return Job{Name: name, Complete: true, StartTime: at.Add(-5 * time.Second), CompletionTime: at, Message: manifest("N"+name, 100, avail)}
	}
	failed := func(name string, at time.Time, msg string) Job {
		return Job{Name: name, Failed: true, CompletionTime: at, Message: msg}
	}
	for _, tc := range []struct {
		name   string
		prev   *v1alpha1.BackupStatus
		target string
		jobs   []Job
		check  func(g Gomega, st *v1alpha1.BackupStatus)
	}{
		{"nothing: no status", nil, "", nil, func(g Gomega, st *v1alpha1.BackupStatus) { g.Expect(st).To(BeNil()) }},
		{"a target and no Job: the target only", nil, target, nil, func(g Gomega, st *v1alpha1.BackupStatus) {
			g.Expect(st).To(Equal(&v1alpha1.BackupStatus{Target: target}))
		}},
		{"a running Job changes nothing", nil, target, []Job{{Name: "j1"}}, func(g Gomega, st *v1alpha1.BackupStatus) {
			g.Expect(st.Last).To(BeNil())
		}},
		{"a whole backup: last, last successful, available", nil, target, []Job{ok("j1", t0, "Nj1:100,old:90")}, func(g Gomega, st *v1alpha1.BackupStatus) {
			g.Expect(st.Last.Result).To(Equal(ResultSucceeded))
			g.Expect(st.Last.Name).To(Equal("Nj1"))
			g.Expect(st.Last.Bytes).To(Equal(int64(100)))
			g.Expect(st.Last.Seconds).To(Equal(int64(4)))
			g.Expect(st.Last.TiledVersion).To(Equal("0.2.20"))
			g.Expect(st.LastSuccessful).To(Equal(st.Last))
			g.Expect(st.Available).To(Equal([]v1alpha1.AvailableBackup{{Name: "Nj1", Bytes: 100}, {Name: "old", Bytes: 90}}))
		}},
		{"the newest Job wins, whatever the order listed", nil, target, []Job{ok("j2", t0.Add(time.Hour), "Nj2:100"), ok("j1", t0, "Nj1:100")},
			func(g Gomega, st *v1alpha1.BackupStatus) {
				g.Expect(st.Last.Job).To(Equal("j2"))
				g.Expect(st.Available).To(HaveLen(1))
			}},
		{"a failed backup after a whole one: last failed, the whole one kept", nil, target,
			[]Job{ok("j1", t0, "Nj1:100"), failed("j2", t0.Add(time.Hour), "pg_dump of the catalog database failed: connection refused")},
			func(g Gomega, st *v1alpha1.BackupStatus) {
				g.Expect(st.Last.Result).To(Equal(ResultFailed))
				g.Expect(st.Last.Message).To(ContainSubstring("connection refused"))
				g.Expect(st.LastSuccessful.Job).To(Equal("j1"))
				g.Expect(st.Available).To(HaveLen(1))
			}},
		{"a Job already recorded, or older than the record, changes nothing",
			&v1alpha1.BackupStatus{Target: target, Last: &v1alpha1.BackupRecord{Job: "j2", Result: ResultFailed, CompletionTime: metav1.NewTime(t0.Add(time.Hour))}},
			target, []Job{ok("j1", t0, "Nj1:100"), failed("j2", t0.Add(time.Hour), "x")},
			func(g Gomega, st *v1alpha1.BackupStatus) {
				g.Expect(st.Last.Job).To(Equal("j2"))
				g.Expect(st.LastSuccessful).To(BeNil())
			}},
		{"records outlive the Jobs; the restore is kept",
			&v1alpha1.BackupStatus{Target: target, Last: &v1alpha1.BackupRecord{Job: "j9", Result: ResultSucceeded}, Restore: &v1alpha1.RestoreRecord{Backup: "x", Result: ResultRestored}},
			target, nil, func(g Gomega, st *v1alpha1.BackupStatus) {
				g.Expect(st.Last.Job).To(Equal("j9"))
				g.Expect(st.Restore.Backup).To(Equal("x"))
			}},
		{"a failure without a message says so", nil, target, []Job{failed("j1", t0, "")}, func(g Gomega, st *v1alpha1.BackupStatus) {
			g.Expect(st.Last.Message).To(ContainSubstring("without a message"))
		}},
		{"a long message is cut to its end", nil, target, []Job{failed("j1", t0, strings.Repeat("a", 3000)+"THE END")}, func(g Gomega, st *v1alpha1.BackupStatus) {
			g.Expect(len(st.Last.Message)).To(BeNumerically("<=", maxMessage+3))
			g.Expect(st.Last.Message).To(HaveSuffix("THE END"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.check(g, Status(tc.prev, tc.target, tc.jobs))
		})
	}
}

func TestAvailableIsBounded(t *testing.T) {
	g := NewWithT(t)
	var parts []string
	for i := 0; i < 150; i++ {
		parts = append(parts, "n"+strconv.Itoa(i+1)+":1")
	}
	g.Expect(available(strings.Join(parts, ","))).To(HaveLen(MaxAvailable))
	g.Expect(available("")).To(BeEmpty())
	g.Expect(available("bad,a:2")).To(Equal([]v1alpha1.AvailableBackup{{Name: "a", Bytes: 2}}))
}

func TestCondition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ti      *v1alpha1.TiledInstance
		st      *v1alpha1.BackupStatus
		ok      bool
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"external database without a target: none", instance(nil, false), nil, false, "", "", ""},
		{"managed database without a target", instance(nil, true), nil, true, metav1.ConditionFalse, ReasonNoBackupTarget, "TiledInstance b/chx: spec.backup has no target"},
		{"a target, no backup yet, scheduled", instance(claimTarget, true), &v1alpha1.BackupStatus{Target: target}, true, metav1.ConditionUnknown, ReasonNoBackupYet, `the schedule is "30 2 * * *"`},
		{"a target, no schedule", instance(&v1alpha1.BackupSpec{Claim: claimTarget.Claim}, true), nil, true, metav1.ConditionUnknown, ReasonNoBackupYet, "kubectl tiled backup chx"},
		{"suspended", instance(&v1alpha1.BackupSpec{Schedule: "@daily", Suspend: ptr.To(true), Claim: claimTarget.Claim}, true), nil, true, metav1.ConditionUnknown, ReasonNoBackupYet, "suspended"},
		{"a whole backup", instance(claimTarget, true), &v1alpha1.BackupStatus{Last: &v1alpha1.BackupRecord{Name: "20261203T023000Z", Bytes: 5, Result: ResultSucceeded, CompletionTime: metav1.NewTime(t0)}},
			true, metav1.ConditionTrue, ReasonBackedUp, "backup 20261203T023000Z (5 bytes) ended at 2026-12-03T02:30:00Z on " + target},
		{"a failed backup names the Job, the reason and the last whole one", instance(claimTarget, true), &v1alpha1.BackupStatus{
			Last:           &v1alpha1.BackupRecord{Job: "chx-backup-1", Result: ResultFailed, Message: "disk full", CompletionTime: metav1.NewTime(t0)},
			LastSuccessful: &v1alpha1.BackupRecord{Name: "20261202T023000Z", CompletionTime: metav1.NewTime(t0.Add(-24 * time.Hour))}},
			true, metav1.ConditionFalse, ReasonBackupFailed, "backup Job chx-backup-1 failed at 2026-12-03T02:30:00Z: disk full; the last whole backup is 20261202T023000Z"},
		{"an external database with a target is backed up too", instance(claimTarget, false), nil, true, metav1.ConditionUnknown, ReasonNoBackupYet, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, reason, message, ok := Condition("b/chx", tc.ti, tc.st)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(status).To(Equal(tc.status))
			g.Expect(reason).To(Equal(tc.reason))
			g.Expect(message).To(ContainSubstring(tc.message))
		})
	}
}

func TestRestore(t *testing.T) {
	restoring := &v1alpha1.BackupSpec{Claim: claimTarget.Claim, RestoreFrom: "latest"}
	obs := func(b *v1alpha1.BackupSpec, j *Job) RestoreObserved {
		return RestoreObserved{Instance: "b/chx", Spec: instance(b, true), Version: "0.2.20", Job: j, ToolsImage: "postgres:15", Now: t0}
	}
	step := &render.Step{Kind: render.StepBootstrap, Backup: "latest", FromVersion: "0.2.20"}
	for _, tc := range []struct {
		name     string
		o        RestoreObserved
		recorded *v1alpha1.RestoreRecord
		check    func(g Gomega, d RestoreDecision)
	}{
		{"no restoreFrom: nothing", obs(claimTarget, nil), nil, func(g Gomega, d RestoreDecision) { g.Expect(d).To(Equal(RestoreDecision{})) }},
		{"recorded: nothing, whatever the spec says", obs(restoring, nil), &v1alpha1.RestoreRecord{Backup: "x"}, func(g Gomega, d RestoreDecision) {
			g.Expect(d).To(Equal(RestoreDecision{}))
		}},
		{"an instance that already serves: never stopped, Skipped recorded with the reason", func() RestoreObserved {
			o := obs(restoring, nil)
			o.Serving = true
			return o
		}(), nil, func(g Gomega, d RestoreDecision) {
			g.Expect(d.Lifecycle).To(BeNil())
			g.Expect(d.Record).To(Equal(&v1alpha1.RestoreRecord{Backup: "latest", Result: ResultSkipped, CompletionTime: metav1.NewTime(t0)}))
			g.Expect(d.Event.Reason).To(Equal("RestoreSkipped"))
			g.Expect(d.Event.Message).To(ContainSubstring("already serves Tiled"))
		}},
		{"serving while the bootstrap Job exists (the cache ahead of the stop): the Job decides", func() RestoreObserved {
			o := obs(restoring, &Job{Name: "j"})
			o.Serving = true
			return o
		}(), nil, func(g Gomega, d RestoreDecision) {
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Record).To(BeNil())
		}},
		{"a pod that could not reach S3: still restoring, saying why the Job runs again", obs(restoring, &Job{Name: "j", Retrying: "s3 did not answer"}), nil, func(g Gomega, d RestoreDecision) {
			g.Expect(d.Lifecycle).To(Equal(&render.Lifecycle{Stopped: true, Step: step, ToolsImage: "postgres:15"}))
			g.Expect(d.Stall).To(BeNil())
			g.Expect(d.Progress.Reason).To(Equal(ReasonRestoring))
			g.Expect(d.Progress.Message).To(ContainSubstring("Job j runs again, its last pod stopped: s3 did not answer"))
		}},
		{"no Job yet: Tiled stopped, the step rendered, progress", obs(restoring, nil), nil, func(g Gomega, d RestoreDecision) {
			g.Expect(d.Lifecycle).To(Equal(&render.Lifecycle{Stopped: true, Step: step, ToolsImage: "postgres:15"}))
			g.Expect(d.Progress.Reason).To(Equal(ReasonRestoring))
			g.Expect(d.Progress.Message).To(ContainSubstring("from backup latest on " + target))
			g.Expect(d.Stall).To(BeNil())
			g.Expect(d.Record).To(BeNil())
		}},
		{"running: the same", obs(restoring, &Job{Name: "j"}), nil, func(g Gomega, d RestoreDecision) {
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Progress).NotTo(BeNil())
		}},
		{"failed: stalled, naming the instance, field, backup and reason; Tiled still stopped", obs(restoring, &Job{Name: "j", Failed: true,
			Message: "backup 20261203T023000Z is corrupt: catalog.dump: FAILED (SHA256SUMS does not match); nothing was restored"}), nil,
			func(g Gomega, d RestoreDecision) {
				g.Expect(d.Lifecycle.Stopped).To(BeTrue())
				g.Expect(d.Stall.Reason).To(Equal(ReasonRestoreFailed))
				g.Expect(d.Stall.Message).To(And(ContainSubstring("TiledInstance b/chx"), ContainSubstring("spec.backup.restoreFrom=latest"),
					ContainSubstring("is corrupt"), ContainSubstring("Tiled is not started")))
				g.Expect(d.Record).To(BeNil())
			}},
		{"restored: recorded with the resolved name and seconds, Tiled starts", obs(restoring, &Job{Name: "j", Complete: true,
			StartTime: t0.Add(-12 * time.Second), CompletionTime: t0, Message: `{"restored":"20261203T023000Z","tiledVersion":"0.2.20","seconds":9}`}), nil,
			func(g Gomega, d RestoreDecision) {
				g.Expect(d.Lifecycle).To(BeNil())
				g.Expect(d.Record).To(Equal(&v1alpha1.RestoreRecord{Backup: "20261203T023000Z", Result: ResultRestored, CompletionTime: metav1.NewTime(t0), Seconds: 12}))
				g.Expect(d.Event.Reason).To(Equal("Restored"))
			}},
		{"skipped: a database holding a catalog is kept, and that is recorded", obs(restoring, &Job{Name: "j", Complete: true, CompletionTime: t0,
			Message: `{"skipped":"20261203T023000Z","tables":12}`}), nil,
			func(g Gomega, d RestoreDecision) {
				g.Expect(d.Record.Result).To(Equal(ResultSkipped))
				g.Expect(d.Event.Reason).To(Equal("RestoreSkipped"))
				g.Expect(d.Event.Message).To(ContainSubstring("already hold a catalog"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.check(g, Restore(tc.o, tc.recorded))
		})
	}
}

// TestUpgradeBackup: the end of an upgrade's backup to the target is recorded as a scheduled
// backup's is: the last backup, the last whole one, the backups its pruning left; a report not yet
// in the cache still names it; a failure is the last backup, the whole one kept; an older one than
// the record changes nothing.
func TestUpgradeBackup(t *testing.T) {
	g := NewWithT(t)
	const name = "20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20"
	at := t0.Add(45 * time.Minute)
	prev := Status(nil, target, []Job{{Name: "chx-backup-1", Complete: true, CompletionTime: t0,
		Message: manifest("20261203T023000Z", 90, "20261203T023000Z:90")}})

	st := UpgradeBackup(prev, target, Job{Name: "chx-backup-3f2a1c", Complete: true, CompletionTime: at,
		Message: manifest(name, 100, name+":100,20261203T023000Z:90")}, name)
	g.Expect(st.Target).To(Equal(target))
	g.Expect(st.Last.Job).To(Equal("chx-backup-3f2a1c"))
	g.Expect(st.Last.Name).To(Equal(name))
	g.Expect(st.Last.Result).To(Equal(ResultSucceeded))
	g.Expect(st.LastSuccessful).To(Equal(st.Last))
	g.Expect(st.Available).To(Equal([]v1alpha1.AvailableBackup{{Name: name, Bytes: 100}, {Name: "20261203T023000Z", Bytes: 90}}))
	g.Expect(prev.Last.Name).To(Equal("20261203T023000Z"), "prev is not changed")

	// The pod's report not in the cache: named all the same, the listing as it was.
	st = UpgradeBackup(prev, target, Job{Name: "chx-backup-3f2a1c", Complete: true, CompletionTime: at}, name)
	g.Expect(st.Last.Name).To(Equal(name))
	g.Expect(st.LastSuccessful.Name).To(Equal(name))
	g.Expect(st.Available).To(Equal(prev.Available))

	// Failed: the last backup, the whole one kept.
	st = UpgradeBackup(prev, target, Job{Name: "chx-backup-3f2a1c", Failed: true, CompletionTime: at, Message: "uploading failed"}, name)
	g.Expect(st.Last.Result).To(Equal(ResultFailed))
	g.Expect(st.Last.Name).To(BeEmpty())
	g.Expect(st.LastSuccessful.Name).To(Equal("20261203T023000Z"))

	// Older than the record: nothing changes; no target and nothing recorded: no status.
	g.Expect(UpgradeBackup(prev, target, Job{Name: "x", Complete: true, CompletionTime: t0.Add(-time.Hour)}, name)).To(Equal(prev))
	g.Expect(UpgradeBackup(nil, "", Job{Name: "x", CompletionTime: at}, name)).To(BeNil())
}
