package inplace

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
	"github.com/bluesky/tiled-operator/render"
)

var t0 = time.Date(2026, 12, 7, 9, 30, 0, 0, time.UTC)

const (
	target = "claim:nfs/tiled-backups/b/chx"
	older  = "20261203T023000Z"
	image  = "ghcr.io/bluesky/tiled:0.2.20"
)

func observed() Observed {
	return Observed{
		Instance: "b/chx", Name: "chx", Target: target, Version: "0.2.20", ServingImage: image, ToolsImage: "postgres:16",
		Available: []v1alpha1.AvailableBackup{{Name: "20261204T023000Z", Bytes: 10}, {Name: older, Bytes: 9}},
		Now:       t0,
	}
}

func request(id string) *Request { return &Request{ID: id, Backup: older, RequestedBy: "alice"} }

// at is status st in phase p, as accepted at t0.
func at(p v1alpha1.InPlaceRestorePhase, mod ...func(*v1alpha1.InPlaceRestoreStatus)) *v1alpha1.InPlaceRestoreStatus {
	start := metav1.NewTime(t0.Add(-time.Minute))
	st := &v1alpha1.InPlaceRestoreStatus{Request: "r1", Backup: older, RequestedBy: "alice", Target: target, Phase: p,
		PreRestoreBackup: "20261207T092900Z-pre-restore", StartTime: start, PhaseTime: &start}
	if p != v1alpha1.InPlaceRestoreBackingUp {
		stop := metav1.NewTime(t0.Add(-40 * time.Second))
		st.StopTime = &stop
	}
	for _, m := range mod {
		m(st)
	}
	return st
}

func TestRequestOf(t *testing.T) {
	g := NewWithT(t)
	g.Expect(RequestOf(nil)).To(BeNil())
	g.Expect(RequestOf(map[string]string{v1alpha1.AnnotationRestoreRequest: "x"})).To(BeNil(), "no backup: no request")
	g.Expect(RequestOf(map[string]string{v1alpha1.AnnotationRestore: older})).To(Equal(&Request{ID: older, Backup: older}), "the backup is the id")
	g.Expect(RequestOf(map[string]string{v1alpha1.AnnotationRestore: older, v1alpha1.AnnotationRestoreRequest: "r1", v1alpha1.AnnotationRestoreRequestedBy: "alice"})).
		To(Equal(&Request{ID: "r1", Backup: older, RequestedBy: "alice"}))
}

