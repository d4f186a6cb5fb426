package podstatus

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Condition reasons of the problems Diagnose finds. Each is also the reason of the instance's
// condition that reports it.
const (
	// ReasonImagePull: the kubelet cannot pull the container's image (ErrImagePull, ImagePullBackOff,
	// InvalidImageName, ErrImageNeverPull). Stalled: the image reference has to change.
	ReasonImagePull = "ImagePullBackOff"
	// ReasonCrashLoop: the container exits and the kubelet restarts it with back-off. Stalled.
	ReasonCrashLoop = "CrashLoopBackOff"
	// ReasonContainerConfig: the kubelet cannot create the container (CreateContainerConfigError,
	// e.g. a missing Secret key; CreateContainerError). Stalled.
	ReasonContainerConfig = "ContainerConfigError"
	// ReasonProbeFailing: the container runs but has not been ready for longer than the grace
	// period (its readiness or startup probe fails). Not stalled: it may recover by itself.
	ReasonProbeFailing = "ProbeFailing"
	// ReasonUnschedulable: the scheduler finds no node for the pod. Not stalled: capacity may come.
	ReasonUnschedulable = "Unschedulable"
)

// maxLogLine bounds the log line quoted in a message.
const maxLogLine = 300

// Problem is what is wrong with one container of one pod (or with the pod, for Unschedulable).
type Problem struct {
	// Pod is the pod's name.
	Pod string
	// Container is the container's name; empty for a problem of the whole pod.
	Container string
	// Init says the container is an init container.
	Init bool
	// Reason is one of the Reason constants.
	Reason string
	// Message names the pod and the container and says what the kubelet reports, with the last log
	// line of a crash-looping container.
	Message string
	// Stalled says the problem will not go away without a change (image, configuration, code).
	Stalled bool
}

// Diagnose returns the most important problem among pods, or nil: a stalled problem before any
// other, then pods by name, init containers before containers, each in the order of the pod's
// status. Pods being deleted are left out. A container that runs but is not ready is a problem only
// once it has been unready for grace; recheck is how long until the next such container reaches
// grace (0 when none is waiting for it), so that the caller looks again then: the pod's status does
// not change while a probe keeps failing.
func Diagnose(pods []corev1.Pod, now time.Time, grace time.Duration) (problem *Problem, recheck time.Duration) {
	sorted := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			sorted = append(sorted, &pods[i])
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var first *Problem
	for _, p := range sorted {
		for _, pr := range podProblems(p, now, grace, &recheck) {
			if pr.Stalled {
				return pr, recheck
			}
			if first == nil {
				first = pr
			}
		}
	}
	return first, recheck
}

// podProblems lists the problems of one pod; it lowers *recheck to the time until a container that is
// not ready yet reaches grace.
func podProblems(p *corev1.Pod, now time.Time, grace time.Duration, recheck *time.Duration) []*Problem {
	var out []*Problem
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		// The StatefulSet controller replaces the pod; its successor is what counts.
		return nil
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			out = append(out, &Problem{
				Pod: p.Name, Reason: ReasonUnschedulable,
				Message: fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, oneLine(c.Message)),
			})
		}
	}
	for i := range p.Status.InitContainerStatuses {
		if pr := containerProblem(p, &p.Status.InitContainerStatuses[i], true, now, grace, recheck); pr != nil {
			out = append(out, pr)
		}
	}
	for i := range p.Status.ContainerStatuses {
		if pr := containerProblem(p, &p.Status.ContainerStatuses[i], false, now, grace, recheck); pr != nil {
			out = append(out, pr)
		}
	}
	return out
}

func containerProblem(p *corev1.Pod, cs *corev1.ContainerStatus, init bool, now time.Time, grace time.Duration, recheck *time.Duration) *Problem {
	what := "container"
	if init {
		what = "init container"
	}
	pr := &Problem{Pod: p.Name, Container: cs.Name, Init: init}
	where := fmt.Sprintf("%s %s of pod %s", what, cs.Name, p.Name)
	if w := cs.State.Waiting; w != nil {
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			pr.Reason, pr.Stalled = ReasonImagePull, true
			pr.Message = fmt.Sprintf("%s cannot pull image %q (%s)", where, cs.Image, detail(w.Reason, w.Message))
			return pr
		case "CrashLoopBackOff":
			pr.Reason, pr.Stalled = ReasonCrashLoop, true
			pr.Message = fmt.Sprintf("%s is crash-looping (%s)", where, termination(cs.LastTerminationState.Terminated))
			return pr
		case "CreateContainerConfigError", "CreateContainerError":
			pr.Reason, pr.Stalled = ReasonContainerConfig, true
			pr.Message = fmt.Sprintf("%s cannot be created (%s)", where, detail(w.Reason, w.Message))
			return pr
		}
		return nil
	}
	// Init containers have no probes; a running one is working (e.g. waiting for its database).
	if init || cs.Ready || cs.State.Running == nil {
		return nil
	}
	since := cs.State.Running.StartedAt.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady && c.Status == corev1.ConditionFalse && c.LastTransitionTime.After(since) {
			since = c.LastTransitionTime.Time
		}
	}
	if since.IsZero() {
		return nil
	}
	if left := since.Add(grace).Sub(now); left > 0 {
		if *recheck == 0 || left < *recheck {
			*recheck = left
		}
		return nil
	}
	// The probe's own output (ready.py's line naming the catalog or the cache, pg_isready's,
	// redis-cli's) is in the kubelet's Unhealthy Events on the pod, which the operator does not
	// read (no RBAC on Events): the message says where to look.
	probe := "its readiness probe fails (the pod's Unhealthy events give the probe's output)"
	if cs.Started != nil && !*cs.Started {
		probe = "its startup probe has not passed"
	}
	pr.Reason = ReasonProbeFailing
	pr.Message = fmt.Sprintf("%s has been running since %s but is not ready: %s", where, since.UTC().Format(time.RFC3339), probe)
	return pr
}

