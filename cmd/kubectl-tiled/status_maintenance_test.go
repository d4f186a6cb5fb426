package main

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// TestMaintenanceText: what `kubectl tiled status` says of an instance's maintenance calendar, open
// or closed, with when that changes (a time to come, or one the status has not caught up with).
func TestMaintenanceText(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	tm := func(s string) *metav1.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return ptr.To(metav1.NewTime(v))
	}
	cases := []struct {
		name string
		m    v1alpha1.MaintenanceStatus
		cell string
		want string
	}{
		{name: "open in a window, closing later", m: v1alpha1.MaintenanceStatus{Open: true, Reason: "InWindow", Message: "in window 0 9 * * 1 (2h, UTC)", NextClose: tm("2026-12-07T11:00:00Z")},
			cell: "open:", want: "in window 0 9 * * 1 (2h, UTC); closes at 2026-12-07T11:00:00Z (in 60m)"},
		{name: "open with no window (exclusions only), never closing within a year", m: v1alpha1.MaintenanceStatus{Open: true, Reason: "NoWindows", Message: "no windows: open but during exclusions"},
			cell: "open:", want: "no windows: open but during exclusions"},
		{name: "closed by an exclusion, opening in days", m: v1alpha1.MaintenanceStatus{Reason: "Excluded", Message: "excluded by run-2027-1", NextOpen: tm("2026-12-10T10:00:00Z")},
			cell: "closed:", want: "excluded by run-2027-1; opens at 2026-12-10T10:00:00Z (in 3d)"},
		{name: "closed, not opening within a year; the reason when there is no message", m: v1alpha1.MaintenanceStatus{Reason: "OutsideWindows"},
			cell: "closed:", want: "OutsideWindows; does not open within a year"},
		{name: "closed, its next opening already past (the status not yet written again)", m: v1alpha1.MaintenanceStatus{Reason: "OutsideWindows", Message: "outside every window", NextOpen: tm("2026-12-07T09:00:00Z")},
			cell: "closed:", want: "outside every window; opens at 2026-12-07T09:00:00Z (60m ago)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := &statusPrinter{now: now}
			g.Expect(maintenanceCell(&tc.m).text).To(Equal(tc.cell))
			g.Expect(p.maintenanceText(&tc.m)).To(Equal(tc.want))
		})
	}
}

// TestStatusApprovalLines: an instance whose change waits for approval says so, with the command
// and the hash; the last approval names the approver.
func TestStatusApprovalLines(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	p := &statusPrinter{w: &b, now: now}
	at := metav1.NewTime(now.Add(-time.Hour))
	p.printInstance(&StatusDocument{Namespace: "nsls2", Instance: &InstanceSummary{Name: "nsls2-chx", Cluster: "nsls2",
		PendingRollout: &v1alpha1.PendingRollout{StatefulSet: "tiled-nsls2-chx", Change: "Upgrade", From: "tiled:0.2.19", To: "tiled:0.2.20",
			Differs: []string{"spec.template.spec.containers[tiled].image"}, DifferCount: 1, ChangeHash: "0a1b2c", Approval: v1alpha1.ApprovalRequired},
		Maintenance:  &v1alpha1.MaintenanceStatus{Open: true, Reason: "InWindow", Message: "in window"},
		LastApproval: &v1alpha1.ApprovalRecord{ChangeHash: "ffee", ApprovedBy: "alice", Time: &at, ThroughWindow: true},
	}})
	out := b.String()
	g.Expect(out).To(ContainSubstring("waiting for approval: Upgrade change of StatefulSet tiled-nsls2-chx"))
	g.Expect(out).To(ContainSubstring("upgrade: from tiled:0.2.19 to tiled:0.2.20 (with its migration)"))
	g.Expect(out).To(ContainSubstring("approval needed: kubectl tiled approve nsls2-chx --hash 0a1b2c"))
	g.Expect(out).To(MatchRegexp(`Maintenance: +open: in window; approval needed`))
	g.Expect(out).To(MatchRegexp(`Last approval: +change ffee by alice at .*, through the window`))
}

// A failing notification webhook is shown (status.notifications); one that delivers is not.
func TestStatusNotificationsLine(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		failures int32
		want     bool
	}{{0, false}, {3, true}} {
		var b strings.Builder
		p := &statusPrinter{w: &b, now: now}
		p.printInstance(&StatusDocument{Namespace: "nsls2", Instance: &InstanceSummary{Name: "nsls2-chx",
			Notifications: &v1alpha1.NotificationStatus{Failures: tc.failures, LastError: "notification approval/0a1b: POST https://hooks.example.org: 500 Internal Server Error"}}})
		if tc.want {
			g.Expect(b.String()).To(MatchRegexp(`Notifications: +failing \(3 in a row, retried with backoff\): notification approval/0a1b: POST https://hooks.example.org: 500`))
		} else {
			g.Expect(b.String()).NotTo(ContainSubstring("Notifications:"))
		}
	}
}
