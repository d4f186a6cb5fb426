package catalog

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/backup"
	"github.com/bluesky/tiled-operator/render"
)

var now = time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)

// observed is a serving managed instance with a catalog on claim uid-1 and one whole backup.
func observed() Observed {
	return Observed{
		Instance: "beamlines/csx", Name: "csx", Managed: true,
		ClaimName: "csx-postgres-data", Claim: &Claim{UID: "uid-1"},
		Database:     &v1alpha1.DatabaseStatus{Mode: "Managed", CatalogRevision: "a66028395cab", ClaimUID: "uid-1"},
		Target:       "s3://backups/tiled/beamlines/csx",
		NewestBackup: "20261206T023000Z",
		Version:      "0.2.20", ToolsImage: "postgres:17",
		Now: now,
	}
}

func TestNothingLost(t *testing.T) {
	for name, mod := range map[string]func(*Observed){
		"the same claim":                     func(*Observed) {},
		"a new instance before its catalog":  func(o *Observed) { o.Database = &v1alpha1.DatabaseStatus{Mode: "Managed"} },
		"a new instance without a status":    func(o *Observed) { o.Database = nil },
		"no claim recorded yet (upgrade)":    func(o *Observed) { o.Database.ClaimUID = ""; o.Claim.UID = "uid-2" },
		"an external database":               func(o *Observed) { o.Managed, o.Claim, o.Database.ClaimUID = false, nil, "" },
		"empty reported before any catalog":  func(o *Observed) { o.Database.CatalogRevision, o.EmptyReported = "", true },
		"empty reported after an acceptance": func(o *Observed) { o.Database.CatalogRevision, o.EmptyReported = "", true },
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			o := observed()
			mod(&o)
			d := Decide(o)
			g.Expect(d).To(Equal(Decision{}))
			g.Expect(d.Handled()).To(BeFalse())
		})
	}
}

func TestLossFound(t *testing.T) {
	for name, c := range map[string]struct {
		mod                  func(*Observed)
		reason, newUID       string
		msg                  []string
		policy               v1alpha1.CatalogLostPolicy
		wantStep, wantStable bool
	}{
		"claim replaced": {
			mod: func(o *Observed) { o.Claim.UID = "uid-2" }, reason: LostClaimReplaced, newUID: "uid-2",
			msg: []string{"csx-postgres-data", "UID uid-2, was uid-1", "revision a66028395cab", "20261206T023000Z on s3://backups/tiled/beamlines/csx",
				"onCatalogLost: RestoreLatest", "accept-catalog-loss=uid-2", "Tiled is stopped"},
		},
		"claim gone": {
			mod: func(o *Observed) { o.Claim = nil }, reason: LostClaimDeleted,
			msg: []string{"csx-postgres-data (UID uid-1) was deleted", "once the new claim exists"},
		},
		"claim being deleted": {
			mod: func(o *Observed) { o.Claim.Terminating = true }, reason: LostClaimDeleted,
			msg: []string{"(UID uid-1) was deleted"},
		},
		"database emptied on its claim": {
			mod: func(o *Observed) { o.EmptyReported = true }, reason: LostDatabaseEmpty, newUID: "uid-1",
			msg: []string{"found its catalog database empty, on claim csx-postgres-data"},
		},
		"external database emptied": {
			mod:    func(o *Observed) { o.Managed, o.Claim, o.Database.ClaimUID, o.EmptyReported = false, nil, "", true },
			reason: LostDatabaseEmpty, msg: []string{"(external) catalog database empty", "accept-catalog-loss=true"},
		},
		"no backup": {
			mod: func(o *Observed) { o.Claim.UID, o.NewestBackup = "uid-2", "" }, reason: LostClaimReplaced, newUID: "uid-2",
			policy: v1alpha1.CatalogLostRestoreLatest,
			msg:    []string{"there is no whole backup to restore it from"},
		},
		"RestoreLatest with the new claim": {
			mod: func(o *Observed) { o.Claim.UID = "uid-2" }, reason: LostClaimReplaced, newUID: "uid-2",
			policy: v1alpha1.CatalogLostRestoreLatest, wantStep: true,
		},
		"RestoreLatest before the new claim": {
			mod: func(o *Observed) { o.Claim = nil }, reason: LostClaimDeleted,
			policy: v1alpha1.CatalogLostRestoreLatest, msg: []string{"is restored (spec.backup.onCatalogLost RestoreLatest) once the new database claim exists"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			o := observed()
			o.Policy = c.policy
			c.mod(&o)
			d := Decide(o)
			g.Expect(d.Changed).To(BeTrue())
			g.Expect(d.Handled()).To(BeTrue())
			g.Expect(d.Lost.Reason).To(Equal(c.reason))
			g.Expect(d.Lost.NewClaimUID).To(Equal(c.newUID))
			g.Expect(d.Lost.Revision).To(Equal("a66028395cab"))
			g.Expect(d.Lost.Time.Time).To(Equal(now))
			g.Expect(d.Lifecycle).NotTo(BeNil())
			g.Expect(d.Lifecycle.Stopped).To(BeTrue(), "Tiled is never started on a lost catalog")
			g.Expect(d.Event).NotTo(BeNil())
			g.Expect(d.Event.Warning).To(BeTrue())
			g.Expect(d.Event.Reason).To(Equal(ReasonCatalogLost))
			if c.wantStep {
				g.Expect(d.Lost.Phase).To(Equal(v1alpha1.CatalogLostRestoring))
				g.Expect(d.Lifecycle.Step).To(Equal(&render.Step{Kind: render.StepRecover, Backup: "20261206T023000Z", FromVersion: "0.2.20"}))
				g.Expect(d.Progress.Reason).To(Equal(ReasonRestoringCatalog))
				g.Expect(d.Stall).To(BeNil())
				return
			}
			g.Expect(d.Lost.Phase).To(Equal(v1alpha1.CatalogLostStalled))
			g.Expect(d.Lifecycle.Step).To(BeNil())
			g.Expect(d.Stall.Reason).To(Equal(ReasonCatalogLost))
			g.Expect(d.Stall.Message).To(HavePrefix(d.Event.Message))
			for _, s := range c.msg {
				g.Expect(d.Stall.Message).To(ContainSubstring(s))
			}
		})
	}
}

