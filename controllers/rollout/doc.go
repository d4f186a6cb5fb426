// Package rollout decides, for each instance a TiledCluster wants, what the cluster controller does
// with it in this reconcile: apply it, leave it held (spec.instances[].hold during beamtime), keep it
// waiting for the rollout budget (spec.rollout.maxUnavailable), or refuse it because another owner
// holds its name.
//
// Everything here is pure: Plan takes what the controller observed (the desired instances in the
// cluster's order, whether each exists, is controlled by this cluster, is up to date and is Ready)
// and the budget, and returns the decisions; the controller applies them. The rule is the
// Deployment's: new instances and instances that are not Ready anyway are applied at once; Ready
// instances that need a change are changed at most maxUnavailable at a time, counting the instances
// already unavailable. Held instances are neither unavailable nor take from the budget.
//
// A change of what the operator renders for an instance whose spec did not change (a new operator
// release: a new default, label or probe in the pod template) is rolled the same way: the instance
// controller does not apply it but reports it (status.pendingRollout), Plan treats such an instance
// as one that needs a change (Instance.RenderPending), and the controller approves it when the plan
// applies it (Decision.Approve). TemplateDiff names what such a change changes in the pod template.
package rollout
