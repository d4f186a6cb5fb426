package childset

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestRefusal: each class of error the API server gives for a change it will never accept is a
// refusal (the instance stalls, naming it); transient errors are not (the reconcile retries).
func TestRefusal(t *testing.T) {
	sts := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "data", field.ErrorList{field.Forbidden(field.NewPath("spec"), "immutable")}), "invalid"},
		{apierrors.NewForbidden(sts, "a", errors.New("RBAC: no")), "forbidden"},
		{apierrors.NewBadRequest("bad"), "bad request"},
		{apierrors.NewConflict(sts, "a", errors.New("modified")), "conflict"},
		{apierrors.NewRequestEntityTooLargeError("limit is 3145728"), "too large"},
		{fmt.Errorf("applying: %w", apierrors.NewInternalError(errors.New(`failed to create typed patch object (ns/a; apps/v1, Kind=StatefulSet): .spec.template.spec.containers[name="tiled"].volumeMounts: duplicate entries for key [mountPath="/data"]`))), "not mergeable"},
		{apierrors.NewServiceUnavailable("etcd"), ""},
		{apierrors.NewTimeoutError("slow", 1), ""},
		{apierrors.NewTooManyRequests("throttled", 1), ""},
		{errors.New("connection refused"), ""},
	} {
		g := NewWithT(t)
		g.Expect(Refusal(tc.err)).To(Equal(tc.want), "%v", tc.err)
	}
}
