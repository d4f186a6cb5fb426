package webhooks

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// With watched namespaces, requests for other namespaces are allowed without calling the handler;
// cluster-scoped requests and watched namespaces reach it.
func TestNamespaceScoped(t *testing.T) {
	var called []string
	h := admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		called = append(called, req.Namespace)
		return admission.Denied("checked")
	})
	for _, tc := range []struct {
		watched   []string
		namespace string
		checked   bool
	}{
		{nil, "anything", true},
		{[]string{"a", "b"}, "a", true},
		{[]string{"a", "b"}, "c", false},
		{[]string{"a"}, "", true},
	} {
		g := NewWithT(t)
		called = nil
		resp := namespaceScoped(h, tc.watched).Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Namespace: tc.namespace}})
		g.Expect(called).To(HaveLen(map[bool]int{true: 1, false: 0}[tc.checked]), "%v %q", tc.watched, tc.namespace)
		g.Expect(resp.Allowed).To(Equal(!tc.checked))
	}
}
