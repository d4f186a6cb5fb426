package childset

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/bluesky/tiled-operator/controllers/applier"
)

// Refusal classifies an apply error as a refusal that retrying cannot mend, and names its class; ""
// for success and for errors worth retrying (timeouts, the API server unavailable, throttling).
func Refusal(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsBadRequest(err):
		return "bad request"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsRequestEntityTooLargeError(err):
		return "too large"
	case strings.Contains(err.Error(), "failed to create typed patch object"),
		strings.Contains(err.Error(), "duplicate entries for key"):
		// The apply cannot be merged with the object's schema (e.g. two entries of a keyed list
		// with the same key): the API server answers 500, but the same request fails every time.
		return "not mergeable"
	}
	return ""
}

// RefusedError is a child the API server refuses in a way no retry can mend: invalid (such as the
// access modes or storage class of an existing claim), forbidden, a request it cannot even turn into
// a patch, or a conflict that outlived a retry. Apply returns it for the first refusal unless
// Options.ContinueOnRefusal.
type RefusedError struct {
	// Key names the child.
	Key applier.Key
	// Reason is the refusal's class (Refusal).
	Reason string
	// Err is the API server's answer.
	Err error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the API server refuses the change to %s (%s; objects before it in order were applied, the rest are left as they were); "+
		"revert the setting, or delete the object if it may be recreated: %v", e.Key, e.Reason, e.Err)
}