func TestDecide(t *testing.T) {
	done := &upgrade.Job{Complete: true, StartTime: t0.Add(-20 * time.Second), CompletionTime: t0.Add(-8 * time.Second)}
	for _, tc := range []struct {
		name  string
		mod   func(o *Observed)
		check func(g Gomega, d Decision)
	}{
		{"no request, no status: nothing", func(o *Observed) {}, func(g Gomega, d Decision) {
			g.Expect(d).To(Equal(Decision{}))
		}},
		{"a request: accepted, the databases backed up first while Tiled serves, with an Event naming who and what", func(o *Observed) { o.Request = request("r1") }, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeTrue())
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreBackingUp))
			g.Expect(d.Status.Request).To(Equal("r1"))
			g.Expect(d.Status.RequestedBy).To(Equal("alice"))
			g.Expect(d.Status.Target).To(Equal(target))
			g.Expect(d.Status.PreRestoreBackup).To(Equal("20261207T093000Z-pre-restore"))
			g.Expect(d.Lifecycle.Stopped).To(BeFalse())
			g.Expect(d.Lifecycle.SuspendBackups).To(BeTrue())
			g.Expect(d.Lifecycle.ServingImage).To(Equal(image))
			g.Expect(d.Lifecycle.Step).To(Equal(&render.Step{Kind: render.StepBackup, Backup: "20261207T093000Z-pre-restore", FromVersion: "0.2.20", Target: target, Request: "r1", Keep: true}))
			g.Expect(d.Event.Normal).To(BeTrue())
			g.Expect(d.Event.Reason).To(Equal(ReasonRestoreRequested))
			g.Expect(d.Event.Message).To(ContainSubstring("alice asked to restore TiledInstance b/chx from backup " + older))
			g.Expect(d.Condition.Status).To(Equal(metav1.ConditionUnknown))
			g.Expect(d.Progress.Reason).To(Equal(ReasonRestoringInPlace))
		}},
		{"a request while a scheduled backup runs: accepted, its backup waits", func(o *Observed) {
			o.Request, o.ScheduledBackup = request("r1"), "chx-backup-29412345"
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeTrue())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreBackingUp))
			g.Expect(d.Lifecycle.Step).To(BeNil())
			g.Expect(d.Lifecycle.SuspendBackups).To(BeTrue())
			g.Expect(d.Progress.Message).To(ContainSubstring("waiting for the scheduled backup Job chx-backup-29412345"))
			g.Expect(d.Condition.Message).To(Equal(d.Progress.Message))
		}},
		{"refused while an upgrade runs: the object, the field and the reason, nothing changed", func(o *Observed) {
			o.Request, o.Busy = request("r1"), "an upgrade of Tiled 0.2.14 -> 0.2.20 (status.upgrade.phase Migrating)"
		}, func(g Gomega, d Decision) {
			g.Expect(d.Active).To(BeFalse())
			g.Expect(d.Lifecycle).To(BeNil())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreRefused))
			g.Expect(d.Status.CompletionTime).NotTo(BeNil())
			for _, s := range []string{"TiledInstance b/chx", "annotation tiled.blueskyproject.io/restore=" + older, "request r1 by alice", "an upgrade of Tiled", "nothing was changed"} {
				g.Expect(d.Status.Message).To(ContainSubstring(s))
			}
			g.Expect(d.Event).To(Equal(&Event{Reason: ReasonRestoreRefused, Message: d.Status.Message}))
			g.Expect(d.Condition).To(Equal(&Condition{metav1.ConditionFalse, ReasonRestoreRefused, d.Status.Message}))
		}},
		{"refused without a target", func(o *Observed) { o.Request, o.Target = request("r1"), "" }, func(g Gomega, d Decision) {
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreRefused))
			g.Expect(d.Status.Message).To(ContainSubstring("spec.backup names no backup target"))
		}},
		{"refused for a backup the target does not hold", func(o *Observed) {
			o.Request = &Request{ID: "r1", Backup: "20261101T000000Z"}
		}, func(g Gomega, d Decision) {
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreRefused))
			g.Expect(d.Status.Message).To(ContainSubstring("holds no whole backup named 20261101T000000Z"))
			g.Expect(d.Status.Message).To(ContainSubstring("an unnamed requester"))
		}},
		{"a request already recorded is not acted on again", func(o *Observed) {
			o.Request = request("r1")
			o.Status = at(v1alpha1.InPlaceRestoreSucceeded)
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Active).To(BeFalse())
			g.Expect(d.Event).To(BeNil())
		}},
		{"a refused request recorded is not refused again", func(o *Observed) {
			o.Request = request("r1")
			o.Status = at(v1alpha1.InPlaceRestoreRefused)
			o.Busy = "an upgrade"
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Event).To(BeNil())
		}},
		{"a new request while one runs waits for it", func(o *Observed) {
			o.Request = request("r2")
			o.Status = at(v1alpha1.InPlaceRestoreRestoring)
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Status.Request).To(Equal("r1"))
		}},
		{"backing up: the Job runs", func(o *Observed) { o.Status = at(v1alpha1.InPlaceRestoreBackingUp) }, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Lifecycle.Step.Kind).To(Equal(render.StepBackup))
		}},
		{"backing up: waits for a scheduled backup that runs, Tiled serving", func(o *Observed) {
			o.Status, o.ScheduledBackup = at(v1alpha1.InPlaceRestoreBackingUp), "chx-backup-29412345"
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Lifecycle.Step).To(BeNil())
			g.Expect(d.Lifecycle.Stopped).To(BeFalse())
			g.Expect(d.Lifecycle.SuspendBackups).To(BeTrue())
			g.Expect(d.Progress.Message).To(ContainSubstring("waiting for the scheduled backup Job chx-backup-29412345 to end"))
		}},
		{"backing up: a scheduled backup beside the Job already made changes nothing", func(o *Observed) {
			o.Status, o.ScheduledBackup, o.Job = at(v1alpha1.InPlaceRestoreBackingUp), "chx-backup-29412345", &upgrade.Job{}
		}, func(g Gomega, d Decision) {
			g.Expect(d.Lifecycle.Step).NotTo(BeNil())
		}},
		{"backed up: Tiled stops", func(o *Observed) {
			o.Status, o.Job = at(v1alpha1.InPlaceRestoreBackingUp), done
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeTrue())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreStopping))
			g.Expect(d.Status.StopTime.Time).To(Equal(t0))
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Lifecycle.Step).To(BeNil())
			g.Expect(d.Event).To(BeNil())
		}},
		{"the backup failed: nothing restored, Tiled serves, a Warning", func(o *Observed) {
			o.Status, o.Job = at(v1alpha1.InPlaceRestoreBackingUp), &upgrade.Job{Failed: true, Message: "disk full"}
		}, func(g Gomega, d Decision) {
			g.Expect(d.Active).To(BeFalse())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreFailed))
			g.Expect(d.Status.Stopped).To(BeFalse())
			g.Expect(d.Status.Message).To(ContainSubstring("nothing was restored and Tiled serves as before: disk full"))
			g.Expect(d.Event.Normal).To(BeFalse())
			g.Expect(d.Event.Reason).To(Equal(ReasonRestoreFailed))
		}},
		{"stopping: waits for the Tiled pods to go", func(o *Observed) {
			o.Status, o.ServerPods = at(v1alpha1.InPlaceRestoreStopping), 1
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
		}},
		{"stopped: the restore Job, Tiled stopped, the version that serves for a newer backup's refusal", func(o *Observed) {
			o.Status = at(v1alpha1.InPlaceRestoreStopping)
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeTrue())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreRestoring))
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Lifecycle.Step).To(Equal(&render.Step{Kind: render.StepRestore, Backup: older, FromVersion: "0.2.20", Target: target, Request: "r1"}))
		}},
		{"restored: Tiled starts, the restore's seconds recorded", func(o *Observed) {
			o.Status, o.Job = at(v1alpha1.InPlaceRestoreRestoring), done
		}, func(g Gomega, d Decision) {
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreStarting))
			g.Expect(d.Status.RestoreSeconds).To(Equal(int64(12)))
			g.Expect(d.Lifecycle.Stopped).To(BeFalse())
			g.Expect(d.Lifecycle.Step).To(BeNil())
			g.Expect(d.Lifecycle.ServingImage).To(Equal(image))
		}},
		{"restored with a managed streaming cache: emptied before Tiled starts", func(o *Observed) {
			o.Status, o.Job, o.ManagedCache = at(v1alpha1.InPlaceRestoreRestoring), done, true
		}, func(g Gomega, d Decision) {
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreStarting))
			g.Expect(d.FlushCache).To(BeTrue())
			g.Expect(d.Status.CacheFlushed).To(BeTrue())
		}},
		{"restored without a managed cache: nothing to empty", func(o *Observed) {
			o.Status, o.Job = at(v1alpha1.InPlaceRestoreRestoring), done
		}, func(g Gomega, d Decision) {
			g.Expect(d.FlushCache).To(BeFalse())
			g.Expect(d.Status.CacheFlushed).To(BeFalse())
		}},
		{"a refused backup leaves the cache as it is", func(o *Observed) {
			o.Status, o.ManagedCache = at(v1alpha1.InPlaceRestoreRestoring), true
			o.Job = &upgrade.Job{Failed: true, Message: "backup " + older + " not found: no whole backup of that name"}
		}, func(g Gomega, d Decision) {
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreStarting))
			g.Expect(d.FlushCache).To(BeFalse())
		}},
		{"the backup refused before any database was touched: Tiled starts on the databases as they were", func(o *Observed) {
			o.Status = at(v1alpha1.InPlaceRestoreRestoring)
			o.Job = &upgrade.Job{Failed: true, Message: "backup " + older + " is corrupt: catalog.dump: FAILED (SHA256SUMS does not match); nothing was restored"}
		}, func(g Gomega, d Decision) {
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreStarting))
			g.Expect(d.Status.Message).To(ContainSubstring("was not restored, and the databases are as they were"))
			g.Expect(d.Lifecycle.Stopped).To(BeFalse())
			g.Expect(d.Progress.Message).To(ContainSubstring("databases as they were"))
		}},
		{"failed part way: Tiled stays stopped, the instance stalls naming the way back", func(o *Observed) {
			o.Status = at(v1alpha1.InPlaceRestoreRestoring)
			o.Job = &upgrade.Job{Failed: true, Message: "restoring the storage database from backup x failed (it is left as it was): boom"}
		}, func(g Gomega, d Decision) {
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreFailed))
			g.Expect(d.Status.Stopped).To(BeTrue())
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Stall.Reason).To(Equal(ReasonRestoreFailed))
			g.Expect(d.Stall.Message).To(ContainSubstring("kubectl tiled restore chx --from 20261207T092900Z-pre-restore"))
			g.Expect(d.Event.Reason).To(Equal(ReasonRestoreFailed))
		}},
		{"failed part way, later: still stopped and stalled, nothing written", func(o *Observed) {
			o.Status = at(v1alpha1.InPlaceRestoreFailed, func(st *v1alpha1.InPlaceRestoreStatus) { st.Stopped, st.Message = true, "part way" })
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Stall.Message).To(Equal("part way"))
		}},
		{"failed part way, a new request: restored at once, no backup of the partial databases", func(o *Observed) {
			o.Status = at(v1alpha1.InPlaceRestoreFailed, func(st *v1alpha1.InPlaceRestoreStatus) { st.Stopped, st.Message = true, "part way" })
			o.Request = &Request{ID: "r2", Backup: "20261207T092900Z-pre-restore", RequestedBy: "bob"}
			o.Available = append(o.Available, v1alpha1.AvailableBackup{Name: "20261207T092900Z-pre-restore"})
		}, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeTrue())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreRestoring))
			g.Expect(d.Status.PreRestoreBackup).To(BeEmpty())
			g.Expect(d.Status.StopTime.Time).To(Equal(t0.Add(-40 * time.Second)))
			g.Expect(d.Lifecycle.Step.Backup).To(Equal("20261207T092900Z-pre-restore"))
			g.Expect(d.Event.Message).To(ContainSubstring("bob asked"))
		}},
		{"starting: waits for Tiled to be ready", func(o *Observed) { o.Status = at(v1alpha1.InPlaceRestoreStarting) }, func(g Gomega, d Decision) {
			g.Expect(d.Changed).To(BeFalse())
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Lifecycle.Stopped).To(BeFalse())
		}},
		{"ready: Succeeded, the downtime, a Normal Event naming who restored what and the way back", func(o *Observed) {
			o.Status, o.ServerReady = at(v1alpha1.InPlaceRestoreStarting, func(st *v1alpha1.InPlaceRestoreStatus) { st.RestoreSeconds = 12 }), true
		}, func(g Gomega, d Decision) {
			g.Expect(d.Active).To(BeFalse())
			g.Expect(d.Lifecycle).To(BeNil())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreSucceeded))
			g.Expect(d.Status.DowntimeSeconds).To(Equal(int64(40)))
			g.Expect(d.Status.CompletionTime.Time).To(Equal(t0))
			g.Expect(d.Event.Normal).To(BeTrue())
			g.Expect(d.Event.Reason).To(Equal(ReasonRestoredInPlace))
			g.Expect(d.Event.Message).To(ContainSubstring("restored TiledInstance b/chx from backup " + older))
			g.Expect(d.Event.Message).To(ContainSubstring("request r1 by alice"))
			g.Expect(d.Event.Message).To(ContainSubstring("backup 20261207T092900Z-pre-restore"))
			g.Expect(d.Condition.Status).To(Equal(metav1.ConditionTrue))
		}},
		{"ready after a refused backup: Failed, Tiled serves", func(o *Observed) {
			o.Status = at(v1alpha1.InPlaceRestoreStarting, func(st *v1alpha1.InPlaceRestoreStatus) { st.Message = "corrupt" })
			o.ServerReady = true
		}, func(g Gomega, d Decision) {
			g.Expect(d.Active).To(BeFalse())
			g.Expect(d.Status.Phase).To(Equal(v1alpha1.InPlaceRestoreFailed))
			g.Expect(d.Status.Stopped).To(BeFalse())
			g.Expect(d.Status.Message).To(Equal("corrupt; Tiled serves them again"))
			g.Expect(d.Event.Normal).To(BeFalse())
		}},
		{"the target changed under a step: its Job is not rendered, the instance stalls", func(o *Observed) {
			o.Status, o.Target = at(v1alpha1.InPlaceRestoreRestoring), "s3://other/tiled-backups/b/chx"
		}, func(g Gomega, d Decision) {
			g.Expect(d.Active).To(BeTrue())
			g.Expect(d.Lifecycle.Step).To(BeNil())
			g.Expect(d.Lifecycle.Stopped).To(BeTrue())
			g.Expect(d.Stall.Reason).To(Equal(ReasonTargetChanged))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := observed()
			tc.mod(&o)
			tc.check(g, Decide(o))
		})
	}
}

