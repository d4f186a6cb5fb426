package podstatus

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sts is a StatefulSet named cache whose controller has seen its generation 3 and computed
// update as its update revision (current its current one).
func sts(current, update string) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "ns", Generation: 3}}
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 3, CurrentRevision: current, UpdateRevision: update}
	return s
}

func revision(rev string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.UID, p.ResourceVersion = types.UID("uid-"+p.Name), "7"
		p.Labels = map[string]string{appsv1.ControllerRevisionHashLabelKey: rev, "app.kubernetes.io/component": "cache"}
	}
}

func ready(p *corev1.Pod) {
	condition(corev1.PodReady, corev1.ConditionTrue, "", "", t0)(p)
}

func notReady(p *corev1.Pod) {
	condition(corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [valkey]", t0)(p)
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func terminated(name string, code int32, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}
}

// TestStuck: a pod is replaced only when it is on a revision other than the update revision, not
// Ready and failing, and was not replaced for that revision before; a hold turns the replacement
// into a held one.
func TestStuck(t *testing.T) {
	imagePull := containers(waiting("valkey", "ImagePullBackOff", "Back-off pulling image"))
	tests := []struct {
		name     string
		sts      *appsv1.StatefulSet
		pods     []corev1.Pod
		replaced map[string]string
		hold     bool
		want     []string // "pod from->to reason container"
		held     []string
	}{
		{name: "image pull back-off on the old revision: replaced",
			sts:  sts("cache-a", "cache-b"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), notReady, phase(corev1.PodPending), imagePull)},
			want: []string{"cache-0 cache-a->cache-b ImagePullBackOff valkey"}},
		{name: "the template reverted (the update revision is the current one again): the pod on the bad revision is replaced",
			sts:  sts("cache-a", "cache-a"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-b"), notReady, containers(crashLoop("valkey", "bad config")))},
			want: []string{"cache-0 cache-b->cache-a CrashLoopBackOff valkey"}},
		{name: "every failing reason counts",
			sts: sts("cache-a", "cache-b"),
			pods: []corev1.Pod{
				pod("cache-0", revision("cache-a"), containers(waiting("valkey", "ErrImagePull", "not found"))),
				pod("cache-1", revision("cache-a"), containers(waiting("valkey", "InvalidImageName", "bad"))),
				pod("cache-2", revision("cache-a"), containers(waiting("valkey", "CreateContainerConfigError", "secret key missing"))),
				pod("cache-3", revision("cache-a"), containers(waiting("valkey", "CreateContainerError", "no"))),
				pod("cache-4", revision("cache-a"), containers(waiting("valkey", "ErrImageNeverPull", "no"))),
				pod("cache-5", revision("cache-a"), containers(terminated("valkey", 1, ""))),
				pod("cache-6", revision("cache-a"), containers(terminated("valkey", 137, "OOMKilled"))),
				pod("cache-7", revision("cache-a"), inits(waiting("init", "CrashLoopBackOff", "")), containers(waiting("valkey", "PodInitializing", ""))),
			},
			want: []string{
				"cache-0 cache-a->cache-b ErrImagePull valkey", "cache-1 cache-a->cache-b InvalidImageName valkey",
				"cache-2 cache-a->cache-b CreateContainerConfigError valkey", "cache-3 cache-a->cache-b CreateContainerError valkey",
				"cache-4 cache-a->cache-b ErrImageNeverPull valkey", "cache-5 cache-a->cache-b Error valkey",
				"cache-6 cache-a->cache-b OOMKilled valkey", "cache-7 cache-a->cache-b CrashLoopBackOff init",
			}},
		{name: "a Ready pod on the old revision is never replaced (the StatefulSet controller rolls it)",
			sts:  sts("cache-a", "cache-b"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), ready, imagePull)}},
		{name: "a failing pod on the update revision is not replaced (a new pod would fail the same)",
			sts:  sts("cache-a", "cache-b"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-b"), notReady, imagePull)}},
		{name: "replaced for this revision before: not again",
			sts:      sts("cache-a", "cache-b"),
			pods:     []corev1.Pod{pod("cache-0", revision("cache-a"), notReady, imagePull)},
			replaced: map[string]string{"cache-0": "cache-b"}},
		{name: "replaced for another revision before: replaced for this one",
			sts:      sts("cache-a", "cache-c"),
			pods:     []corev1.Pod{pod("cache-0", revision("cache-a"), notReady, imagePull)},
			replaced: map[string]string{"cache-0": "cache-b"},
			want:     []string{"cache-0 cache-a->cache-c ImagePullBackOff valkey"}},
		{name: "starting (ContainerCreating) or unschedulable is not failing",
			sts: sts("cache-a", "cache-b"),
			pods: []corev1.Pod{
				pod("cache-0", revision("cache-a"), phase(corev1.PodPending), containers(waiting("valkey", "ContainerCreating", ""))),
				pod("cache-1", revision("cache-a"), phase(corev1.PodPending),
					condition(corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, "0/3 nodes are available", t0)),
				pod("cache-2", revision("cache-a"), containers(running("valkey", false, t0))),
				pod("cache-3", revision("cache-a"), containers(terminated("valkey", 0, "Completed"))),
			}},
		{name: "a pod that failed as a whole is the StatefulSet controller's to replace",
			sts:  sts("cache-a", "cache-b"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), phase(corev1.PodFailed), containers(terminated("valkey", 1, "Error")))}},
		{name: "a pod being deleted is left alone",
			sts: sts("cache-a", "cache-b"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), imagePull, func(p *corev1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: t0}
			})}},
		{name: "a pod without a revision label, or of another StatefulSet, is left alone",
			sts: sts("cache-a", "cache-b"),
			pods: []corev1.Pod{
				pod("cache-0", imagePull),
				pod("cache-extra-0", revision("cache-a"), imagePull),
				pod("cachex-0", revision("cache-a"), imagePull),
				pod("cache-", revision("cache-a"), imagePull),
			}},
		{name: "the StatefulSet controller has not seen the current template yet: nothing",
			sts: func() *appsv1.StatefulSet {
				s := sts("cache-a", "cache-b")
				s.Generation = 4
				return s
			}(),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), imagePull)}},
		{name: "no update revision yet, or no StatefulSet: nothing",
			sts:  sts("", ""),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), imagePull)}},
		{name: "held: named, not replaced",
			sts:  sts("cache-a", "cache-b"),
			pods: []corev1.Pod{pod("cache-0", revision("cache-a"), notReady, imagePull), pod("cache-1", revision("cache-a"), ready)},
			hold: true,
			held: []string{"cache-0 cache-a->cache-b ImagePullBackOff valkey"}},
	}
	str := func(rs []Replacement) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Pod+" "+r.From+"->"+r.To+" "+r.Reason+" "+r.Container)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Stuck(tt.sts, tt.pods, tt.replaced, tt.hold)
			g.Expect(str(got.Replace)).To(Equal(tt.want))
			g.Expect(str(got.Held)).To(Equal(tt.held))
			for _, r := range append(got.Replace, got.Held...) {
				g.Expect(r.UID).To(BeEquivalentTo("uid-"+r.Pod), "the deletion's precondition")
				g.Expect(r.ResourceVersion).To(Equal("7"))
				g.Expect(r.StatefulSet).To(Equal("cache"))
			}
		})
	}
	g := NewWithT(t)
	g.Expect(Stuck(nil, []corev1.Pod{pod("cache-0", revision("cache-a"), imagePull)}, nil, false)).To(Equal(StuckPods{}))
}

