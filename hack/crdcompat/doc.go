// Package crdcompat checks that a new set of CustomResourceDefinitions can replace an old one on a
// running cluster without disturbing the objects already stored there. It is the static half of the
// project's CRD upgrade checks (issue 31): the dynamic half, test/integration/crdupgrade, installs the
// previous release's CRDs on a real kube-apiserver, stores objects through them, and then applies the
// checkout's CRDs over them.
//
// # What is compared
//
// Compare walks every CRD of the old set (matched by metadata.name, that is plural.group) and, in it,
// every version the old CRD serves. For each such version it walks the old version's
// openAPIV3Schema from the root, property by property, and looks up the same path in the new
// version's schema. A Problem is something that can break an object already stored, or a client that
// read and wrote it through the old schema:
//
//   - the CRD missing from the new set; its scope or kind changed; its status or scale subresource
//     removed (status writes of the operator would fail);
//   - a served version missing, or no longer served;
//   - the storage version changed while the old storage version is no longer served (the objects
//     in etcd are encoded in it, and status.storedVersions still lists it);
//   - a property path of the old schema missing in the new one: with structural pruning the
//     apiserver drops the field from every stored object the next time it is read, silently;
//     likewise array items or map values (additionalProperties) that lost their schema;
//   - a different type, format, x-kubernetes-int-or-string, x-kubernetes-embedded-resource,
//     x-kubernetes-preserve-unknown-fields, x-kubernetes-list-type, x-kubernetes-list-map-keys or
//     x-kubernetes-map-type (a list type or a map type that is not set is compared as its default,
//     atomic and granular, so spelling the default out is not a change);
//   - nullable turned off (a stored null is refused at the next update);
//   - a property that became required in an object that existed before, whether the property
//     itself is old or new (stored objects without it are refused at their next update);
//   - an enum that lost values, or an enum added where there was none.
//
// A Warning is a change that is legal and leaves stored objects readable, but may refuse the next
// update of some of them, so that a maintainer should look at it before a release:
//
//   - a new x-kubernetes-validations (CEL) rule at a path that existed before, reported with the
//     rule's text (kube-apiserver's validation ratcheting lets an update through when the failing
//     value did not change, but not a rule that compares with oldSelf, nor a changed value);
//   - a tightened value validation: a new or changed pattern; a lower maximum, maxLength, maxItems
//     or maxProperties; a higher minimum, minLength, minItems or minProperties; an exclusive bound
//     switched on; a new or changed multipleOf; a change in allOf, anyOf, oneOf or not;
//   - a status subresource added (a client that wrote status through the main resource no longer
//     can).
//
// Everything else is allowed and not reported: new CRDs, new versions, new properties (optional),
// new enum values, removed required entries, descriptions, defaults, printer columns, and
// x-kubernetes-validations rules that were removed or that apply to new properties only.
//
// # Paths
//
// A path is written from the version's root schema: ".spec.tiled.image" for a property, "[*]" for
// the items of an array (".spec.instances[*].name") and ".*" for the values of a map
// (additionalProperties: ".metadata.labels.*"); "." is the root. A Finding prints as
//
//	tiledinstances.tiled.blueskyproject.io v1alpha1: .spec.tiled.image: type string -> integer
//
// # The previous release
//
// The package's tests hold the check against the project's previous release: testdata/previous
// holds that release's three CRDs (written by refresh.sh from the commit in hack/previous-release),
// and TestPreviousReleaseCompatible fails listing every Problem between them and
// config/crd/bases. README.md describes the maintainers' steps.
//
// The package has no client and reads nothing but the files it is given: Compare is pure.
package crdcompat
