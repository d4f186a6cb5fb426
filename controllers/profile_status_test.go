package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// TestProfileValidity: the Valid condition's status, reason and message for each kind of problem a
// stored profile can have; the message names the profile and the field.
func TestProfileValidity(t *testing.T) {
	profile := func(t tiledv1alpha1.InstanceTemplate, allowed ...tiledv1alpha1.AllowedNFSExport) *tiledv1alpha1.TiledProfile {
		p := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "site", Generation: 3}}
		p.Spec.InstanceTemplate, p.Spec.AllowedNFS = t, allowed
		return p
	}
	ingress := func(host string) tiledv1alpha1.InstanceTemplate {
		return tiledv1alpha1.InstanceTemplate{Expose: &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{
			Enabled: ptr.To(true), HostExpression: host}}}
	}
	cases := []struct {
		name    string
		profile *tiledv1alpha1.TiledProfile
		status  metav1.ConditionStatus
		reason  string
		message []string
	}{
		{name: "valid", profile: profile(ingress("instance.name + '.example.org'")),
			status: metav1.ConditionTrue, reason: ReasonValid},
		{name: "empty", profile: profile(tiledv1alpha1.InstanceTemplate{}), status: metav1.ConditionTrue, reason: ReasonValid},
		{name: "expression does not compile", profile: profile(ingress("instance.name +")),
			status: metav1.ConditionFalse, reason: ReasonExpressionInvalid,
			message: []string{"profile/site@3", "spec.expose.ingress.hostExpression", "compile"}},
		{name: "expression of the wrong type", profile: profile(ingress("instance.labels.size()")),
			status: metav1.ConditionFalse, reason: ReasonExpressionInvalid,
			message: []string{"spec.expose.ingress.hostExpression", "type"}},
		{name: "unknown variable", profile: profile(ingress("beamline.name")),
			status: metav1.ConditionFalse, reason: ReasonExpressionInvalid,
			message: []string{"spec.expose.ingress.hostExpression", "beamline"}},
		{name: "memory request above its limit", profile: profile(tiledv1alpha1.InstanceTemplate{Tiled: &tiledv1alpha1.TiledServerSpec{
			Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			}}}),
			status: metav1.ConditionFalse, reason: ReasonSchemaInvalid, message: []string{"profile/site@3", "spec.tiled.resources"}},
		{name: "allowance with a relative path", profile: profile(tiledv1alpha1.InstanceTemplate{},
			tiledv1alpha1.AllowedNFSExport{Server: "nfs.example.org", PathPrefix: "/data/../etc"}),
			status: metav1.ConditionFalse, reason: ReasonSchemaInvalid, message: []string{"spec.allowedNFS[0].pathPrefix"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, reason, message, err := ProfileValidity(tc.profile)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(status).To(Equal(tc.status), message)
			g.Expect(reason).To(Equal(tc.reason), message)
			g.Expect(message).NotTo(BeEmpty())
			for _, m := range tc.message {
				g.Expect(message).To(ContainSubstring(m))
			}
		})
	}
}

// TestProfileStatusOf: the status records the generation, the verdict and the counts; computed again
// from the status it produced, with nothing changed, it is identical (so no write follows), and the
// condition keeps its lastTransitionTime until its status changes.
func TestProfileStatusOf(t *testing.T) {
	g := NewWithT(t)
	p := &tiledv1alpha1.TiledProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "site", Generation: 2,
		Labels: map[string]string{"facility": "x"}}}
	cluster := tiledv1alpha1.TiledCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: tiledv1alpha1.TiledClusterSpec{ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "x"}}}}
	solo := tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "solo"},
		Spec: tiledv1alpha1.TiledInstanceSpec{ProfileSelector: &metav1.LabelSelector{}}}
	child := tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-a"}}
	valid := validity{status: metav1.ConditionTrue, reason: ReasonValid, message: "ok"}

	st := profileStatus(p, valid, []tiledv1alpha1.TiledCluster{cluster}, []tiledv1alpha1.TiledInstance{solo, child})
	g.Expect(st.ObservedGeneration).To(Equal(int64(2)))
	g.Expect(st.SelectedByClusters).To(Equal(int32(1)))
	g.Expect(st.SelectedByInstances).To(Equal(int32(1)))
	c := meta.FindStatusCondition(st.Conditions, ConditionValid)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.ObservedGeneration).To(Equal(int64(2)))
	g.Expect(p.Status.Conditions).To(BeEmpty(), "the profile read from the cache is not modified")

	// Stored, then computed again: identical.
	c.LastTransitionTime = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	p.Status = *st
	g.Expect(profileStatus(p, valid, []tiledv1alpha1.TiledCluster{cluster}, []tiledv1alpha1.TiledInstance{solo, child})).To(Equal(st))

	// Invalid at a new generation, and no longer selected: a new transition time.
	p.Generation = 3
	invalid := validity{status: metav1.ConditionFalse, reason: ReasonExpressionInvalid, message: "bad"}
	st2 := profileStatus(p, invalid, nil, nil)
	c2 := meta.FindStatusCondition(st2.Conditions, ConditionValid)
	g.Expect(c2.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c2.Reason).To(Equal(ReasonExpressionInvalid))
	g.Expect(c2.LastTransitionTime).NotTo(Equal(c.LastTransitionTime))
	g.Expect(st2.ObservedGeneration).To(Equal(int64(3)))
	g.Expect(st2.SelectedByClusters).To(BeZero())
	g.Expect(st2.SelectedByInstances).To(BeZero())
}
