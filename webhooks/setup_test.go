package webhooks

import (
	"context"
	"flag"
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

// The flags: --cert-management defaults to self once completed, and only knows the three modes.
func TestBindFlags(t *testing.T) {
	g := NewWithT(t)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o, enabled := BindFlags(fs)
	g.Expect(fs.Parse([]string{"--webhooks"})).To(Succeed())
	o.Complete()
	g.Expect(*enabled).To(BeTrue())
	g.Expect(o.mode()).To(Equal(CertSelf))
	g.Expect(o.Certs.SecretName).To(Equal("tiled-operator-webhook-ca"))

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	o, _ = BindFlags(fs)
	g.Expect(fs.Parse([]string{"--cert-management=olm"})).To(Succeed())
	o.Complete()
	o.setDefaults()
	g.Expect(o.mode()).To(Equal(CertOLM))
	g.Expect(o.CertDir).To(Equal(OLMCertDir))

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	BindFlags(fs)
	g.Expect(fs.Parse([]string{"--cert-management=vault"})).To(MatchError(ContainSubstring(`unknown certificate management "vault"`)))
}
