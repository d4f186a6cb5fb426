package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestMaintenanceAt(t *testing.T) {
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC) // a Monday
	instance := func(m *tiledv1alpha1.MaintenanceSpec) *tiledv1alpha1.TiledInstance {
		ti := &tiledv1alpha1.TiledInstance{}
		ti.Spec.Maintenance = m
		return ti
	}
	g := NewWithT(t)

	w, err := maintenanceAt(instance(nil), now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w).To(BeNil(), "no spec.maintenance: nothing is gated")
	g.Expect(w.status()).To(BeNil())
	g.Expect(w.recheck(now)).To(BeZero())
	g.Expect(upgradeHeld(&tiledv1alpha1.TiledInstance{}, w, "", "")).To(BeFalse())

	// Tuesdays 08:00-12:00 in New York (13:00-17:00 UTC): closed on Monday morning.
	tuesdays := &tiledv1alpha1.MaintenanceSpec{Windows: []tiledv1alpha1.MaintenanceWindow{{
		Schedule: "0 8 * * 2", Duration: metav1.Duration{Duration: 4 * time.Hour}, TimeZone: "America/New_York"}}}
	w, err = maintenanceAt(instance(tuesdays), now)
	g.Expect(err).NotTo(HaveOccurred())
	s := w.status()
	g.Expect(s.Open).To(BeFalse())
	g.Expect(s.Reason).To(Equal("OutsideWindows"))
	g.Expect(s.NextOpen.Time).To(Equal(time.Date(2026, 12, 8, 13, 0, 0, 0, time.UTC)))
	g.Expect(s.NextClose).To(BeNil())
	g.Expect(w.recheck(now)).To(Equal(31*time.Hour + time.Second))
	g.Expect(w.closedMessage()).To(Equal("outside every maintenance window; opens at 2026-12-08T13:00:00Z"))
	g.Expect(upgradeHeld(&tiledv1alpha1.TiledInstance{}, w, "", "")).To(BeTrue(), "closed: an upgrade does not start")

	// Inside the window: open until 17:00 UTC.
	in := time.Date(2026, 12, 8, 14, 0, 0, 0, time.UTC)
	w, err = maintenanceAt(instance(tuesdays), in)
	g.Expect(err).NotTo(HaveOccurred())
	s = w.status()
	g.Expect(s.Open).To(BeTrue())
	g.Expect(s.NextClose.Time).To(Equal(time.Date(2026, 12, 8, 17, 0, 0, 0, time.UTC)))
	g.Expect(w.recheck(in)).To(Equal(3*time.Hour + time.Second))

	// Open: a standalone instance's upgrade starts; a member's that waited starts once its cluster
	// approves the pending change's hash.
	member := &tiledv1alpha1.TiledInstance{}
	member.OwnerReferences = []metav1.OwnerReference{{Kind: "TiledCluster", Name: "fleet", Controller: ptrTrue()}}
	member.Status.PendingRollout = &tiledv1alpha1.PendingRollout{Change: changeUpgrade, TemplateHash: "h1"}
	g.Expect(upgradeHeld(member, w, "", "")).To(BeTrue(), "a member's upgrade that waited waits for its cluster")
	member.Annotations = map[string]string{tiledv1alpha1.AnnotationApprovedTemplate: "h1"}
	g.Expect(upgradeHeld(member, w, "", "")).To(BeFalse())
	solo := &tiledv1alpha1.TiledInstance{}
	solo.Status.PendingRollout = &tiledv1alpha1.PendingRollout{Change: changeUpgrade, TemplateHash: "h1"}
	g.Expect(upgradeHeld(solo, w, "", "")).To(BeFalse())

	// A zone the operator's machine does not know stalls the instance, naming the field.
	_, err = maintenanceAt(instance(&tiledv1alpha1.MaintenanceSpec{Windows: []tiledv1alpha1.MaintenanceWindow{{
		Schedule: "0 8 * * 2", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Olympus"}}}), now)
	var st *stall
	g.Expect(err).To(BeAssignableToTypeOf(st))
	g.Expect(err.Error()).To(ContainSubstring(`spec.maintenance.windows[0].timeZone: unknown time zone "Mars/Olympus"`))
}

// A pending change the maintenance window holds is reported with its own reason and message.
func TestInstanceStatusMaintenance(t *testing.T) {
	g := NewWithT(t)
	p := &tiledv1alpha1.PendingRollout{StatefulSet: "chx", Change: changeSpec, Differs: []string{"spec.template.metadata.annotations[team]"}, DifferCount: 1,
		Window: "inside exclusion run-1 (...); opens at 2026-12-08T13:00:00Z"}
	ti := &tiledv1alpha1.TiledInstance{}
	msg := pendingMessage(ti, p)
	g.Expect(msg).To(ContainSubstring("StatefulSet chx: the instance's spec changes its pod template: spec.template.metadata.annotations[team]"))
	g.Expect(msg).To(ContainSubstring("waits for the maintenance window (spec.maintenance): inside exclusion run-1"))
	m := &tiledv1alpha1.MaintenanceStatus{Reason: "Excluded"}
	st := instanceStatus(&tiledv1alpha1.TiledInstanceStatus{}, observedInstance{Generation: 1, Replicas: 1, External: true, PendingRollout: p, PendingMessage: msg, Maintenance: m})
	g.Expect(st.Maintenance).To(Equal(m))
	g.Expect(st.PendingRollout).To(Equal(p))
	var reason string
	for _, c := range st.Conditions {
		if c.Type == ConditionRolloutPending {
			reason = c.Reason
		}
	}
	g.Expect(reason).To(Equal(ReasonWaitingForMaintenance))
	// Without spec.maintenance, no status.maintenance.
	g.Expect(instanceStatus(&tiledv1alpha1.TiledInstanceStatus{}, observedInstance{Generation: 1, Replicas: 1, External: true}).Maintenance).To(BeNil())
}

func ptrTrue() *bool { b := true; return &b }
