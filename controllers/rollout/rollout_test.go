package rollout

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Shorthands for observed instances.
var (
	missing  = Instance{}
	current  = Instance{Exists: true, UpToDate: true, Ready: true}
	stale    = Instance{Exists: true, Ready: true}
	down     = Instance{Exists: true}
	downNew  = Instance{Exists: true, UpToDate: true}
	foreign  = Instance{Exists: true, Foreign: "has no controller (made by hand)", Ready: true}
	heldUp   = Instance{Exists: true, Ready: true, Held: true}
	heldDown = Instance{Exists: true, Held: true}
	// rendered: up to date, Ready, with a change of its pod template the operator's render makes
	// (a new operator release).
	rendered     = Instance{Exists: true, UpToDate: true, Ready: true, RenderPending: true}
	renderedDown = Instance{Exists: true, UpToDate: true, RenderPending: true}
	renderedHeld = Instance{Exists: true, UpToDate: true, Ready: true, RenderPending: true, Held: true}
)

func named(in Instance, name string) Instance { in.Name = name; return in }

func TestMake(t *testing.T) {
	cases := []struct {
		name    string
		desired []Instance
		max     int
		actions []Action
		ready   []bool
		// unavailable, pending, held, refused
		counts [4]int
		// approve, when not nil, is each decision's Approve.
		approve []bool
	}{
		{name: "empty", max: 1},
		{
			name:    "new instances are applied at once, whatever the budget",
			desired: []Instance{missing, missing, missing}, max: 1,
			actions: []Action{Apply, Apply, Apply}, ready: []bool{false, false, false},
		},
		{
			name:    "up-to-date ready instances are applied (a no-op) and count ready",
			desired: []Instance{current, current}, max: 1,
			actions: []Action{Apply, Apply}, ready: []bool{true, true},
		},
		{
			name:    "ready instances that need a change: maxUnavailable at a time, in order",
			desired: []Instance{stale, stale, stale, stale}, max: 2,
			actions: []Action{Apply, Apply, Wait, Wait}, ready: []bool{false, false, false, false},
			counts: [4]int{0, 2, 0, 0},
		},
		{
			name:    "instances already unavailable spend the budget and are applied anyway",
			desired: []Instance{down, stale, stale}, max: 1,
			actions: []Action{Apply, Wait, Wait}, ready: []bool{false, false, false},
			counts: [4]int{1, 2, 0, 0},
		},
		{
			name:    "an up-to-date instance not ready yet counts as unavailable",
			desired: []Instance{downNew, stale, stale}, max: 2,
			actions: []Action{Apply, Apply, Wait}, ready: []bool{false, false, false},
			counts: [4]int{1, 1, 0, 0},
		},
		{
			name:    "more unavailable than the budget: ready instances all wait",
			desired: []Instance{down, down, stale}, max: 1,
			actions: []Action{Apply, Apply, Wait}, ready: []bool{false, false, false},
			counts: [4]int{2, 1, 0, 0},
		},
		{
			name:    "held instances are left, neither unavailable nor spending the budget",
			desired: []Instance{heldDown, heldUp, stale}, max: 1,
			actions: []Action{Hold, Hold, Apply}, ready: []bool{false, true, false},
			counts: [4]int{0, 0, 2, 0},
		},
		{
			name:    "a hold protects only an instance that exists and differs",
			desired: []Instance{{Held: true}, {Exists: true, UpToDate: true, Ready: true, Held: true}}, max: 1,
			actions: []Action{Apply, Apply}, ready: []bool{false, true},
		},
		{
			name:    "a name another owner holds is refused, not counted, not a member",
			desired: []Instance{foreign, stale}, max: 1,
			actions: []Action{Refuse, Apply}, ready: []bool{false, false},
			counts: [4]int{0, 0, 0, 1},
		},
		{
			name:    "a foreign instance that is not ready takes nothing from the budget",
			desired: []Instance{{Exists: true, Foreign: "is controlled by TiledCluster other"}, stale}, max: 1,
			actions: []Action{Refuse, Apply}, ready: []bool{false, false},
			counts: [4]int{0, 0, 0, 1},
		},
		{
			name:    "render changes roll like spec changes: maxUnavailable at a time, approved when applied",
			desired: []Instance{rendered, rendered, rendered}, max: 1,
			actions: []Action{Apply, Wait, Wait}, ready: []bool{false, false, false},
			counts: [4]int{0, 2, 0, 0}, approve: []bool{true, false, false},
		},
		{
			name:    "render and spec changes share one budget",
			desired: []Instance{stale, rendered, rendered}, max: 2,
			actions: []Action{Apply, Apply, Wait}, ready: []bool{false, false, false},
			counts: [4]int{0, 1, 0, 0}, approve: []bool{false, true, false},
		},
		{
			name:    "a render change waits while an instance rolls (unavailable)",
			desired: []Instance{downNew, rendered, current}, max: 1,
			actions: []Action{Apply, Wait, Apply}, ready: []bool{false, false, true},
			counts: [4]int{1, 1, 0, 0}, approve: []bool{false, false, false},
		},
		{
			name:    "an instance not ready with a render change is approved at once",
			desired: []Instance{renderedDown, rendered}, max: 1,
			actions: []Action{Apply, Wait}, ready: []bool{false, false},
			counts: [4]int{1, 1, 0, 0}, approve: []bool{true, false},
		},
		{
			name:    "a held instance's render change is held and spends no budget",
			desired: []Instance{renderedHeld, rendered}, max: 1,
			actions: []Action{Hold, Apply}, ready: []bool{true, false},
			counts: [4]int{0, 0, 1, 0}, approve: []bool{false, true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			desired := make([]Instance, len(tc.desired))
			for i, in := range tc.desired {
				desired[i] = named(in, string(rune('a'+i)))
			}
			p := Make(desired, tc.max)
			g.Expect(p.Decisions).To(HaveLen(len(desired)))
			for i, d := range p.Decisions {
				g.Expect(d.Name).To(Equal(desired[i].Name), "decisions keep the order given")
				g.Expect(d.Action).To(Equal(tc.actions[i]), "action of %s", d.Name)
				g.Expect(d.CountsReady).To(Equal(tc.ready[i]), "ready of %s", d.Name)
				g.Expect(d.Member).To(Equal(desired[i].Exists && desired[i].Foreign == ""), "member %s", d.Name)
				if d.Action == Refuse {
					g.Expect(d.Foreign).To(Equal(desired[i].Foreign))
				}
				if tc.approve != nil {
					g.Expect(d.Approve).To(Equal(tc.approve[i]), "approve %s", d.Name)
				} else {
					g.Expect(d.Approve).To(BeFalse(), "approve %s", d.Name)
				}
			}
			g.Expect([4]int{p.Unavailable, p.Pending, p.Held, p.Refused}).To(Equal(tc.counts))
			g.Expect(p.MaxUnavailable).To(Equal(tc.max))
		})
	}
}

func TestMaxUnavailable(t *testing.T) {
	g := NewWithT(t)
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	g.Expect(MaxUnavailable(nil, 30)).To(Equal(1), "unset")
	g.Expect(MaxUnavailable(num(3), 30)).To(Equal(3))
	g.Expect(MaxUnavailable(num(0), 30)).To(Equal(1), "never less than 1")
	g.Expect(MaxUnavailable(pct("10%"), 30)).To(Equal(3))
	g.Expect(MaxUnavailable(pct("10%"), 31)).To(Equal(4), "rounded up")
	g.Expect(MaxUnavailable(pct("1%"), 0)).To(Equal(1))
	g.Expect(MaxUnavailable(pct("bogus"), 30)).To(Equal(1), "unparsable")
}
