package expansion

import (
	"fmt"
	"strings"

	"github.com/bluesky/tiled-operator/profiles"
)

// SelectorError and NoProfilesError come from profile selection; they are the same types as in
// package profiles, so errors.As works with either name.
type (
	SelectorError   = profiles.SelectorError
	NoProfilesError = profiles.NoProfilesError
)

// ConflictError reports two profiles of equal priority that set one field to different values, or
// choose different members of a mutually exclusive group (e.g. database.managed and
// database.external). Profiles of different priorities never conflict: the higher one wins.
type ConflictError struct {
	// Instance is the short name of the instance being expanded when the conflict was found.
	Instance string
	// Field is the path of the field, in the TiledInstance, e.g. spec.tiled.image.
	Field string
	// Profiles are the provenance sources of the two profiles, lower name first,
	// e.g. profile/a@1 and profile/b@4.
	Profiles [2]string
	// Priority is the priority both profiles have.
	Priority int32
	// Values are the two values (JSON), or the two members chosen for a mutually exclusive group.
	Values [2]string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("instance %s: profiles %s and %s have equal priority %d and set %s differently (%s and %s); change one priority or remove the field from one profile",
		e.Instance, e.Profiles[0], e.Profiles[1], e.Priority, e.Field, e.Values[0], e.Values[1])
}

// ExpressionReason says at which step a CEL expression failed.
type ExpressionReason string

const (
	// ExpressionCompile: the expression does not parse or refers to unknown names.
	ExpressionCompile ExpressionReason = "compile"
	// ExpressionType: the expression's type does not fit the field it computes.
	ExpressionType ExpressionReason = "type"
	// ExpressionCost: the evaluation exceeded ExpressionCostLimit.
	ExpressionCost ExpressionReason = "cost"
	// ExpressionEval: the evaluation failed, e.g. a missing map key.
	ExpressionEval ExpressionReason = "eval"
)

// ExpressionError reports a CEL expression that failed to compile, type-check or evaluate.
type ExpressionError struct {
	// Layer is the provenance source of the layer holding the expression, e.g. profile/nsls2@3.
	Layer string
	// Instance is the instance being expanded when evaluation failed (empty for compile and type
	// errors, which do not depend on the instance).
	Instance string
	// Field is the path of the expression field, e.g. spec.expose.ingress.hostExpression.
	Field string
	// Expression is the source text of the expression.
	Expression string
	// Reason is the step that failed.
	Reason ExpressionReason
	// Err is the underlying error.
	Err error
}

func (e *ExpressionError) Error() string {
	where := e.Layer
	if e.Instance != "" {
		where = fmt.Sprintf("%s (instance %s)", e.Layer, e.Instance)
	}
	return fmt.Sprintf("%s: %s: expression %q: %s: %v", where, e.Field, e.Expression, e.Reason, e.Err)
}

func (e *ExpressionError) Unwrap() error { return e.Err }

// UnknownFieldError reports a field the CRD's schema does not declare, e.g. a misspelt override.
type UnknownFieldError struct {
	// Object is the kind and name of the object, e.g. TiledCluster/nsls2 (set by Decode).
	Object string
	// Layer is the provenance source of the layer holding the field, e.g. instance/chx/overrides
	// (empty for fields outside any layer, such as a cluster's profileSelector).
	Layer string
	// Field is the path of the unknown field within the layer, as in a TiledInstance, e.g.
	// spec.storage.data.sise; outside a layer, the path within the object.
	Field string
}

func (e *UnknownFieldError) Error() string {
	return fmt.Sprintf("%s%s: field not declared in the schema", where(e.Object, e.Layer), e.Field)
}

func where(object, layer string) string {
	var b strings.Builder
	for _, s := range []string{object, layer} {
		if s != "" {
			b.WriteString(s)
			b.WriteString(": ")
		}
	}
	return b.String()
}

// InvalidFieldError reports a value that is refused for a reason other than an unknown field: one
// the schema rejects (two env entries with the same name, a value of the wrong type), or one the
// API server would refuse on the objects made from it, or that can never run (an image reference
// with a space, a memory request above its limit, an NFS volume without a server), or two
// instances whose objects would share a name.
type InvalidFieldError struct {
	// Object, Layer and Field are as in UnknownFieldError. For a value of an expanded instance,
	// Layer is the provenance source that set it (the highest of those that set the fields taking
	// part), e.g. instance/chx/overrides or profile/nsls2@3 (expression).
	Object, Layer, Field string
	// Instance is the short name of the instance whose expanded spec holds the value, or "".
	Instance string
	// Reason says what is wrong.
	Reason string
}

func (e *InvalidFieldError) Error() string {
	w := where(e.Object, e.Layer)
	if e.Instance != "" {
		w = fmt.Sprintf("%sinstance %s: ", w, e.Instance)
	}
	return fmt.Sprintf("%s%s: %s", w, e.Field, e.Reason)
}
