package render

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
)

// ExitTryAgain is the exit status with which a Job's program says that something it needs did not
// answer (dbtool.sh: the S3 endpoint) and that it stopped before changing anything: EX_TEMPFAIL of
// sysexits.h. Only such a pod is run again.
const ExitTryAgain = 75

// JobRetries is how many times a step or backup Job runs a pod again after one that exited with
// ExitTryAgain (the Job controller waits 10 s, then 20 s, before each).
const JobRetries = 2

// tryAgainOnly makes spec run a pod again only after one that exited with ExitTryAgain: any other
// failure of its container, or a pod disrupted (evicted, preempted), fails the Job at once and is
// reported, never retried. A restore or a migration that stopped part way is never run again over
// what it left.
func tryAgainOnly(spec *batchv1ac.JobSpecApplyConfiguration) *batchv1ac.JobSpecApplyConfiguration {
	return spec.
		WithBackoffLimit(JobRetries).
		WithPodFailurePolicy(batchv1ac.PodFailurePolicy().WithRules(
			batchv1ac.PodFailurePolicyRule().
				WithAction(batchv1.PodFailurePolicyActionFailJob).
				WithOnPodConditions(batchv1ac.PodFailurePolicyOnPodConditionsPattern().
					WithType(corev1.DisruptionTarget).WithStatus(corev1.ConditionTrue)),
			batchv1ac.PodFailurePolicyRule().
				WithAction(batchv1.PodFailurePolicyActionFailJob).
				WithOnExitCodes(batchv1ac.PodFailurePolicyOnExitCodesRequirement().
					WithOperator(batchv1.PodFailurePolicyOnExitCodesOpNotIn).WithValues(ExitTryAgain)),
			batchv1ac.PodFailurePolicyRule().
				WithAction(batchv1.PodFailurePolicyActionCount).
				WithOnExitCodes(batchv1ac.PodFailurePolicyOnExitCodesRequirement().
					WithOperator(batchv1.PodFailurePolicyOnExitCodesOpIn).WithValues(ExitTryAgain)),
		))
}
