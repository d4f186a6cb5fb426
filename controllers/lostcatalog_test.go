package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// migratePod is a Tiled pod created at created whose migrate step's current run ended with
// exitCode and message, and whose last run (lastMessage "" for none) with exit code 1.
func migratePod(created time.Time, exitCode int32, message, lastMessage string) corev1.Pod {
	cs := corev1.ContainerStatus{Name: "migrate", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Message: message}}}
	if lastMessage != "" {
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Message: lastMessage}
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{cs}}}
}

const (
	lostReport     = `{"catalog":{"current":null,"known":true,"required":"917dbbcfc4b1"},"catalogLost":true,"version":"0.2.20"}`
	migratedReport = `{"catalog":{"current":"917dbbcfc4b1","known":true,"required":"917dbbcfc4b1"},"version":"0.2.20"}`
)

func TestEmptyCatalogReported(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	g.Expect(emptyCatalogReported(nil)).To(BeFalse())
	g.Expect(emptyCatalogReported([]corev1.Pod{migratePod(now, 0, migratedReport, "")})).To(BeFalse())
	g.Expect(emptyCatalogReported([]corev1.Pod{migratePod(now, 1, lostReport, "")})).To(BeTrue(), "the current run refused")
	g.Expect(emptyCatalogReported([]corev1.Pod{migratePod(now, 0, migratedReport, lostReport)})).To(BeTrue(), "a crash loop: the last run refused")
	g.Expect(emptyCatalogReported([]corev1.Pod{migratePod(now, 1, "database did not accept connections", "")})).To(BeFalse())
}

func TestRevisionReportedSince(t *testing.T) {
	g := NewWithT(t)
	restored := time.Now().Truncate(time.Second)
	before := migratePod(restored.Add(-time.Minute), 0, migratedReport, "")
	g.Expect(revisionReportedSince([]corev1.Pod{before}, restored)).To(BeEmpty(), "a pod of before the restore")
	after := migratePod(restored.Add(time.Second), 0, migratedReport, "")
	g.Expect(revisionReportedSince([]corev1.Pod{before, after}, restored)).To(Equal("917dbbcfc4b1"))
	g.Expect(revisionReportedSince([]corev1.Pod{migratePod(restored.Add(time.Second), 1, lostReport, "")}, restored)).To(BeEmpty())
}

func TestCatalogExpected(t *testing.T) {
	g := NewWithT(t)
	g.Expect(catalogExpected(&tiledv1alpha1.TiledInstanceStatus{})).To(BeFalse(), "a new instance")
	g.Expect(catalogExpected(&tiledv1alpha1.TiledInstanceStatus{Database: &tiledv1alpha1.DatabaseStatus{}})).To(BeFalse())
	g.Expect(catalogExpected(&tiledv1alpha1.TiledInstanceStatus{Database: &tiledv1alpha1.DatabaseStatus{CatalogRevision: "r"}})).To(BeTrue())
	g.Expect(catalogExpected(&tiledv1alpha1.TiledInstanceStatus{CatalogLost: &tiledv1alpha1.CatalogLost{}})).To(BeTrue(), "lost: still expected")
}
