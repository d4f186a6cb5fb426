package profiles

import "fmt"

// SelectorError reports a profile selector that cannot be used: a TiledCluster without one (nil is
// rejected so that a cluster never takes profiles by accident) or one that does not parse.
type SelectorError struct {
	// Object names the object holding the selector: "cluster/<name>", "cluster/<name>/instance/<instance>"
	// or "instance/<name>".
	Object string
	// Field is the path of the selector, e.g. spec.profileSelector.
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *SelectorError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Object, e.Field, e.Reason)
}

// NoProfilesError reports a selector that matches no profile in the namespace. It is an error,
// not a warning: a selector that matches nothing is almost always a typo, and expanding without
// the facility's defaults would roll every instance back to the built-in defaults.
type NoProfilesError struct {
	// Object and Field name the selector as in SelectorError.
	Object, Field string
	// Selector is the selector in the label-query syntax, e.g. "facility=nsls2".
	Selector string
	// Namespace is the namespace that was searched.
	Namespace string
}

func (e *NoProfilesError) Error() string {
	return fmt.Sprintf("%s: %s: selector %q matches no TiledProfile in namespace %q", e.Object, e.Field, e.Selector, e.Namespace)
}
