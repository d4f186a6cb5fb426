// Package eventonce sends each Event of the operator at most once per object version.
//
// client-go's Event broadcaster (k8s.io/client-go/tools/events) counts an Event that repeats an
// earlier one — the same regarding object at the same resourceVersion, the same related object,
// action, reason and reporting controller — as a series: it patches the first Event instead of
// creating another, and patches it again when the series ends. The operator is granted create on
// events.k8s.io Events and nothing else (docs/rbac.md: one Event per transition), so such a patch
// is refused, and the refusal lands in the operator's log. A transition's Event can repeat: the
// reconcile after the one that wrote a transition can start before the cache shows the write, see
// the same transition against the same stale object, and announce it again. The repeat says
// nothing new (the object has not changed since), so Recorder drops it.
package eventonce
