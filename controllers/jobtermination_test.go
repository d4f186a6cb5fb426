package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/render"
)

// A Job that ran a pod again speaks through the pod that ended last, whatever the list's order;
// the filter picks which ends count (any message, or only the pods that asked to be run again).
func TestLastTermination(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	ended := func(exit int32, msg string, at time.Time) corev1.Pod {
		return corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg, FinishedAt: metav1.NewTime(at)}}}}}}
	}
	running := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	anyMessage := func(t *corev1.ContainerStateTerminated) bool { return t.Message != "" }
	tryAgain := func(t *corev1.ContainerStateTerminated) bool { return t.ExitCode == render.ExitTryAgain }
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		keep func(*corev1.ContainerStateTerminated) bool
		want string
	}{
		{"none ended", []corev1.Pod{running}, anyMessage, ""},
		{"the newer pod listed first", []corev1.Pod{ended(0, "restored", t0.Add(time.Minute)), ended(75, "no answer", t0)}, anyMessage, "restored"},
		{"the newer pod listed last", []corev1.Pod{ended(75, "no answer", t0), running, ended(0, "restored", t0.Add(time.Minute))}, anyMessage, "restored"},
		{"only the pods that asked to run again", []corev1.Pod{ended(75, "first", t0), ended(75, "second", t0.Add(time.Second)), ended(1, "other", t0.Add(time.Minute))}, tryAgain, "second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(lastTermination(tc.pods, tc.keep)).To(Equal(tc.want))
		})
	}
}
