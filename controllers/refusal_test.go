package controllers

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
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
		g.Expect(refusal(tc.err)).To(Equal(tc.want), "%v", tc.err)
	}
}

// TestStalledMembers: the cluster's Stalled message counts every stalled or refused member and
// names the first few, sorted, with their reasons.
func TestStalledMembers(t *testing.T) {
	g := NewWithT(t)
	member := func(name, reason string) *tiledv1alpha1.TiledInstance {
		ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if reason != "" {
			ti.Status.Conditions = []metav1.Condition{{Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: "pod " + name + "-0"}}
		}
		return ti
	}
	g.Expect(stalledMembers("fleet", 2, []*tiledv1alpha1.TiledInstance{member("fleet-a", ""), member("fleet-b", "")}, nil)).To(BeEmpty())
	msg := stalledMembers("fleet", 6, []*tiledv1alpha1.TiledInstance{
		member("fleet-d", ReasonImagePull), member("fleet-a", ""), member("fleet-b", ReasonCrashLoop), member("fleet-e", ReasonCrashLoop),
	}, []string{"fleet-c (invalid: spec.storage.data.size)"})
	g.Expect(msg).To(Equal("4 of 6 instances stalled: fleet-b (CrashLoopBackOff: pod fleet-b-0); fleet-c (invalid: spec.storage.data.size); " +
		"fleet-d (ImagePullBackOff: pod fleet-d-0); and 1 more (kubectl get ti -l tiled.blueskyproject.io/cluster=fleet shows each)"))
}
