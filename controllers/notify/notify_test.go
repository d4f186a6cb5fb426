package notify

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestDerive(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	closes := at(8 * time.Hour)
	for _, tc := range []struct {
		name  string
		st    tiledv1alpha1.TiledInstanceStatus
		since time.Time
		keys  []string
		sev   []Severity
	}{
		{name: "nothing", keys: nil},
		{name: "pending approval, window closed",
			st:   tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{StatefulSet: "chx", Change: "Spec", ChangeHash: "abc", Approval: tiledv1alpha1.ApprovalRequired, Window: "closed"}, Maintenance: &tiledv1alpha1.MaintenanceStatus{}},
			keys: []string{"approval/abc"}, sev: []Severity{Warning}},
		{name: "approved, waiting for the window: no approval notification",
			st:   tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{ChangeHash: "abc", Approval: tiledv1alpha1.ApprovalApproved}},
			keys: nil},
		{name: "window open with work queued",
			st:   tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{StatefulSet: "chx", Change: "Render", TemplateHash: "t1"}, Maintenance: &tiledv1alpha1.MaintenanceStatus{Open: true, Reason: "InWindow", NextClose: &closes}},
			keys: []string{"window/2026-12-07T16:00:00Z/t1"}, sev: []Severity{Info}},
		{name: "window open, approval required: both",
			st:   tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{ChangeHash: "abc", Approval: tiledv1alpha1.ApprovalRequired}, Maintenance: &tiledv1alpha1.MaintenanceStatus{Open: true, Reason: "InWindow", NextClose: &closes}},
			keys: []string{"approval/abc", "window/2026-12-07T16:00:00Z/abc"}, sev: []Severity{Warning, Info}},
		{name: "window open, nothing queued", st: tiledv1alpha1.TiledInstanceStatus{Maintenance: &tiledv1alpha1.MaintenanceStatus{Open: true, Reason: "InWindow", NextClose: &closes}}},
		{name: "a calendar without windows is always open: no window opens",
			st:   tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{ChangeHash: "abc", Approval: tiledv1alpha1.ApprovalRequired}, Maintenance: &tiledv1alpha1.MaintenanceStatus{Open: true, Reason: "NoWindows", NextClose: &closes}},
			keys: []string{"approval/abc"}},
		{name: "upgrade under way",
			st:   tiledv1alpha1.TiledInstanceStatus{Upgrade: &tiledv1alpha1.UpgradeStatus{Phase: tiledv1alpha1.UpgradeMigrating, StartTime: at(0)}},
			keys: []string{"upgrade/1796630400/started"}, sev: []Severity{Info}},
		{name: "upgrade failed",
			st:   tiledv1alpha1.TiledInstanceStatus{Upgrade: &tiledv1alpha1.UpgradeStatus{Phase: tiledv1alpha1.UpgradeFailed, StartTime: at(0)}, LastMigration: &tiledv1alpha1.MigrationRecord{Result: "RolledBack", StartTime: at(0), CompletionTime: at(time.Hour)}},
			keys: []string{"upgrade/1796630400/started", "upgrade/1796630400/failed"}, sev: []Severity{Info, Error}},
		{name: "upgrade finished",
			st:   tiledv1alpha1.TiledInstanceStatus{LastMigration: &tiledv1alpha1.MigrationRecord{Result: "Succeeded", StartTime: at(0), CompletionTime: at(time.Hour)}},
			keys: []string{"upgrade/1796630400/finished"}, sev: []Severity{Info}},
		{name: "upgrade finished before notifications were configured: not sent",
			st:    tiledv1alpha1.TiledInstanceStatus{LastMigration: &tiledv1alpha1.MigrationRecord{Result: "Succeeded", StartTime: at(0), CompletionTime: at(time.Hour)}},
			since: t0.Add(2 * time.Hour)},
		{name: "backup failed",
			st:   tiledv1alpha1.TiledInstanceStatus{Backup: &tiledv1alpha1.BackupStatus{Last: &tiledv1alpha1.BackupRecord{Name: "20261207T080000Z", Job: "chx-backup-1", Result: "Failed", CompletionTime: at(0)}}},
			keys: []string{"backup/chx-backup-1/failed"}, sev: []Severity{Error}},
		{name: "backup succeeded",
			st: tiledv1alpha1.TiledInstanceStatus{Backup: &tiledv1alpha1.BackupStatus{Last: &tiledv1alpha1.BackupRecord{Job: "j", Result: "Succeeded", CompletionTime: at(0)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Derive(&tc.st, tc.since)
			var keys []string
			var sev []Severity
			for _, n := range got {
				keys, sev = append(keys, n.Key), append(sev, n.Severity)
				g.Expect(n.Text).NotTo(BeEmpty())
			}
			g.Expect(keys).To(Equal(tc.keys))
			if tc.sev != nil {
				g.Expect(sev).To(Equal(tc.sev))
			}
			g.Expect(Derive(&tc.st, tc.since)).To(Equal(got), "stable")
		})
	}
}

