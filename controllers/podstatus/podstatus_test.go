package podstatus

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

const grace = time.Minute

func pod(name string, mods ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	p.Status.Phase = corev1.PodRunning
	for _, m := range mods {
		m(&p)
	}
	return p
}

func running(name string, ready bool, started time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name, Image: "ghcr.io/bluesky/tiled:0.2.20", Ready: ready, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
	}
}

func waiting(name, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name, Image: "ghcr.io/bluesky/tiled:0.0.0-missing",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
	}
}

func containers(cs ...corev1.ContainerStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.ContainerStatuses = cs }
}

func inits(cs ...corev1.ContainerStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.InitContainerStatuses = cs }
}

func condition(typ corev1.PodConditionType, status corev1.ConditionStatus, reason, msg string, at time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(at),
		})
	}
}

func crashLoop(name, log string) corev1.ContainerStatus {
	cs := waiting(name, "CrashLoopBackOff", "back-off 40s restarting failed container="+name)
	cs.RestartCount = 3
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: log}
	return cs
}

func TestDiagnose(t *testing.T) {
	// Tiled's own output when config.yml holds an unknown key (tiled serve, 0.2.20), as the kubelet
	// keeps it under FallbackToLogsOnError.
	tiledRefusal := "Traceback (most recent call last):\n  File \"/opt/venv/bin/tiled\", line 8, in <module>\n" +
		"pydantic_core._pydantic_core.ValidationError: 1 validation error for Config\n" +
		"bogus_key\n  Extra inputs are not permitted [type=extra_forbidden, input_value=True, input_type=bool]\n\n"
	tests := []struct {
		name        string
		pods        []corev1.Pod
		wantReason  string
		wantStalled bool
		wantIn      []string // substrings of the message
		wantRecheck time.Duration
	}{
		{name: "no pods"},
		{
			name: "all ready",
			pods: []corev1.Pod{pod("t-0", inits(corev1.ContainerStatus{Name: "migrate", Ready: true,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}),
				containers(running("tiled", true, t0.Add(-time.Hour))))},
		},
		{
			name:        "image pull back-off",
			pods:        []corev1.Pod{pod("t-0", containers(waiting("tiled", "ImagePullBackOff", `Back-off pulling image "ghcr.io/bluesky/tiled:0.0.0-missing"`)))},
			wantReason:  ReasonImagePull,
			wantStalled: true,
			wantIn:      []string{"container tiled of pod t-0", `"ghcr.io/bluesky/tiled:0.0.0-missing"`, "ImagePullBackOff: Back-off pulling image"},
		},
		{
			name:        "image pull error, same reason as its back-off",
			pods:        []corev1.Pod{pod("t-0", inits(waiting("migrate", "ErrImagePull", "failed to pull: not found")))},
			wantReason:  ReasonImagePull,
			wantStalled: true,
			wantIn:      []string{"init container migrate of pod t-0", "ErrImagePull: failed to pull: not found"},
		},
		{
			name:        "crash loop names the last log line",
			pods:        []corev1.Pod{pod("t-0", containers(crashLoop("tiled", tiledRefusal)))},
			wantReason:  ReasonCrashLoop,
			wantStalled: true,
			wantIn: []string{"container tiled of pod t-0 is crash-looping", "exit code 1, Error",
				"last log line: Extra inputs are not permitted [type=extra_forbidden"},
		},
		{
			name:        "crash-looping init container",
			pods:        []corev1.Pod{pod("t-0", inits(crashLoop("migrate", "waiting for the database\ndatabase db:5432/catalog did not accept connections within 300s\n")))},
			wantReason:  ReasonCrashLoop,
			wantStalled: true,
			wantIn:      []string{"init container migrate of pod t-0", "last log line: database db:5432/catalog did not accept connections within 300s"},
		},
		{
			name:        "crash loop without a termination message",
			pods:        []corev1.Pod{pod("pg-0", containers(crashLoop("postgres", "")))},
			wantReason:  ReasonCrashLoop,
			wantStalled: true,
			wantIn:      []string{"container postgres of pod pg-0 is crash-looping (exit code 1, Error)"},
		},
		{
			name:        "missing Secret key",
			pods:        []corev1.Pod{pod("t-0", containers(waiting("tiled", "CreateContainerConfigError", `couldn't find key uri in Secret ns/db`)))},
			wantReason:  ReasonContainerConfig,
			wantStalled: true,
			wantIn:      []string{"container tiled of pod t-0 cannot be created", "couldn't find key uri in Secret ns/db"},
		},
		{
			name: "starting containers are not problems",
			pods: []corev1.Pod{
				pod("t-0", inits(waiting("migrate", "PodInitializing", "")), containers(waiting("tiled", "PodInitializing", ""))),
				pod("t-1", containers(waiting("tiled", "ContainerCreating", ""))),
			},
		},
		{
			name: "init container running (waiting for its database) is no problem",
			pods: []corev1.Pod{pod("t-0", inits(running("migrate", false, t0.Add(-10*time.Minute))))},
		},
		{
			name: "unready within the grace period: look again when it ends",
			pods: []corev1.Pod{pod("t-0", containers(running("tiled", false, t0.Add(-20*time.Second))),
				condition(corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", "", t0.Add(-25*time.Second)))},
			wantRecheck: 40 * time.Second,
		},
		{
			name:       "unready past the grace period: probe failing, not stalled",
			pods:       []corev1.Pod{pod("t-0", containers(running("tiled", false, t0.Add(-90*time.Second))))},
			wantReason: ReasonProbeFailing,
			wantIn:     []string{"container tiled of pod t-0 has been running since 2026-11-01T11:58:30Z but is not ready: its readiness probe fails (the pod's Unhealthy events give the probe's output)"},
		},
		{
			name: "startup probe not passed",
			pods: []corev1.Pod{pod("t-0", containers(func() corev1.ContainerStatus {
				cs := running("tiled", false, t0.Add(-5*time.Minute))
				cs.Started = ptr.To(false)
				return cs
			}()))},
			wantReason: ReasonProbeFailing,
			wantIn:     []string{"its startup probe has not passed"},
		},
		{
			name: "ready for long, unready recently: counted from the transition",
			pods: []corev1.Pod{pod("pg-0", containers(running("postgres", false, t0.Add(-time.Hour))),
				condition(corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", "", t0.Add(-10*time.Second)))},
			wantRecheck: 50 * time.Second,
		},
		{
			name: "unschedulable",
			pods: []corev1.Pod{pod("t-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending },
				condition(corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, "0/1 nodes are available:\n 1 Insufficient memory.", t0))},
			wantReason: ReasonUnschedulable,
			wantIn:     []string{"pod t-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient memory."},
		},
		{
			name: "a stalled problem wins over an earlier one that may pass",
			pods: []corev1.Pod{
				pod("t-0", condition(corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, "no nodes", t0)),
				pod("t-1", containers(crashLoop("tiled", "boom\n"))),
			},
			wantReason:  ReasonCrashLoop,
			wantStalled: true,
			wantIn:      []string{"pod t-1", "last log line: boom"},
		},
		{
			name: "pods in name order, init containers first",
			pods: []corev1.Pod{
				pod("t-1", containers(waiting("tiled", "ImagePullBackOff", ""))),
				pod("t-0", inits(crashLoop("migrate", "no db\n")), containers(waiting("tiled", "ImagePullBackOff", ""))),
			},
			wantReason:  ReasonCrashLoop,
			wantStalled: true,
			wantIn:      []string{"init container migrate of pod t-0"},
		},
		{
			name: "pods being deleted and finished pods are left out",
			pods: []corev1.Pod{
				pod("t-0", func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }, containers(crashLoop("tiled", "x\n"))),
				pod("t-1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, containers(waiting("tiled", "ImagePullBackOff", ""))),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, recheck := Diagnose(tc.pods, t0, grace)
			g.Expect(recheck).To(Equal(tc.wantRecheck))
			if tc.wantReason == "" {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Reason).To(Equal(tc.wantReason))
			g.Expect(got.Stalled).To(Equal(tc.wantStalled))
			for _, s := range tc.wantIn {
				g.Expect(got.Message).To(ContainSubstring(s))
			}
			g.Expect(got.Message).NotTo(ContainSubstring("\n"))
		})
	}
}

func TestLastLine(t *testing.T) {
	g := NewWithT(t)
	g.Expect(LastLine("")).To(BeEmpty())
	g.Expect(LastLine("a\nb\n\n  \n")).To(Equal("b"))
	long := strings.Repeat("é", 400) // 800 bytes
	got := LastLine("x\n" + long)
	g.Expect(len(got)).To(BeNumerically("<=", maxLogLine+len("…")))
	g.Expect(strings.ToValidUTF8(got, "?")).To(Equal(got), "cut inside a UTF-8 sequence")
}

func TestTrim(t *testing.T) {
	g := NewWithT(t)
	p := pod("t-0", containers(crashLoop("tiled", strings.Repeat("line\n", 1000)+"last words\n")),
		condition(corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "not ready", t0))
	p.Labels = map[string]string{"app.kubernetes.io/instance": "t", "batch.kubernetes.io/job-name": "j",
		"statefulset.kubernetes.io/pod-name": "t-0", "apps.kubernetes.io/pod-index": "0", "controller-revision-hash": "t-5d4f"}
	p.Annotations = map[string]string{"big": strings.Repeat("x", 10000)}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	p.Spec.Containers = []corev1.Container{{Name: "tiled", Image: "img", Command: []string{"tiled", "serve"}}}
	p.Status.PodIP = "10.0.0.1"
	p.Status.ContainerStatuses[0].ContainerID = "containerd://abc"

	out, err := Trim(&p)
	g.Expect(err).NotTo(HaveOccurred())
	tp := out.(*corev1.Pod)
	g.Expect(tp.Name).To(Equal("t-0"))
	// The labels but the StatefulSet controller's own for each pod (name, ordinal): the template's,
	// and the revision, which Stuck reads.
	g.Expect(tp.Labels).To(Equal(map[string]string{"app.kubernetes.io/instance": "t", "batch.kubernetes.io/job-name": "j",
		"controller-revision-hash": "t-5d4f"}))
	g.Expect(p.Labels).To(HaveLen(5), "the pod trimmed is not changed")
	g.Expect(tp.Annotations).To(BeNil())
	g.Expect(tp.ManagedFields).To(BeNil())
	g.Expect(tp.Spec.Containers).To(BeNil())
	g.Expect(tp.Status.PodIP).To(BeEmpty())
	g.Expect(tp.Status.ContainerStatuses[0].ContainerID).To(BeEmpty())
	g.Expect(len(tp.Status.ContainerStatuses[0].LastTerminationState.Terminated.Message)).To(BeNumerically("<=", 1024))

	// Diagnose reads the same from the trimmed pod as from the whole one.
	want, _ := Diagnose([]corev1.Pod{p}, t0, grace)
	got, _ := Diagnose([]corev1.Pod{*tp}, t0, grace)
	g.Expect(got).To(Equal(want))
	g.Expect(got.Message).To(ContainSubstring("last log line: last words"))

	// Other objects pass through.
	cm := &corev1.ConfigMap{}
	same, err := Trim(cm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(same).To(BeIdenticalTo(cm))
}
