package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The approval webhook: who approved a pending change (spec.maintenance.approval Manual, `kubectl
// tiled approve`) is the user the API server authenticated for the write that set the label
// tiled.blueskyproject.io/approve, not what the client says. Its objectSelector sends it only the
// writes of instances that carry the label, or carried it before the write (the API server matches
// the old and the new object), so the rest of the fleet and the operator's own writes to other
// instances never wait for it; it reads nothing and answers from the request alone. It applies to
// every instance, those a TiledCluster makes included (no managed-by selector), since the
// beamlines of a cluster are the ones approved.
//
// Its failurePolicy is Fail, unlike the instance webhooks' Ignore: an approval written while the
// webhook cannot answer is refused (and may be sent again) rather than recorded under a name the
// client chose. Markers take no constants: TestApprovalWebhookSelector checks the generated
// selector against v1alpha1.LabelApprove.
//
// +kubebuilder:webhook:path=/mutate-tiled-blueskyproject-io-v1alpha1-tiledinstance-approval,mutating=true,failurePolicy=fail,sideEffects=None,groups=tiled.blueskyproject.io,resources=tiledinstances,verbs=create;update,versions=v1alpha1,name=mtiledinstanceapproval.tiled.blueskyproject.io,admissionReviewVersions=v1,timeoutSeconds=5,patch=`{"objectSelector":{"matchExpressions":[{"key":"tiled.blueskyproject.io/approve","operator":"Exists"}]}}`

// MutateApprovalPath is the path of the approval webhook.
const MutateApprovalPath = "/mutate-tiled-blueskyproject-io-v1alpha1-tiledinstance-approval"

// ApprovalStamper stamps tiled.blueskyproject.io/approved-by with the requester's username on a
// write that sets or changes an approval, and refuses a write that sets approved-by to anyone else.
type ApprovalStamper struct{}

// Handle implements admission.Handler.
func (ApprovalStamper) Handle(_ context.Context, req admission.Request) admission.Response {
	var obj, old metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(req.OldObject.Raw) > 0 {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
	}
	d := stampApproval(approvalMeta(&old), approvalMeta(&obj), req.UserInfo.Username)
	if d.refuse != "" {
		return admission.Denied(d.refuse)
	}
	if !d.stamp {
		return admission.Allowed("")
	}
	var raw map[string]any
	if err := json.Unmarshal(req.Object.Raw, &raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	meta, _ := raw["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		raw["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[v1alpha1.AnnotationApprovedBy] = req.UserInfo.Username
	stamped, err := json.Marshal(raw)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, stamped)
}

// approvalFields are an object's approval label and annotations.
type approvalFields struct{ approve, through, by string }

func approvalMeta(o *metav1.PartialObjectMetadata) approvalFields {
	return approvalFields{approve: o.Labels[v1alpha1.LabelApprove], through: o.Annotations[v1alpha1.AnnotationApproveThroughWindow],
		by: o.Annotations[v1alpha1.AnnotationApprovedBy]}
}

// approvalStamp is what the webhook does with one write.
type approvalStamp struct {
	stamp  bool   // set approved-by to the requester
	refuse string // refuse the write, saying why
}

// stampApproval decides (pure): a write that sets or changes the approval (the label, or its
// through-window annotation) is stamped with the requester, unless the client set approved-by to
// someone else (refused); a write that changes approved-by alone, of an instance that carries an
// approval, is refused; everything else passes as it is.
func stampApproval(old, cur approvalFields, user string) approvalStamp {
	if cur.approve == "" {
		return approvalStamp{} // no approval (removed): approved-by says nothing
	}
	clientSet := cur.by != old.by
	if cur.approve == old.approve && cur.through == old.through {
		if clientSet {
			return approvalStamp{refuse: fmt.Sprintf("metadata.annotations[%s] is stamped by admission with the user who approves; it is not set by hand (approve again with `kubectl tiled approve`)", v1alpha1.AnnotationApprovedBy)}
		}
		return approvalStamp{}
	}
	if clientSet && cur.by != "" && cur.by != user {
		return approvalStamp{refuse: fmt.Sprintf("metadata.annotations[%s]: %q is not the user who sends this approval (%q); leave it out, admission sets it", v1alpha1.AnnotationApprovedBy, cur.by, user)}
	}
	return approvalStamp{stamp: cur.by != user}
}