func TestUndeliveredAndRecord(t *testing.T) {
	g := NewWithT(t)
	all := []Notification{{Key: "a", Severity: Info}, {Key: "b", Severity: Warning}, {Key: "c", Severity: Error}}
	now := metav1.Now()
	delivered := []tiledv1alpha1.DeliveredNotification{{Key: "b", Time: now}}
	keys := func(ns []Notification) (k []string) {
		for _, n := range ns {
			k = append(k, n.Key)
		}
		return k
	}
	g.Expect(keys(Undelivered(all, delivered, Info))).To(Equal([]string{"a", "c"}))
	g.Expect(keys(Undelivered(all, nil, Warning))).To(Equal([]string{"b", "c"}))
	g.Expect(keys(Undelivered(all, nil, Error))).To(Equal([]string{"c"}))
	g.Expect(ParseSeverity("")).To(Equal(Info))
	g.Expect(ParseSeverity("Warning")).To(Equal(Warning))

	var d []tiledv1alpha1.DeliveredNotification
	for i := range MaxDelivered + 5 {
		d = Record(d, string(rune('A'+i)), now)
	}
	g.Expect(d).To(HaveLen(MaxDelivered))
	g.Expect(d[0].Key).To(Equal(string(rune('A'+5))), "the oldest go")
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int32
		want     time.Duration
	}{{0, 0}, {1, 10 * time.Second}, {2, 20 * time.Second}, {3, 40 * time.Second}, {7, 10 * time.Minute}, {1000, 10 * time.Minute}} {
		NewWithT(t).Expect(Backoff(tc.failures)).To(Equal(tc.want), "failures %d", tc.failures)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://hooks.slack.com/services/T0/B0/SECRET", "https://hooks.slack.com"},
		{"http://user:pw@receiver.ops:8080/hook?token=SECRET", "http://receiver.ops:8080"},
		{"not a url", "<invalid URL>"},
	} {
		NewWithT(t).Expect(Redact(tc.in)).To(Equal(tc.want))
	}
}

func TestDeliver(t *testing.T) {
	g := NewWithT(t)
	var got *http.Request
	var body []byte
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		body, _ = io.ReadAll(r.Body)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	key := []byte("s3cret")
	b, err := Body(Notification{Key: "approval/abc", Kind: KindPendingApproval, Severity: Warning, Text: "waits"}, "ns", "chx", time.Unix(0, 0))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring(`"text":"[Warning] TiledInstance ns/chx: waits"`))
	u := srv.URL + "/hook?token=SECRET"
	g.Expect(Deliver(context.Background(), srv.Client(), u, "approval/abc", key, b)).To(Succeed())
	g.Expect(body).To(Equal(b))
	g.Expect(got.Header.Get(HeaderID)).To(Equal("approval/abc"))
	// The signature a receiver computes: HMAC-SHA256 of the raw body.
	g.Expect(got.Header.Get(HeaderSignature)).To(Equal(Sign(key, b)))
	g.Expect(Sign(key, b)).To(HavePrefix("sha256="))
	g.Expect(Sign(key, b)).NotTo(Equal(Sign([]byte("other"), b)))

	g.Expect(Deliver(context.Background(), srv.Client(), u, "k", nil, b)).To(Succeed())
	g.Expect(got.Header.Get(HeaderSignature)).To(BeEmpty(), "unsigned without a key")

	status = http.StatusInternalServerError
	err = Deliver(context.Background(), srv.Client(), u, "k", key, b)
	g.Expect(err).To(MatchError(ContainSubstring("500")))
	g.Expect(err.Error()).NotTo(ContainSubstring("SECRET"))

	srv.Close()
	err = Deliver(context.Background(), srv.Client(), u, "k", key, b)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).NotTo(ContainSubstring("SECRET"))
	g.Expect(strings.Contains(err.Error(), "/hook")).To(BeFalse())
}
