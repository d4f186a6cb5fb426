// Package schemacheck validates TiledClusters, TiledProfiles and TiledInstances read from files as
// the API server validates a custom resource before admitting it: the object's metadata (name,
// labels, annotations... with apimachinery's ValidateObjectMetaAccessor), then the CRD's defaults,
// its OpenAPI schema, list-map keys and x-kubernetes-validations CEL rules, with
// apiextensions-apiserver's own validators. kubectl-tiled uses it, so that a CI pipeline sees the refusal the API server would
// give without a cluster.
//
// It is a package of its own, apart from expansion, because the validators bring most of
// k8s.io/apiserver with them; the manager never needs them (the API server itself validates what
// the manager writes), and its binary, and so its resident memory, stays smaller without them.
package schemacheck
