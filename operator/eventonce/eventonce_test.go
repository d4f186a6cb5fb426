package eventonce

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// sink records what reaches the wrapped recorder.
type sink struct{ got []string }

func (s *sink) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	m := regarding.(metav1.Object)
	s.got = append(s.got, fmt.Sprintf("%s@%s %s %s %s %s", m.GetName(), m.GetResourceVersion(), eventtype, reason, action, fmt.Sprintf(note, args...)))
}

var _ events.EventRecorder = (*sink)(nil)

func pod(name, uid, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: apitypes.UID("uid-" + uid), ResourceVersion: rv}}
}

func TestAnEventIsSentOncePerObjectVersion(t *testing.T) {
	type send struct {
		obj            *corev1.Pod
		related        *corev1.Pod
		reason, action string
		note           string
		after          time.Duration
	}
	a1, a2, b1 := pod("a", "a", "1"), pod("a", "a", "2"), pod("b", "b", "1")
	for _, tc := range []struct {
		name  string
		sends []send
		want  []string
	}{
		{name: "a transition announced twice against the same stale object: once (the repeat would be a series, a patch)",
			sends: []send{{obj: a1, reason: "Ready", action: "Reconcile", note: "up"}, {obj: a1, reason: "Ready", action: "Reconcile", note: "up"}},
			want:  []string{"a@1 Normal Ready Reconcile up"}},
		{name: "a different note is still the same series for client-go: once",
			sends: []send{{obj: a1, reason: "Ready", action: "Reconcile", note: "up"}, {obj: a1, reason: "Ready", action: "Reconcile", note: "up again"}},
			want:  []string{"a@1 Normal Ready Reconcile up"}},
		{name: "the object changed since: both",
			sends: []send{{obj: a1, reason: "Ready", action: "Reconcile", note: "up"}, {obj: a2, reason: "Ready", action: "Reconcile", note: "up"}},
			want:  []string{"a@1 Normal Ready Reconcile up", "a@2 Normal Ready Reconcile up"}},
		{name: "another object, reason, action or related object: each",
			sends: []send{
				{obj: a1, reason: "Ready", action: "Reconcile", note: "up"}, {obj: b1, reason: "Ready", action: "Reconcile", note: "up"},
				{obj: a1, reason: "Stalled", action: "Reconcile", note: "x"}, {obj: a1, reason: "Ready", action: "Backup", note: "up"},
				{obj: a1, related: b1, reason: "Ready", action: "Reconcile", note: "up"},
			},
			want: []string{"a@1 Normal Ready Reconcile up", "b@1 Normal Ready Reconcile up", "a@1 Normal Stalled Reconcile x",
				"a@1 Normal Ready Backup up", "a@1 Normal Ready Reconcile up"}},
		{name: "past the window the broadcaster has forgotten the first: sent again",
			sends: []send{{obj: a1, reason: "Ready", action: "Reconcile", note: "up"}, {obj: a1, reason: "Ready", action: "Reconcile", note: "up", after: Window + time.Second}},
			want:  []string{"a@1 Normal Ready Reconcile up", "a@1 Normal Ready Reconcile up"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &sink{}
			r := New(s)
			now := time.Unix(1000, 0)
			r.now = func() time.Time { return now }
			for _, e := range tc.sends {
				now = now.Add(e.after)
				var related runtime.Object
				if e.related != nil {
					related = e.related
				}
				r.Eventf(e.obj, related, corev1.EventTypeNormal, e.reason, e.action, "%s", e.note)
			}
			g.Expect(s.got).To(Equal(tc.want))
		})
	}
}

func TestTheMemoryIsSwept(t *testing.T) {
	g := NewWithT(t)
	r := New(&sink{})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for i := range 100 {
		r.Eventf(pod("a", "a", fmt.Sprint(i)), nil, corev1.EventTypeNormal, "Ready", "Reconcile", "up")
	}
	g.Expect(r.sent).To(HaveLen(100))
	now = now.Add(2*Window + time.Second)
	r.Eventf(pod("b", "b", "1"), nil, corev1.EventTypeNormal, "Ready", "Reconcile", "up")
	g.Expect(r.sent).To(HaveLen(1), "keys older than the window are dropped")
}
