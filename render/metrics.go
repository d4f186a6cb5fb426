package render

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// The metrics sidecar. Tiled 0.2.20 serves its metrics (MetricsPath) only to a key with the `metrics`
// scope, and in single-user mode its one key has every scope; under OIDC the operator holds no key at
// all. So when the instance asks for a ServiceMonitor, the Tiled container keeps its metrics in
// prometheus_client's multiprocess files (EnvMetricsDir) on an emptyDir it shares with a sidecar,
// "metrics", on the Tiled image, which serves them at MetricsSidecarPath on MetricsPortName to
// `Authorization: Bearer <token>` only, the token of the instance's metrics Secret
// (names.Objects.MetricsSecret). Prometheus never holds a Tiled key. metrics.py (MetricsScript) is both
// the sidecar and the wrapper that empties the directory each time the Tiled container starts.
const (
	// MetricsPort is the sidecar's port, named MetricsPortName in the Tiled Service.
	MetricsPort     = 9090
	MetricsPortName = "metrics"
	// MetricsSidecarPath is where the sidecar serves the metrics.
	MetricsSidecarPath = "/metrics"
	// MetricsContainerName is the sidecar's name.
	MetricsContainerName = "metrics"
	// MetricsDir is where the shared emptyDir is mounted in both containers (read-only in the
	// sidecar).
	MetricsDir = "/tiled-metrics"
	// EnvMetricsDir puts prometheus_client in the Tiled container in multiprocess mode: it keeps the
	// metrics in files in that directory, which Tiled's own /api/v1/metrics reads back too.
	EnvMetricsDir = "PROMETHEUS_MULTIPROC_DIR"
	// metricsVolume is the shared emptyDir's name.
	metricsVolume = "metrics"
)

// metricsScriptPath is where the containers find metrics.py (the ConfigMap's MetricsScriptKey).
const metricsScriptPath = ConfigDir + "/" + MetricsScriptKey

// Monitored says whether the instance asks for a ServiceMonitor (spec.monitoring.serviceMonitor): its
// Tiled pods then run the metrics sidecar, whether or not the ServiceMonitor CRD exists (so that its
// appearance does not roll the pods), and the metrics Secret exists.
func Monitored(ti *v1alpha1.TiledInstance) bool {
	m := ti.Spec.Monitoring
	return m != nil && m.ServiceMonitor != nil && *m.ServiceMonitor
}

// MetricsServeCommand is the Tiled container's command of a monitored instance: metrics.py empties
// the metrics directory (an emptyDir outlives a restart of the container, and the restarted Tiled
// would carry on from the old files) and then execs ServeCommand, which stays the process.
func MetricsServeCommand() []string {
	return append([]string{"python", metricsScriptPath, "exec"}, ServeCommand()...)
}

// metricsResources are the sidecar's: a Python HTTP server that reads a few files per scrape.
func metricsResources() *corev1ac.ResourceRequirementsApplyConfiguration {
	return corev1ac.ResourceRequirements().
		WithRequests(corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		}).
		WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")})
}

// MetricsSidecar returns the sidecar container: on the Tiled image (which holds Python and
// prometheus_client), running metrics.py from the ConfigMap, with the metrics directory read-only and
// the token from the metrics Secret. It has no readiness probe on purpose: a container's readiness
// is the pod's, and a metrics endpoint that is slow must not take Tiled out of its Service.
func MetricsSidecar(n names.Objects, image string, pull corev1.PullPolicy) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(MetricsContainerName).
		WithImage(image).
		WithImagePullPolicy(pull).
		WithCommand("python", metricsScriptPath, "serve").
		WithPorts(corev1ac.ContainerPort().WithName(MetricsPortName).WithContainerPort(MetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(
			corev1ac.EnvVar().WithName("METRICS_DIR").WithValue(MetricsDir),
			corev1ac.EnvVar().WithName("METRICS_PORT").WithValue(fmt.Sprint(MetricsPort)),
			secretEnv("METRICS_TOKEN", n.MetricsSecret, SecretKeyMetricsToken),
			corev1ac.EnvVar().WithName("PYTHONDONTWRITEBYTECODE").WithValue("1"),
		).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(metricsVolume).WithMountPath(MetricsDir).WithReadOnly(true),
		).
		WithResources(metricsResources()).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainerSecurityContext())
}

// metricsVolumeAndMount are the shared emptyDir and its mount in the Tiled container.
func metricsVolumeAndMount() (*corev1ac.VolumeApplyConfiguration, *corev1ac.VolumeMountApplyConfiguration) {
	return corev1ac.Volume().WithName(metricsVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.VolumeMount().WithName(metricsVolume).WithMountPath(MetricsDir)
}

// withMetricsDir is env with EnvMetricsDir added (a variable of that name from spec.tiled.env
// dropped): the Tiled container's environment of a monitored instance.
func withMetricsDir(env []*corev1ac.EnvVarApplyConfiguration) []*corev1ac.EnvVarApplyConfiguration {
	out := make([]*corev1ac.EnvVarApplyConfiguration, 0, len(env)+1)
	for _, e := range env {
		if e.Name != nil && *e.Name == EnvMetricsDir {
			continue
		}
		out = append(out, e)
	}
	return append(out, corev1ac.EnvVar().WithName(EnvMetricsDir).WithValue(MetricsDir))
}
