// Package expansion turns a terse TiledCluster, and the TiledProfiles it selects, into the complete
// spec of every TiledInstance, recording where each field came from. It is the one expansion the
// controller, the mutating webhook and kubectl-tiled share, and it is pure: no client, no clock, no
// dependence on the order of its input lists or of map iteration. The same input gives
// byte-identical Marshal output.
//
// # Layers
//
// An instance's spec is built from layers, lowest to highest:
//
//  1. the built-in defaults (Builtins; DefaultBuiltins at BuiltinsVersion, with the Tiled image
//     taken from TiledVersion and every image from BuiltinImages, which Builtins.WithImages
//     replaces: the manager passes the images of its RELATED_IMAGE_<ROLE> variables, read by
//     ImagesFromEnvironment, since the engine reads no environment);
//  2. the instance's profiles, ordered by (priority, name) — the cluster's profileSelector selects
//     profiles for every instance, and an instance's own profileSelector adds more for that instance
//     (a union; see package profiles);
//  3. the cluster's spec.template;
//  4. the instance's spec.instances[].overrides.
//
// For a standalone TiledInstance (ExpandInstance), the layers are the built-in defaults, the
// profiles its spec.profileSelector selects, and its own spec.
//
// # Merging
//
// Each layer is converted to a structured-merge-diff typed value with the CRD's own OpenAPI schema
// (built once per process from the embedded CRDs' schemas, named and tagged as the API server
// publishes them, by managedfields.NewTypeConverter), and the layers are merged with
// TypedValue.Merge, each one as if it were a field manager applying its fragment (an equivalent,
// faster order of the same merges is described in docs/design.md). So the merge follows the schema
// exactly: maps and
// objects merge field by field, scalars replace, lists marked +listType=map (env and OIDC providers
// by name, read-only mounts by name) merge item by item by key, and other lists are replaced whole.
// A field the schema does not declare is an *UnknownFieldError.
//
// # Exclusive groups
//
// Some fields are mutually exclusive (database.managed and database.external; storage.data.nfs and
// storage.data.existingClaimName; the same for each read-only mount; auth.singleUserAPIKey and
// auth.oidc; env[].value and env[].valueFrom). The groups are read from the CRD's own CEL validation
// rules. The highest layer that sets a member of a group chooses it, and the other members are
// dropped, whichever layers set them; the chosen member keeps what every layer set in it. So a
// cluster switches one beamline to an external database by setting database.external alone, a
// later switch back to database.managed restores the managed database's defaults, and the result
// never violates the CRD. One layer setting two members of a group is an *InvalidFieldError.
//
// # Expressions
//
// A field named <x>Expression (nfs.pathExpression, ingress.hostExpression, env[].valueExpression)
// holds a CEL expression that computes its sibling <x> for each instance, over the variables
// instance and cluster, each with name, namespace and labels (namespace is a field, not a variable
// of its own, because CEL reserves the word), with cel-go's string extensions.
// Each expression is compiled once per Expand call, type-checked against the schema type of the
// field it computes, and evaluated with a cost limit (ExpressionCostLimit). A layer's expressions
// are evaluated before the layer is merged, and the expression field is replaced by its value: a
// higher layer's literal path therefore beats a lower layer's pathExpression, and the expanded spec
// holds values, not expressions. Failures are *ExpressionError values naming the layer, the field,
// the expression and the step (compile, type, cost, eval).
//
// # Provenance
//
// Every leaf of the expanded spec has a provenance entry: its path (spec.storage.data.size;
// keyed-list items as spec.tiled.env[name=FOO].value; map keys that are not plain names as
// spec.tiled.podAnnotations["example.org/team"]) maps to the highest layer whose field set holds it:
// "default", "profile/<name>@<generation>", "cluster/template", "instance/<name>/overrides" or
// "instance", with " (expression)" appended when an expression computed the value; a built-in
// image WithImages replaced is "default (RELATED_IMAGE_<ROLE>)" (IsDefaultSource). Why answers
// "where does this field come from" from it.
//
// # Conflicts
//
// Two profiles of equal priority that set one leaf to different values, or pick different members
// of an exclusive group, are a *ConflictError naming both profiles, the priority and the field.
// Profiles of different priority never conflict: the higher wins. Equal values do not conflict.
//
// # Errors
//
// Every failure is a typed error (errors.As): *SelectorError, *NoProfilesError, *ConflictError,
// *ExpressionError, *UnknownFieldError, *InvalidFieldError. No partial result is ever returned.
//
// # Reading and printing
//
// Decode and DecodeAll read TiledClusters, TiledProfiles and TiledInstances from YAML or JSON and
// check them against the CRDs' schemas, so that a misspelt override is an *UnknownFieldError naming
// the object, the layer and the field. Marshal renders expanded instances as YAML, the one rendering
// shared by kubectl-tiled and the golden files. Why lists the value and source of a field of an
// expanded instance, or of every leaf beneath it.
//
// # Names
//
// The TiledInstance of instance i of cluster c is named names.Instance(c, i) = "<c>-<i>", shortened
// with a stable hash when too long. Package names decides every name (this package and render call
// it; names.For names an instance's children), and its output is frozen: live objects are found by
// these names. Instances are labelled with the cluster (v1alpha1.LabelCluster, its value
// names.LabelValue of the cluster's name), the instance (v1alpha1.LabelInstance) and
// v1alpha1.LabelManagedBy.
package expansion
