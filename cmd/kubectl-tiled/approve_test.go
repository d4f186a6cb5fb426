package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// pendingInstance is chx of cluster nsls2 with a change that waits for approval.
func pendingInstance(short, hash string, window string) *v1alpha1.TiledInstance {
	ti := instance(short, nil, nil)
	ti.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster", Name: "nsls2", UID: types.UID("cluster-uid"), Controller: ptr.To(true)}}
	ti.Status.PendingRollout = &v1alpha1.PendingRollout{StatefulSet: "tiled-nsls2-" + short, TemplateHash: "t", ChangeHash: hash, Change: "Spec",
		Differs: []string{"spec.template.spec.containers[tiled].env[TILED_X]"}, DifferCount: 1, Approval: v1alpha1.ApprovalRequired, Window: window}
	return ti
}

func TestApproveInstance(t *testing.T) {
	g := NewWithT(t)
	c := fakeClient(t, nil, pendingInstance("chx", "h1", ""))
	useClient(t, c)
	code, out, errOut := runCmd("", "approve", "chx", "-n", backupNS)
	g.Expect(errOut).To(BeEmpty())
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(Equal("Approved change h1 of TiledInstance nsls2/nsls2-chx: Spec, StatefulSet tiled-nsls2-chx: spec.template.spec.containers[tiled].env[TILED_X]; it goes through now (the maintenance window is open)\n"))
	ti := &v1alpha1.TiledInstance{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: backupNS, Name: "nsls2-chx"}, ti)).To(Succeed())
	g.Expect(ti.Labels).To(HaveKeyWithValue(v1alpha1.LabelApprove, "h1"))
	g.Expect(ti.Annotations).NotTo(HaveKey(v1alpha1.AnnotationApproveThroughWindow))
	g.Expect(ti.Annotations).NotTo(HaveKey(v1alpha1.AnnotationApprovedBy), "the webhook stamps it, not the client")

	code, out, _ = runCmd("", "approve", "chx", "-n", backupNS, "--hash", "h1", "--through-window")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("it goes through now, through a closed maintenance window if need be"))
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: backupNS, Name: "nsls2-chx"}, ti)).To(Succeed())
	g.Expect(ti.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationApproveThroughWindow, "h1"))
}

func TestApproveRefusesStale(t *testing.T) {
	g := NewWithT(t)
	n := 0
	nothing := instance("csx", nil, nil)
	c := fakeClient(t, writes(&n), pendingInstance("chx", "h2", "outside every maintenance window"), nothing)
	useClient(t, c)
	code, _, errOut := runCmd("", "approve", "chx", "-n", backupNS, "--hash", "h1")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring("refused: the approval of change h1 is stale: the change pending on TiledInstance nsls2/nsls2-chx is h2"))
	code, _, errOut = runCmd("", "approve", "csx", "-n", backupNS)
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring("TiledInstance nsls2/nsls2-csx: no change waits for approval"))
	code, _, errOut = runCmd("", "approve", "nope", "-n", backupNS)
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring(`no TiledInstance nor TiledCluster "nope" in namespace "nsls2"`))
	g.Expect(n).To(BeZero(), "nothing written")
}

func TestApproveCluster(t *testing.T) {
	g := NewWithT(t)
	cluster := &v1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Namespace: backupNS, Name: "nsls2", UID: types.UID("cluster-uid")}}
	nothing := instance("csx", nil, nil)
	nothing.OwnerReferences = pendingInstance("x", "", "").OwnerReferences
	c := fakeClient(t, nil, cluster, pendingInstance("chx", "h1", ""), pendingInstance("amx", "h3", "closed"), nothing)
	useClient(t, c)
	code, _, errOut := runCmd("", "approve", "nsls2", "-n", backupNS)
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring("give --all-pending"))

	code, out, errOut := runCmd("", "approve", "nsls2", "-n", backupNS, "--all-pending")
	g.Expect(errOut).To(BeEmpty())
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(Equal("Approved change h3 of TiledInstance nsls2/nsls2-amx: Spec, StatefulSet tiled-nsls2-amx: spec.template.spec.containers[tiled].env[TILED_X]; it goes through when the maintenance window is open\n" +
		"Approved change h1 of TiledInstance nsls2/nsls2-chx: Spec, StatefulSet tiled-nsls2-chx: spec.template.spec.containers[tiled].env[TILED_X]; it goes through now (the maintenance window is open)\n"))
	for name, hash := range map[string]string{"nsls2-chx": "h1", "nsls2-amx": "h3"} {
		ti := &v1alpha1.TiledInstance{}
		g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: backupNS, Name: name}, ti)).To(Succeed())
		g.Expect(ti.Labels).To(HaveKeyWithValue(v1alpha1.LabelApprove, hash))
	}
	ti := &v1alpha1.TiledInstance{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: backupNS, Name: "nsls2-csx"}, ti)).To(Succeed())
	g.Expect(ti.Labels).NotTo(HaveKey(v1alpha1.LabelApprove))
}
