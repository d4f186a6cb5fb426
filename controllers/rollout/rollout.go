package rollout

import (
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Action is what the controller does with one desired instance.
type Action string

const (
	// Apply: the instance is applied (created, changed, or confirmed unchanged).
	Apply Action = "Apply"
	// Hold: the instance exists, is held, and its expansion changed in fields it shows; it is left as
	// it is.
	Hold Action = "Hold"
	// Wait: the instance is Ready and needs a change, and the budget is spent; it waits for a later
	// reconcile.
	Wait Action = "Wait"
	// Refuse: a TiledInstance of that name exists that this cluster does not control; it is neither
	// adopted nor shared.
	Refuse Action = "Refuse"
)

// Instance is what the controller observed about one instance the cluster wants.
type Instance struct {
	// Name is the TiledInstance's name.
	Name string
	// Exists: a TiledInstance of that name exists in the namespace (whoever controls it).
	Exists bool
	// Foreign says who holds an existing instance this cluster does not control ("" when this
	// cluster controls it, or it does not exist).
	Foreign string
	// UpToDate: the existing instance carries the expansion hash of its intent.
	UpToDate bool
	// Ready: the existing instance is Ready at its current generation.
	Ready bool
	// Held: spec.instances[].hold is set and the change shows in at least one field (the controller
	// compares only held instances that exist and are not up to date or have a render change
	// pending; for others it is ignored).
	Held bool
	// RenderPending: the existing instance is up to date but reports a change of its pod template
	// that the operator's render makes without a change of its spec (status.pendingRollout, a new
	// operator release); it needs a change like an instance that is not up to date, and is approved
	// when applied (Decision.Approve).
	RenderPending bool
}

// Decision is the plan for one instance.
type Decision struct {
	Name   string
	Action Action
	// Foreign is the instance's Foreign, for a Refuse.
	Foreign string
	// CountsReady: the instance counts as ready once applied (up to date and Ready), or is held and
	// Ready (serving on the spec it had).
	CountsReady bool
	// Member: an existing instance this cluster controls (Refuse excluded).
	Member bool
	// Approve: the instance is applied with the approval of its pending render change
	// (Instance.RenderPending).
	Approve bool
}

// Plan is the rollout plan of one reconcile.
type Plan struct {
	// Decisions, one per desired instance, in the order given.
	Decisions []Decision
	// MaxUnavailable is the budget the plan was made with.
	MaxUnavailable int
	// Unavailable counts the members that are not Ready (held ones excepted) before any change.
	Unavailable int
	// Pending counts the Wait decisions, Held the Hold decisions, Refused the Refuse decisions.
	Pending, Held, Refused int
}

// Make plans one reconcile of a cluster: desired in the cluster's order, maxUnavailable from
// MaxUnavailable.
func Make(desired []Instance, maxUnavailable int) Plan {
	p := Plan{MaxUnavailable: maxUnavailable, Decisions: make([]Decision, 0, len(desired))}
	held := func(in Instance) bool { return in.Held && in.needsChange() }
	for _, in := range desired {
		if in.member() && !held(in) && !in.Ready {
			p.Unavailable++
		}
	}
	budget := maxUnavailable - p.Unavailable
	for _, in := range desired {
		d := Decision{Name: in.Name, Member: in.member()}
		switch {
		case in.Exists && in.Foreign != "":
			d.Action, d.Foreign = Refuse, in.Foreign
			p.Refused++
		case held(in):
			d.Action, d.CountsReady = Hold, in.Ready
			p.Held++
		case in.needsChange() && in.Ready && budget <= 0:
			d.Action = Wait
			p.Pending++
		default:
			if in.needsChange() && in.Ready {
				budget--
			}
			d.Action, d.CountsReady = Apply, in.member() && !in.needsChange() && in.Ready
			d.Approve = in.member() && in.RenderPending
		}
		p.Decisions = append(p.Decisions, d)
	}
	return p
}

// member: the instance exists and this cluster controls it.
func (in Instance) member() bool { return in.Exists && in.Foreign == "" }

// needsChange: a member whose spec is not up to date, or that has a render change pending.
func (in Instance) needsChange() bool { return in.member() && (!in.UpToDate || in.RenderPending) }

// MaxUnavailable is the budget spec.rollout.maxUnavailable gives for total instances: 1 when unset,
// a percentage rounded up, never less than 1.
func MaxUnavailable(value *intstr.IntOrString, total int) int {
	if value == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(value, total, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}