// A recorded loss is decided again the same way (a restarted operator, any later reconcile): the
// same record, nothing changed, no second Event.
func TestLossRecordedIsStable(t *testing.T) {
	g := NewWithT(t)
	o := observed()
	o.Claim.UID = "uid-2"
	first := Decide(o)
	o.Lost = first.Lost
	o.Now = now.Add(time.Hour)
	again := Decide(o)
	g.Expect(again.Changed).To(BeFalse())
	g.Expect(again.Event).To(BeNil())
	g.Expect(again.Lost).To(Equal(first.Lost))
	g.Expect(again.Stall).To(Equal(first.Stall))
	g.Expect(again.Lifecycle.Stopped).To(BeTrue())

	// The claim made again after it was deleted is named once it exists.
	o = observed()
	o.Claim = nil
	first = Decide(o)
	o.Lost, o.Claim = first.Lost, &Claim{UID: "uid-3"}
	again = Decide(o)
	g.Expect(again.Changed).To(BeTrue())
	g.Expect(again.Event).To(BeNil())
	g.Expect(again.Lost.NewClaimUID).To(Equal("uid-3"))
	g.Expect(again.Lost.Reason).To(Equal(LostClaimDeleted))
	g.Expect(again.Stall.Message).To(ContainSubstring("made again empty (UID uid-3)"))
}

func TestRestoreLatest(t *testing.T) {
	g := NewWithT(t)
	o := observed()
	o.Policy = v1alpha1.CatalogLostRestoreLatest
	o.Claim.UID = "uid-2"
	d := Decide(o)
	g.Expect(d.Lost.Phase).To(Equal(v1alpha1.CatalogLostRestoring))
	o.Lost = d.Lost

	// Running: nothing changes.
	o.Job = &backup.Job{Name: "csx-recover-abc123"}
	d = Decide(o)
	g.Expect(d.Changed).To(BeFalse())
	g.Expect(d.Progress.Reason).To(Equal(ReasonRestoringCatalog))
	g.Expect(d.Lifecycle.Stopped).To(BeTrue())

	// Failed: stalled, Tiled still stopped, the Job kept rendered (not run again).
	o.Job = &backup.Job{Name: "csx-recover-abc123", Failed: true, Message: "backup 20261206T023000Z: checksum mismatch"}
	d = Decide(o)
	g.Expect(d.Changed).To(BeTrue())
	g.Expect(d.Stall.Reason).To(Equal(ReasonCatalogRestoreFailed))
	g.Expect(d.Stall.Message).To(ContainSubstring("checksum mismatch"))
	g.Expect(d.Lost.Message).To(Equal("backup 20261206T023000Z: checksum mismatch"))
	g.Expect(d.Lifecycle.Stopped).To(BeTrue())
	g.Expect(d.Lifecycle.Step).NotTo(BeNil())

	// Complete: restored, Tiled starts (no lifecycle), the record stays until Tiled reports.
	o.Job = &backup.Job{Name: "csx-recover-abc123", Complete: true, Message: `{"restored":"20261206T023000Z"}`}
	d = Decide(o)
	g.Expect(d.Changed).To(BeTrue())
	g.Expect(d.Lost.Phase).To(Equal(v1alpha1.CatalogLostRestored))
	g.Expect(d.Lost.RestoreCompletionTime).To(Equal(&metav1.Time{Time: now}))
	g.Expect(d.Lost.Message).To(BeEmpty())
	g.Expect(d.Lifecycle).To(BeNil())
	g.Expect(d.Stall).To(BeNil())
	g.Expect(d.Progress.Reason).To(Equal(ReasonCatalogRestored))
	g.Expect(d.Handled()).To(BeTrue())
	o.Lost, o.Job = d.Lost, nil

	d = Decide(o)
	g.Expect(d.Changed).To(BeFalse())
	g.Expect(d.Lifecycle).To(BeNil())

	// A Tiled pod started after the restore reports the catalog: the record goes, the new claim is
	// the catalog's.
	o.Reported = "a66028395cab"
	d = Decide(o)
	g.Expect(d.Changed).To(BeTrue())
	g.Expect(d.Lost).To(BeNil())
	g.Expect(d.ClaimUID).To(Equal("uid-2"))
	g.Expect(d.ForgetCatalog).To(BeFalse())
	g.Expect(d.Event).To(Equal(&Event{Reason: ReasonCatalogRestored, Message: "the catalog of beamlines/csx is restored from backup 20261206T023000Z on s3://backups/tiled/beamlines/csx and served again at revision a66028395cab (it was lost at revision a66028395cab)"}))
}

