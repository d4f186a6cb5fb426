// Package applier writes objects the only way the operator writes: server-side apply, under one
// field owner, with ForceOwnership for the objects it owns. It skips an apply whose intent it has
// already applied to the object as the informer cache holds it now, so that a resync of unchanged
// objects costs no request, while an object another writer changed (or deleted) is applied again.
//
// The no-op cache is keyed by object (kind, namespace, name) and holds the hash of the last intent
// applied and the object's version after that apply (its generation where the kind has one, so that
// status updates by other controllers do not count as changes, otherwise its resourceVersion). A
// stale informer cache — one that has not yet seen the result of the operator's own apply — is
// recognised and not mistaken for a change.
package applier