// termination describes how a container last ended: exit code, reason, and the last line it logged.
func termination(t *corev1.ContainerStateTerminated) string {
	if t == nil {
		return "no termination recorded"
	}
	s := fmt.Sprintf("exit code %d", t.ExitCode)
	if t.Reason != "" {
		s += ", " + t.Reason
	}
	if line := LastLine(t.Message); line != "" {
		s += "; last log line: " + line
	}
	return s
}

func detail(reason, message string) string {
	if message == "" {
		return reason
	}
	return reason + ": " + oneLine(message)
}

// LastLine returns the last non-blank line of a termination message (the tail of the container's log
// under FallbackToLogsOnError), trimmed and cut to a few hundred characters.
func LastLine(msg string) string {
	lines := strings.Split(msg, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return truncate(l)
		}
	}
	return ""
}

func oneLine(s string) string {
	return truncate(strings.Join(strings.Fields(s), " "))
}

func truncate(s string) string {
	if len(s) <= maxLogLine {
		return s
	}
	cut := maxLogLine
	for cut > 0 && (s[cut]&0xC0) == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

// Trim is the cache transform of the operator's pods: it keeps the name, namespace, uid,
// resourceVersion, labels (but the ones the StatefulSet controller gives each pod of its own,
// podOnlyLabels), deletion mark and the status fields Diagnose and Stuck read, and drops the rest
// (spec, annotations, managed fields, addresses, resources), so that the pods cost little memory.
func Trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = p.Name, p.Namespace, p.UID, p.ResourceVersion
	out.Generation, out.Labels, out.DeletionTimestamp = p.Generation, templateLabels(p.Labels), p.DeletionTimestamp
	out.CreationTimestamp = p.CreationTimestamp
	out.Status.Phase = p.Status.Phase
	for _, c := range p.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime,
		})
	}
	out.Status.InitContainerStatuses = trimContainers(p.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = trimContainers(p.Status.ContainerStatuses)
	return out, nil
}

// podOnlyLabels are the labels the StatefulSet controller adds to each of its pods of its own (name,
// ordinal): the operator reads neither, and without them the pods of one revision share one label
// map (operator/cachetrim.go shares equal label maps) instead of one per pod. The revision label
// (controller-revision-hash) stays: Stuck compares it with the StatefulSet's update revision. It
// is the same on every pod of a revision, so the pods of a StatefulSet still share one map, their
// template's labels and the revision (a map of their own beside the StatefulSet's, for PostgreSQL
// and the streaming cache, whose pod labels are the StatefulSet's).
var podOnlyLabels = map[string]bool{
	appsv1.StatefulSetPodNameLabel: true,
	appsv1.PodIndexLabel:           true,
}

// templateLabels is labels without podOnlyLabels (labels itself when it has none of them).
func templateLabels(labels map[string]string) map[string]string {
	n := 0
	for k := range podOnlyLabels {
		if _, ok := labels[k]; ok {
			n++
		}
	}
	if n == 0 {
		return labels
	}
	out := make(map[string]string, len(labels)-n)
	for k, v := range labels {
		if !podOnlyLabels[k] {
			out[k] = v
		}
	}
	return out
}

func trimContainers(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if in == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, c := range in {
		out[i] = corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: c.Ready, Started: c.Started, RestartCount: c.RestartCount,
			State: trimState(c.State), LastTerminationState: trimState(c.LastTerminationState),
		}
	}
	return out
}

func trimState(s corev1.ContainerState) corev1.ContainerState {
	out := corev1.ContainerState{Waiting: s.Waiting, Running: s.Running}
	if t := s.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: t.ExitCode, Reason: t.Reason, Message: tail(t.Message), StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
		}
	}
	return out
}

// tail keeps the last kilobyte of a termination message: enough for LastLine.
func tail(s string) string {
	const keep = 1024
	if len(s) <= keep {
		return s
	}
	return s[len(s)-keep:]
}
