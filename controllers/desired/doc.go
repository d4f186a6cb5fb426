// Package desired computes what the operator wants to exist, apart from any client: it reads
// nothing from the API server or the cache, and is handed everything it computes from. It owns the
// caches of what it computed, so that a reconcile whose inputs have not changed (the most common
// kind: one caused by a status) does not compute them again.
//
// Two levels, each with its cache (forgotten when its owner goes; controllers/memories.go names
// them with the controllers' other memories):
//
//   - Expansions: the TiledInstances of a TiledCluster, from expansion.Expand of the cluster and the
//     profiles of its namespace. Per cluster it keeps the last expansion's apply intents (names,
//     hashes and the applier's prepared form, not objects), keyed by the expansion's inputs; the
//     expanded instances only while a rollout still has some to apply; and, per held instance, the
//     fields in which the stored instance differs from its expansion. Instances is one reconcile's
//     view of it: it runs the engine again, at most once, only when an instance must be sent or
//     compared.
//   - Renders: the children of a TiledInstance, from render.Render of its expanded spec and
//     render's other inputs. Per instance it keeps the applier's prepared form of the last render's
//     objects and a hash of the inputs it came from. Children is one reconcile's view of it: it
//     renders again, at most once, only when a child must be sent.
//
// The objects are built as the applier hashes them, byte for byte as they always were (the
// TiledInstance from the typed object with the cluster's controller reference and the expansion
// hash; each child with its instance's controller reference, except what the Retain policy keeps):
// a different encoding would make the applier send every object of a fleet again after an upgrade.
package desired
