package render

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Autoscaling defaults, where spec.tiled.autoscaling leaves a field out (the built-in defaults set
// them all, so an expanded instance shows them with provenance).
const (
	defaultMinReplicas          int32 = 1
	defaultMaxReplicas          int32 = 3
	defaultTargetCPUUtilization int32 = 70
	defaultScaleDownWindow      int32 = 300
)

// Autoscaled reports whether a HorizontalPodAutoscaler sets the number of Tiled pods.
func Autoscaled(ti *v1alpha1.TiledInstance) bool {
	t := ti.Spec.Tiled
	return t != nil && t.Autoscaling != nil && t.Autoscaling.Enabled != nil && *t.Autoscaling.Enabled
}

func int32Or(p *int32, def int32) int32 {
	if p != nil {
		return *p
	}
	return def
}

// AutoscalingBounds are the fewest and most Tiled pods the autoscaler runs.
func AutoscalingBounds(ti *v1alpha1.TiledInstance) (minReplicas, maxReplicas int32) {
	a := ti.Spec.Tiled.Autoscaling
	return int32Or(a.MinReplicas, defaultMinReplicas), int32Or(a.MaxReplicas, defaultMaxReplicas)
}

// HorizontalPodAutoscaler returns the autoscaler of the Tiled StatefulSet (named like it), or nil
// unless spec.tiled.autoscaling is enabled. It scales on the Tiled container's CPU use relative to
// its request. While Tiled is stopped (a restore or a migration) the StatefulSet has 0 replicas, and
// an autoscaler does not scale a workload at 0, so it waits too.
func HorizontalPodAutoscaler(ti *v1alpha1.TiledInstance, in Inputs) *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration {
	if !Autoscaled(ti) {
		return nil
	}
	a := ti.Spec.Tiled.Autoscaling
	lo, hi := AutoscalingBounds(ti)
	n := in.names(ti)
	return autoscalingv2ac.HorizontalPodAutoscaler(n.Tiled, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
			WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
				WithAPIVersion("apps/v1").WithKind("StatefulSet").WithName(n.Tiled)).
			WithMinReplicas(lo).
			WithMaxReplicas(hi).
			WithMetrics(autoscalingv2ac.MetricSpec().
				WithType(autoscalingv2.ContainerResourceMetricSourceType).
				WithContainerResource(autoscalingv2ac.ContainerResourceMetricSource().
					WithName(corev1.ResourceCPU).
					WithContainer("tiled").
					WithTarget(autoscalingv2ac.MetricTarget().
						WithType(autoscalingv2.UtilizationMetricType).
						WithAverageUtilization(int32Or(a.TargetCPUUtilizationPercentage, defaultTargetCPUUtilization))))).
			WithBehavior(autoscalingv2ac.HorizontalPodAutoscalerBehavior().
				WithScaleDown(autoscalingv2ac.HPAScalingRules().
					WithStabilizationWindowSeconds(int32Or(a.ScaleDownStabilizationSeconds, defaultScaleDownWindow)))))
}