// Setting RestoreLatest on a stalled loss starts the restore.
func TestPolicyChangedAfterTheLoss(t *testing.T) {
	g := NewWithT(t)
	o := observed()
	o.Claim.UID = "uid-2"
	o.Lost = Decide(o).Lost
	o.Policy = v1alpha1.CatalogLostRestoreLatest
	d := Decide(o)
	g.Expect(d.Changed).To(BeTrue())
	g.Expect(d.Lost.Phase).To(Equal(v1alpha1.CatalogLostRestoring))
	g.Expect(d.Lifecycle.Step.Kind).To(Equal(render.StepRecover))
}

func TestAcceptTheLoss(t *testing.T) {
	g := NewWithT(t)
	o := observed()
	o.Claim.UID = "uid-2"
	o.Lost = Decide(o).Lost

	for _, wrong := range []string{"uid-1", "true", "yes"} {
		o.Accept = wrong
		d := Decide(o)
		g.Expect(d.Lost).NotTo(BeNil(), "accepted by %q", wrong)
		g.Expect(d.Lifecycle.Stopped).To(BeTrue())
	}
	o.Accept = "uid-2"
	d := Decide(o)
	g.Expect(d.Lost).To(BeNil())
	g.Expect(d.Lifecycle).To(BeNil())
	g.Expect(d.Changed).To(BeTrue())
	g.Expect(d.ForgetCatalog).To(BeTrue())
	g.Expect(d.ClaimUID).To(Equal("uid-2"))
	g.Expect(d.Event.Reason).To(Equal(ReasonCatalogLossAccepted))
	g.Expect(d.Event.Warning).To(BeFalse())

	// Before the new claim exists there is nothing to accept.
	o = observed()
	o.Claim = nil
	o.Lost = Decide(o).Lost
	o.Accept = "uid-1"
	g.Expect(Decide(o).Lost).NotTo(BeNil())

	// An external database: "true".
	o = observed()
	o.Managed, o.Claim, o.Database.ClaimUID, o.EmptyReported = false, nil, "", true
	o.Lost = Decide(o).Lost
	o.Accept = "true"
	g.Expect(Decide(o).ForgetCatalog).To(BeTrue())
}

func TestRecordClaim(t *testing.T) {
	g := NewWithT(t)
	db := func(rev, uid string) *v1alpha1.DatabaseStatus {
		return &v1alpha1.DatabaseStatus{CatalogRevision: rev, ClaimUID: uid}
	}
	g.Expect(RecordClaim(nil, true, &Claim{UID: "u"})).To(Equal(""))
	g.Expect(RecordClaim(db("", ""), true, &Claim{UID: "u"})).To(Equal(""), "no catalog yet")
	g.Expect(RecordClaim(db("r", ""), true, &Claim{UID: "u"})).To(Equal("u"), "the first migrate, or an upgraded operator")
	g.Expect(RecordClaim(db("r", "old"), true, &Claim{UID: "u"})).To(Equal("old"), "recorded once")
	g.Expect(RecordClaim(db("r", ""), false, nil)).To(Equal(""), "external")
	g.Expect(RecordClaim(db("r", ""), true, nil)).To(Equal(""), "no claim in the cache")
	g.Expect(RecordClaim(db("r", ""), true, &Claim{UID: "u", Terminating: true})).To(Equal(""), "a claim being deleted")
}

func TestNewestBackup(t *testing.T) {
	g := NewWithT(t)
	g.Expect(NewestBackup(nil)).To(Equal(""))
	g.Expect(NewestBackup(&v1alpha1.BackupStatus{LastSuccessful: &v1alpha1.BackupRecord{Name: "b1"}})).To(Equal("b1"))
	g.Expect(NewestBackup(&v1alpha1.BackupStatus{LastSuccessful: &v1alpha1.BackupRecord{Name: "b1"},
		Available: []v1alpha1.AvailableBackup{{Name: "b2"}, {Name: "b1"}}})).To(Equal("b2"))
}
