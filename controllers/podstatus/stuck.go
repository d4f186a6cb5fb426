package podstatus

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A StatefulSet with the default OrderedReady pod management (the PostgreSQL and cache
// StatefulSets) never replaces a pod that is not Ready on its way through a rolling update: it waits
// for it (Kubernetes calls the way out a "forced rollback", a person deleting the pod). With Parallel
// pod management (Tiled's) the StatefulSet controller replaces such a pod itself, and whichever of
// the two deletes it first, the other's deletion finds it gone. A pod that fails on the template it was created from (an
// image that cannot be pulled, a crash loop) so stays on it after the template is fixed. Stuck
// decides which such pods the operator deletes in the person's stead, so that the StatefulSet
// controller creates them again from the current template.

// Replacement is a pod Stuck finds stuck on an older revision of its StatefulSet.
type Replacement struct {
	// Pod, UID and ResourceVersion name the pod as it was judged: the deletion is made on the
	// condition that the pod is still that one, unchanged.
	Pod             string
	UID             types.UID
	ResourceVersion string
	// StatefulSet is the pod's StatefulSet; From the revision the pod runs (its
	// controller-revision-hash label), To the StatefulSet's status.updateRevision.
	StatefulSet, From, To string
	// Reason is the kubelet's reason of the failure (ErrImagePull, CrashLoopBackOff, ...), Container
	// the container that fails (an init container's name too).
	Reason, Container string
}

// StuckPods is Stuck's verdict for one StatefulSet.
type StuckPods struct {
	// Replace are the pods to delete, by name.
	Replace []Replacement
	// Held are the pods that would be deleted but for the hold.
	Held []Replacement
}

// failingReasons are the kubelet's waiting reasons of a container that will not start on its own:
// an image it cannot pull, a container that exits over and over, a configuration it cannot create
// the container from. ContainerCreating and PodInitializing (a pod starting) are not among them.
var failingReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CrashLoopBackOff":           true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// Stuck returns the pods of sts that are stuck on an older revision: each is
//
//   - on a revision (its controller-revision-hash label) other than the StatefulSet's
//     status.updateRevision, which the StatefulSet controller has computed for the current
//     template (status.observedGeneration is the StatefulSet's generation);
//   - not Ready (a Ready pod is serving; the StatefulSet controller rolls it itself) and not being
//     deleted;
//   - failing (Failing: a container that cannot pull its image, crash-loops, cannot be created or
//     ended in error). A pod that is only starting, or that no node can take (Unschedulable), is
//     not: it may run once it gets going, and deleting it would not help;
//   - not replaced for that revision before: replaced maps a pod's name to the revision it was
//     last replaced for (status.replacedPods), and a pod is replaced at most once per revision.
//
// Pods of other StatefulSets (by name) are left out. hold says the instance is held (beamtime): the
// stuck pods are returned in Held instead of Replace. It is pure.
func Stuck(sts *appsv1.StatefulSet, pods []corev1.Pod, replaced map[string]string, hold bool) StuckPods {
	var out StuckPods
	if sts == nil || sts.Status.UpdateRevision == "" || sts.Status.ObservedGeneration < sts.Generation {
		return out
	}
	to := sts.Status.UpdateRevision
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || !OwnedBy(p.Name, sts.Name) {
			continue
		}
		from := p.Labels[appsv1.ControllerRevisionHashLabelKey]
		if from == "" || from == to || Ready(p) || replaced[p.Name] == to {
			continue
		}
		reason, container := Failing(p)
		if reason == "" {
			continue
		}
		r := Replacement{Pod: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion, StatefulSet: sts.Name,
			From: from, To: to, Reason: reason, Container: container}
		if hold {
			out.Held = append(out.Held, r)
		} else {
			out.Replace = append(out.Replace, r)
		}
	}
	return out
}

// OwnedBy says whether pod is one of the StatefulSet sts's pods by its name (<sts>-<ordinal>).
func OwnedBy(pod, sts string) bool {
	rest, ok := strings.CutPrefix(pod, sts+"-")
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Ready says whether the pod's Ready condition is True.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Failing returns the kubelet's reason why a container of the pod fails and that container's name
// (init containers first), or "" when none does: a waiting reason of failingReasons, or a container
// that ended with a non-zero exit code (reason Error unless the kubelet gives one). A pod that
// succeeded or failed as a whole is not: the StatefulSet controller replaces it itself.
func Failing(p *corev1.Pod) (reason, container string) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return "", ""
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && failingReasons[w.Reason] {
				return w.Reason, cs.Name
			}
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				if t.Reason != "" {
					return t.Reason, cs.Name
				}
				return "Error", cs.Name
			}
		}
	}
	return "", ""
}

// Recovered says whether the pod is Ready on revision: a record of its replacement for that
// revision (status.replacedPods) is then no longer needed, and goes.
func Recovered(p *corev1.Pod, revision string) bool {
	return p.DeletionTimestamp == nil && p.Labels[appsv1.ControllerRevisionHashLabelKey] == revision && Ready(p)
}