// TestStuckOnTrimmedPods: the cache's trimmed pods (Trim) say the same to Stuck as the whole pods.
func TestStuckOnTrimmedPods(t *testing.T) {
	g := NewWithT(t)
	p := pod("cache-0", revision("cache-a"), notReady, containers(crashLoop("valkey", "bad")))
	p.Labels[appsv1.StatefulSetPodNameLabel] = "cache-0"
	p.Labels[appsv1.PodIndexLabel] = "0"
	trimmed, err := Trim(&p)
	g.Expect(err).NotTo(HaveOccurred())
	whole := Stuck(sts("cache-a", "cache-b"), []corev1.Pod{p}, nil, false)
	g.Expect(whole.Replace).To(HaveLen(1))
	g.Expect(Stuck(sts("cache-a", "cache-b"), []corev1.Pod{*trimmed.(*corev1.Pod)}, nil, false)).To(Equal(whole))
}

// TestRecovered: a replacement's record goes once the pod is Ready on the revision it was replaced
// for, not before, and not for a pod Ready on another revision.
func TestRecovered(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Recovered(addr(pod("cache-0", revision("cache-b"), ready)), "cache-b")).To(BeTrue())
	g.Expect(Recovered(addr(pod("cache-0", revision("cache-b"), notReady)), "cache-b")).To(BeFalse())
	g.Expect(Recovered(addr(pod("cache-0", revision("cache-a"), ready)), "cache-b")).To(BeFalse())
	g.Expect(Recovered(addr(pod("cache-0", revision("cache-b"), ready, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} })), "cache-b")).To(BeFalse())
}

func addr(p corev1.Pod) *corev1.Pod { return &p }
