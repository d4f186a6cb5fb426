package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestDecideImageCheck(t *testing.T) {
	const (
		live = "docker.io/library/postgres:16"
		good = "docker.io/library/postgres:17"
		typo = "docker.io/library/postgress:17"
	)
	facts := func(live, want, checked string, job *imageCheckJob) imageCheckFacts {
		return imageCheckFacts{StatefulSet: "a-postgres", Field: "spec.database.managed.image", Live: live, Want: want, Checked: checked, JobName: "a-dbcheck-1234", Job: job}
	}
	for _, tc := range []struct {
		name string
		f    imageCheckFacts
		want imageCheckDecision
		says []string // in the message
	}{
		{name: "first creation: not checked", f: facts("", good, "", nil), want: imageCheckDecision{}},
		{name: "the image as it runs: nothing", f: facts(live, live, "", nil), want: imageCheckDecision{}},
		{name: "the typo removed: its check cancelled", f: facts(live, live, "", nil), want: imageCheckDecision{}},
		{name: "an image proven before: let through", f: facts(live, good, good, nil), want: imageCheckDecision{}},
		{name: "a new image: held, its check created", f: facts(live, good, "", nil),
			want: imageCheckDecision{Hold: true, Run: true, Reason: ReasonImageCheckRunning},
			says: []string{"StatefulSet a-postgres keeps image " + live, "the new image " + good, "spec.database.managed.image", "a-dbcheck-1234 is created"}},
		{name: "the check runs: held", f: facts(live, good, "", &imageCheckJob{}),
			want: imageCheckDecision{Hold: true, Run: true, Reason: ReasonImageCheckRunning}, says: []string{"a-dbcheck-1234 runs"}},
		{name: "a typo: held with the pod's reason", f: facts(live, typo, "", &imageCheckJob{Reason: ReasonImagePull, Message: `container check of pod p cannot pull image "` + typo + `" (ErrImagePull)`}),
			want: imageCheckDecision{Hold: true, Run: true, Reason: ReasonImagePull}, says: []string{typo, "ErrImagePull", "cannot run it"}},
		{name: "the check failed: held, not retried", f: facts(live, good, "", &imageCheckJob{Failed: true, Message: "exit code 127"}),
			want: imageCheckDecision{Hold: true, Run: true, Reason: ReasonImageCheckFailed}, says: []string{"failed, and is not retried", "exit code 127"}},
		{name: "the check failed with the pod's reason", f: facts(live, good, "", &imageCheckJob{Failed: true, Reason: ReasonImagePull, Message: "DeadlineExceeded"}),
			want: imageCheckDecision{Hold: true, Run: true, Reason: ReasonImagePull}, says: []string{"DeadlineExceeded"}},
		{name: "the check passed: let through, recorded, the Job kept until the record shows", f: facts(live, good, "", &imageCheckJob{Complete: true}),
			want: imageCheckDecision{Run: true, Passed: true}},
		{name: "passed before the cache shows the StatefulSet applied (no live image read)", f: facts("", good, "", &imageCheckJob{Complete: true}),
			want: imageCheckDecision{Run: true, Passed: true}},
		{name: "passed and recorded: the Job goes", f: facts(live, good, good, &imageCheckJob{Complete: true}), want: imageCheckDecision{}},
		{name: "passed and recorded, applied: the Job goes", f: facts(good, good, good, &imageCheckJob{Complete: true}), want: imageCheckDecision{}},
		{name: "a typo after another image was proven: checked", f: facts(good, typo, good, nil),
			want: imageCheckDecision{Hold: true, Run: true, Reason: ReasonImageCheckRunning}},
		{name: "no image rendered", f: facts(live, "", "", nil), want: imageCheckDecision{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := decideImageCheck(tc.f)
			msg := got.Message
			got.Message = ""
			g.Expect(got).To(Equal(tc.want))
			if !tc.want.Hold {
				g.Expect(msg).To(BeEmpty())
			}
			for _, s := range tc.says {
				g.Expect(msg).To(ContainSubstring(s))
			}
		})
	}
}

// TestImageCheckStatus: instanceStatus writes status.checkedImages and the ImageCheckPending
// condition from what the gate found, and leaves Ready alone (the old pod keeps serving).
func TestImageCheckStatus(t *testing.T) {
	g := NewWithT(t)
	prev := &tiledv1alpha1.TiledInstanceStatus{CheckedImages: []tiledv1alpha1.CheckedImage{{StatefulSet: "a-postgres", Image: "postgres:16"}}}
	o := observedInstance{Generation: 2, Namespace: "ns", TiledName: "a", Replicas: 1, External: true}

	// Nothing found: the records stay as they were, no condition.
	s := instanceStatus(prev, o)
	g.Expect(s.CheckedImages).To(Equal(prev.CheckedImages))
	g.Expect(findCondition(s.Conditions, ConditionImageCheckPending)).To(BeNil())

	// A change waits.
	o.CheckedImages = []tiledv1alpha1.CheckedImage{}
	o.ImageCheckReason, o.ImageCheckMessage = ReasonImagePull, "StatefulSet a-postgres keeps image postgres:16: ..."
	s = instanceStatus(prev, o)
	g.Expect(s.CheckedImages).To(BeNil())
	c := findCondition(s.Conditions, ConditionImageCheckPending)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(ReasonImagePull))
	g.Expect(c.Message).To(ContainSubstring("a-postgres"))
	g.Expect(findCondition(s.Conditions, ConditionStalled)).To(BeNil(), "a check that fails stalls nothing: the old pod serves")

	// Passed, recorded; the condition goes.
	o.CheckedImages = []tiledv1alpha1.CheckedImage{{StatefulSet: "a-postgres", Image: "postgres:17"}}
	o.ImageCheckReason, o.ImageCheckMessage = "", ""
	s2 := instanceStatus(s, o)
	g.Expect(s2.CheckedImages).To(Equal(o.CheckedImages))
	g.Expect(findCondition(s2.Conditions, ConditionImageCheckPending)).To(BeNil())
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
