package render

import (
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// expectTryAgainOnly: a Job runs a pod again only after one that exited with ExitTryAgain, at most
// JobRetries times; a disrupted pod or any other exit status fails it at once. The rules are read
// by the Job controller in order; the first that matches a failed pod decides.
func expectTryAgainOnly(g Gomega, spec batchv1.JobSpec) {
	g.Expect(spec.BackoffLimit).To(HaveValue(BeEquivalentTo(JobRetries)))
	g.Expect(spec.PodFailurePolicy).NotTo(BeNil())
	rules := spec.PodFailurePolicy.Rules
	g.Expect(rules).To(HaveLen(3))
	g.Expect(rules[0].Action).To(Equal(batchv1.PodFailurePolicyActionFailJob))
	g.Expect(rules[0].OnPodConditions).To(ConsistOf(batchv1.PodFailurePolicyOnPodConditionsPattern{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}))
	g.Expect(rules[1].Action).To(Equal(batchv1.PodFailurePolicyActionFailJob))
	g.Expect(rules[1].OnExitCodes).To(HaveValue(Equal(batchv1.PodFailurePolicyOnExitCodesRequirement{
		Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{ExitTryAgain}})))
	g.Expect(rules[2].Action).To(Equal(batchv1.PodFailurePolicyActionCount))
	g.Expect(rules[2].OnExitCodes).To(HaveValue(Equal(batchv1.PodFailurePolicyOnExitCodesRequirement{
		Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{ExitTryAgain}})))
}