// TestCurrentStep: the controller looks the Job up under the target the request was accepted on.
func TestCurrentStep(t *testing.T) {
	g := NewWithT(t)
	o := observed()
	o.Target = "s3://other"
	g.Expect(CurrentStep(o, nil)).To(BeNil())
	g.Expect(CurrentStep(o, at(v1alpha1.InPlaceRestoreStopping))).To(BeNil())
	g.Expect(CurrentStep(o, at(v1alpha1.InPlaceRestoreRestoring)).Target).To(Equal(target))
}

// TestUntouched: a refused backup is told from a restore that failed part way by dbtool.sh's own
// words: every failure of its restore loop (after the backup is checked) is none of the refusals.
func TestUntouched(t *testing.T) {
	g := NewWithT(t)
	for _, msg := range []string{
		"backup " + older + " not found: /backups/x/manifest.json does not exist (no whole backup of that name on claim:nfs)",
		"backup " + older + " is corrupt: catalog.dump: FAILED (SHA256SUMS does not match); nothing was restored",
		"backup " + older + " was taken with Tiled 0.3.0, newer than this instance's Tiled 0.2.20: ...",
		"cannot list s3://b/p/ at https://s3 (is the bucket there, are the credentials right?)",
	} {
		g.Expect(Untouched(msg, older)).To(BeTrue(), msg)
	}
	for _, msg := range []string{
		"restoring the storage database from backup " + older + " failed (it is left as it was): boom",
		"the database did not answer in 300 s",
		"DeadlineExceeded: Job was active longer than specified deadline",
		"backup 20261101T000000Z not found", // another backup's name: not this restore's check
	} {
		g.Expect(Untouched(msg, older)).To(BeFalse(), msg)
	}
	_, loop, ok := strings.Cut(render.DBTool, "\tfor f in $dumps; do\n\t\tdb=${f%.dump}")
	g.Expect(ok).To(BeTrue(), "dbtool.sh's restore loop")
	loop, _, _ = strings.Cut(loop, "\n}\n")
	g.Expect(loop).To(ContainSubstring(`fail "restoring the $db database`))
	g.Expect(loop).NotTo(ContainSubstring(`fail "backup `))
	g.Expect(loop).NotTo(ContainSubstring(untouched))
}
