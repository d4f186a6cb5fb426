package webhooks

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestStampApproval(t *testing.T) {
	for _, c := range []struct {
		name     string
		old, cur approvalFields
		want     approvalStamp
		refuses  bool
	}{
		{"no approval", approvalFields{}, approvalFields{}, approvalStamp{}, false},
		{"approval removed", approvalFields{approve: "h", by: "alice"}, approvalFields{by: "mallory"}, approvalStamp{}, false},
		{"a new approval is stamped", approvalFields{}, approvalFields{approve: "h"}, approvalStamp{stamp: true}, false},
		{"another approver's approval of a new hash is restamped", approvalFields{approve: "h", by: "alice"}, approvalFields{approve: "h2", by: "alice"}, approvalStamp{stamp: true}, false},
		{"through-window added: restamped", approvalFields{approve: "h", by: "alice"}, approvalFields{approve: "h", through: "true", by: "alice"}, approvalStamp{stamp: true}, false},
		{"the requester's own name is kept", approvalFields{}, approvalFields{approve: "h", by: "bob"}, approvalStamp{}, false},
		{"another name supplied: refused", approvalFields{}, approvalFields{approve: "h", by: "alice"}, approvalStamp{}, true},
		{"approved-by changed alone: refused", approvalFields{approve: "h", by: "bob"}, approvalFields{approve: "h", by: "alice"}, approvalStamp{}, true},
		{"an unrelated write passes", approvalFields{approve: "h", by: "alice"}, approvalFields{approve: "h", by: "alice"}, approvalStamp{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			got := stampApproval(c.old, c.cur, "bob")
			g.Expect(got.refuse != "").To(Equal(c.refuses), got.refuse)
			got.refuse = ""
			g.Expect(got).To(Equal(c.want))
		})
	}
}

func TestApprovalStamperPatches(t *testing.T) {
	g := NewWithT(t)
	ti := &v1alpha1.TiledInstance{}
	ti.Name, ti.Namespace = "chx", "ns"
	ti.Labels = map[string]string{v1alpha1.LabelApprove: "abc"}
	raw, err := json.Marshal(ti)
	g.Expect(err).NotTo(HaveOccurred())
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: raw}, OldObject: runtime.RawExtension{Raw: []byte(`{"metadata":{"name":"chx"}}`)},
		UserInfo: authenticationv1.UserInfo{Username: "beamline-scientist"}}}
	resp := ApprovalStamper{}.Handle(context.Background(), req)
	g.Expect(resp.Allowed).To(BeTrue())
	g.Expect(resp.Patches).To(HaveLen(1))
	g.Expect(resp.Patches[0].Path).To(Equal("/metadata/annotations"))
	g.Expect(resp.Patches[0].Value).To(HaveKeyWithValue(v1alpha1.AnnotationApprovedBy, "beamline-scientist"))

	ti.Annotations = map[string]string{v1alpha1.AnnotationApprovedBy: "someone-else"}
	raw, _ = json.Marshal(ti)
	req.Object.Raw = raw
	resp = ApprovalStamper{}.Handle(context.Background(), req)
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Message).To(ContainSubstring(`"someone-else" is not the user who sends this approval ("beamline-scientist")`))
}
