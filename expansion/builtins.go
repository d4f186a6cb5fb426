package expansion

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// TiledVersion is the version of Tiled the operator deploys unless a layer sets spec.tiled.image.
// It is the one place the default image tag comes from (Tiled's tags have no "v").
const TiledVersion = "0.2.20"

// TiledImage is the default Tiled image, ghcr.io/bluesky/tiled:<TiledVersion>.
const TiledImage = "ghcr.io/bluesky/tiled:" + TiledVersion

// PostgresImage is the default image of a managed database.
const PostgresImage = "postgres:16"

// CacheImage is the default image of a managed streaming cache: Valkey, the BSD-licensed
// continuation of Redis, whose images also provide the redis-server and redis-cli the cache runs.
const CacheImage = "valkey/valkey:8.1"

// DefaultIngressControllerNamespace is the namespace whose pods may reach Tiled's port besides the
// instance's own namespace, unless a layer sets spec.networkPolicy.ingressControllerNamespace: where
// the ingress-nginx project's manifests and chart install the controller.
const DefaultIngressControllerNamespace = "ingress-nginx"

// DefaultMetricsNamespace is the namespace whose pods may reach the Tiled pods' metrics sidecar unless
// a layer sets spec.networkPolicy.metricsNamespace: where kube-prometheus installs Prometheus.
const DefaultMetricsNamespace = "monitoring"

// DefaultUID is the uid, gid and fsGroup the Tiled pods run as unless a layer sets
// spec.tiled.runAsUser, runAsGroup or fsGroup (the managed PostgreSQL always runs as it).
const DefaultUID int64 = 999

// BuiltinsVersion names the set of built-in defaults below. It changes whenever a default changes,
// so that a cluster's expansion can say which defaults it used.
const BuiltinsVersion = "2026.12.2"

// Builtins is the lowest layer of every expansion: the operator's own defaults, versioned.
type Builtins struct {
	// Version names this set of defaults, e.g. BuiltinsVersion.
	Version string
	// Defaults are the default settings; provenance calls them "default".
	Defaults v1alpha1.InstanceTemplate
	// Sources give, for a field of Defaults that the operator's configuration rather than this
	// code set (a built-in image replaced by WithImages), the provenance that says so, e.g.
	// spec.tiled.image: "default (RELATED_IMAGE_TILED)". Nil for DefaultBuiltins.
	Sources map[string]string
}

// DefaultBuiltins returns the operator's built-in defaults at BuiltinsVersion: a small, secure
// Tiled (one replica running as uid and gid 999, single-user API key, no anonymous access) on a
// 10Gi ReadWriteOnce volume of the cluster's default storage class, with a managed PostgreSQL
// database, a managed streaming cache, a ClusterIP Service, and NetworkPolicies that admit only the
// instance's own pods to its database and cache. The images are BuiltinImages' defaults. Each call
// returns a fresh copy.
func DefaultBuiltins() Builtins {
	b := defaultBuiltins()
	for _, bi := range builtinImages {
		*bi.field(&b.Defaults) = bi.Default
	}
	return b
}

func defaultBuiltins() Builtins {
	q := resource.MustParse
	return Builtins{
		Version: BuiltinsVersion,
		Defaults: v1alpha1.InstanceTemplate{
			Tiled: &v1alpha1.TiledServerSpec{
				ImagePullPolicy: corev1.PullIfNotPresent,
				Replicas:        ptr.To[int32](1),
				Autoscaling: &v1alpha1.AutoscalingSpec{
					Enabled:                        ptr.To(false),
					MinReplicas:                    ptr.To[int32](1),
					MaxReplicas:                    ptr.To[int32](3),
					TargetCPUUtilizationPercentage: ptr.To[int32](70),
					ScaleDownStabilizationSeconds:  ptr.To[int32](300),
				},
				RunAsUser:  ptr.To(DefaultUID),
				RunAsGroup: ptr.To(DefaultUID),
				FSGroup:    ptr.To(DefaultUID),
				Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: q("2Gi")},
				},
			},
			Storage: &v1alpha1.StorageSpec{
				Data: &v1alpha1.DataVolume{
					Size:        "10Gi",
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				},
				Retention: v1alpha1.RetentionRetain,
			},
			Database: &v1alpha1.DatabaseSpec{
				Managed: &v1alpha1.ManagedDatabase{
					Size: "10Gi",
					Resources: &corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("256Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: q("1Gi")},
					},
				},
			},
			Auth: &v1alpha1.AuthSpec{
				SingleUserAPIKey:     &v1alpha1.SingleUserAPIKey{},
				AllowAnonymousAccess: ptr.To(false),
			},
			Expose: &v1alpha1.ExposeSpec{
				Service: &v1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
			},
			Monitoring: &v1alpha1.MonitoringSpec{
				ServiceMonitor: ptr.To(false),
				Interval:       "30s",
			},
			NetworkPolicy: &v1alpha1.NetworkPolicySpec{
				Enabled:                    ptr.To(true),
				IngressControllerNamespace: ptr.To(DefaultIngressControllerNamespace),
				MetricsNamespace:           ptr.To(DefaultMetricsNamespace),
				Egress:                     &v1alpha1.NetworkEgressSpec{Restricted: ptr.To(false), DNSPorts: []int32{render.DNSPort}},
			},
			Streaming: &v1alpha1.StreamingSpec{
				Enabled: ptr.To(true),
				Managed: &v1alpha1.ManagedCache{
					Resources: &corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: q("256Mi")},
					},
				},
				DataTTLSeconds:     ptr.To[int32](3600),
				SequenceTTLSeconds: ptr.To[int32](2592000),
			},
		},
	}
}
