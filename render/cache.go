package render

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

const (
	// CachePort is the port of the managed streaming cache, named CachePortName in its Service.
	CachePort     = 6379
	CachePortName = "redis"
	// ExternalCacheKeyURI is the default key of an external cache's URI Secret, and
	// ExternalCacheKeyPassword of a Sentinel deployment's password Secret.
	ExternalCacheKeyURI      = "uri"
	ExternalCacheKeyPassword = "password"
	// cacheConfigPath is the cache's configuration file, written at start from the environment so
	// that the password is on no command line and in no ConfigMap.
	cacheConfigPath = "/tmp/redis.conf"
	// EnvCacheMaxMemory is the cache container's maxmemory in bytes ("0": no limit).
	EnvCacheMaxMemory = "CACHE_MAXMEMORY"
)

// StreamingEnabled reports whether the instance streams: spec.streaming present and not switched off.
func StreamingEnabled(ti *v1alpha1.TiledInstance) bool {
	s := ti.Spec.Streaming
	return s != nil && (s.Enabled == nil || *s.Enabled) && (s.Managed != nil || s.External != nil)
}

// managedCache is the instance's managed streaming cache, nil when streaming is off or external.
func managedCache(ti *v1alpha1.TiledInstance) *v1alpha1.ManagedCache {
	if !StreamingEnabled(ti) {
		return nil
	}
	return ti.Spec.Streaming.Managed
}

// externalCache is the instance's external streaming cache, nil when streaming is off or managed.
func externalCache(ti *v1alpha1.TiledInstance) *v1alpha1.ExternalCache {
	if !StreamingEnabled(ti) || ti.Spec.Streaming.Managed != nil {
		return nil
	}
	return ti.Spec.Streaming.External
}

// ExternalCacheSecret is the Secret, key and field (for messages) the Tiled pods of an instance
// with an external streaming cache read (its URI, or its Sentinel deployment's password); ok is
// false when they read none.
func ExternalCacheSecret(ti *v1alpha1.TiledInstance) (name, key, field string, ok bool) {
	x := externalCache(ti)
	switch {
	case x == nil:
		return "", "", "", false
	case x.URISecretRef != nil:
		return x.URISecretRef.Name, keyOr(x.URISecretRef.Key, ExternalCacheKeyURI), "spec.streaming.external.uriSecretRef", true
	case x.Sentinel != nil && x.Sentinel.PasswordSecretRef != nil:
		r := x.Sentinel.PasswordSecretRef
		return r.Name, keyOr(r.Key, ExternalCacheKeyPassword), "spec.streaming.external.sentinel.passwordSecretRef", true
	}
	return "", "", "", false
}

// ManagedCacheEnabled reports whether the operator runs a streaming cache for the instance.
func ManagedCacheEnabled(ti *v1alpha1.TiledInstance) bool { return managedCache(ti) != nil }

// cacheAddress is host:port of the managed cache: in.CacheAddress, else its Service's DNS name.
func cacheAddress(ti *v1alpha1.TiledInstance, in Inputs) string {
	if in.CacheAddress != "" {
		return in.CacheAddress
	}
	return fmt.Sprintf("%s.%s.svc:%d", in.names(ti).Cache, ti.Namespace, CachePort)
}

// streamingCacheConfig is Tiled's streaming_cache setting, or nil without streaming. Secrets appear
// only as ${VAR} references, which Tiled expands from the container's environment (cacheEnv).
func streamingCacheConfig(ti *v1alpha1.TiledInstance, in Inputs) map[string]any {
	if !StreamingEnabled(ti) {
		return nil
	}
	s := ti.Spec.Streaming
	out := map[string]any{}
	switch {
	case s.Managed != nil:
		out["uri"] = "redis://:${" + EnvStreamingCachePassword + "}@" + cacheAddress(ti, in) + "/0"
	case s.External.URISecretRef != nil:
		out["uri"] = "${" + EnvStreamingCacheURI + "}"
	case s.External.Sentinel != nil:
		sn := s.External.Sentinel
		addrs := make([]any, len(sn.Addresses))
		for i, a := range sn.Addresses {
			addrs[i] = a
		}
		out["sentinels"] = addrs
		out["service_name"] = sn.ServiceName
		if sn.PasswordSecretRef != nil {
			out["password"] = "${" + EnvStreamingCachePassword + "}"
		}
		if sn.TLS != nil && *sn.TLS {
			out["ssl"] = true
		}
	default:
		return nil
	}
	if s.DataTTLSeconds != nil {
		out["data_ttl"] = int(*s.DataTTLSeconds)
	}
	if s.SequenceTTLSeconds != nil {
		out["seq_ttl"] = int(*s.SequenceTTLSeconds)
	}
	return out
}

// cacheEnv is what the Tiled containers need of the streaming cache: its password (managed, or an
// external Sentinel deployment's) or an external URI, each from a Secret.
func cacheEnv(ti *v1alpha1.TiledInstance, n names.Objects) []*corev1ac.EnvVarApplyConfiguration {
	if managedCache(ti) != nil {
		return []*corev1ac.EnvVarApplyConfiguration{secretEnv(EnvStreamingCachePassword, n.Secret, SecretKeyStreamingCachePassword)}
	}
	x := externalCache(ti)
	switch {
	case x == nil:
		return nil
	case x.URISecretRef != nil:
		r := x.URISecretRef
		return []*corev1ac.EnvVarApplyConfiguration{secretEnv(EnvStreamingCacheURI, r.Name, keyOr(r.Key, ExternalCacheKeyURI))}
	case x.Sentinel != nil && x.Sentinel.PasswordSecretRef != nil:
		r := x.Sentinel.PasswordSecretRef
		return []*corev1ac.EnvVarApplyConfiguration{secretEnv(EnvStreamingCachePassword, r.Name, keyOr(r.Key, ExternalCacheKeyPassword))}
	}
	return nil
}

// CacheScript starts the cache: it writes the configuration file from the environment (the password
// from the instance's Secret, maxmemory from the memory limit) readable by the cache's user alone,
// then runs redis-server on it. Updates are kept in memory and in an append-only file on an emptyDir,
// so that a restart of the container (not a new pod) keeps the sequence numbers; RDB snapshots are
// off. Every key Tiled writes has a TTL, so volatile-ttl evicts the updates nearest their expiry when
// maxmemory is reached, instead of refusing Tiled's writes.
const CacheScript = `set -eu
umask 077
{
  printf 'requirepass "%s"\n' "$` + EnvStreamingCachePassword + `"
  printf 'port ` + "6379" + `\nbind * -::*\ndir /data\nappendonly yes\nappendfsync everysec\nsave ""\n'
  printf 'maxmemory %s\nmaxmemory-policy volatile-ttl\n' "$` + EnvCacheMaxMemory + `"
} > ` + cacheConfigPath + `
exec redis-server ` + cacheConfigPath + `
`

// cacheMaxMemory is nine tenths of the cache container's memory limit in bytes, "0" without a limit.
func cacheMaxMemory(m *v1alpha1.ManagedCache) string {
	if m.Resources == nil {
		return "0"
	}
	lim, ok := m.Resources.Limits[corev1.ResourceMemory]
	if !ok || lim.IsZero() {
		return "0"
	}
	return strconv.FormatInt(lim.Value()/10*9, 10)
}

// StreamingCache returns the managed streaming cache's Service and StatefulSet, or nils when the
// instance has none. One pod, restricted like the database's, running the image's redis-server with
// CacheScript; probes run redis-cli PING, bounded by timeout, with the password from REDISCLI_AUTH.
func StreamingCache(ti *v1alpha1.TiledInstance, in Inputs) (*corev1ac.ServiceApplyConfiguration, *appsv1ac.StatefulSetApplyConfiguration) {
	m := managedCache(ti)
	if m == nil {
		return nil, nil
	}
	n := in.names(ti)
	labels := Labels(ti, ComponentCache)
	sel := SelectorLabels(ti, ComponentCache)

	svc := corev1ac.Service(n.Cache, ti.Namespace).
		WithLabels(labels).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(sel).
			WithPorts(corev1ac.ServicePort().WithName(CachePortName).WithPort(CachePort).
				WithTargetPort(intstr.FromString(CachePortName)).WithProtocol(corev1.ProtocolTCP)))

	// The probes bound redis-cli themselves (timeout, from coreutils or busybox): a cache that accepts
	// connections but does not answer (paused, or stuck) keeps redis-cli waiting, and the kubelet's
	// own exec timeout is not enforced promptly, so without it one hung probe hides the outage.
	ping := func(seconds int) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithExec(corev1ac.ExecAction().
			WithCommand("sh", "-c", fmt.Sprintf(`test "$(timeout %d redis-cli -h 127.0.0.1 -p %d ping)" = PONG`, seconds, CachePort))).
			WithTimeoutSeconds(int32(seconds) + 1)
	}
	// Ready about a second after it answers; unready 4 to 6 s into an outage; restarted after a
	// minute of not answering.
	startup := ping(2).WithPeriodSeconds(1).WithFailureThreshold(120)
	ready := ping(2).WithPeriodSeconds(2).WithFailureThreshold(2)
	live := ping(4).WithPeriodSeconds(20).WithFailureThreshold(3)
	c := corev1ac.Container().
		WithName("cache").
		WithImage(m.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("/bin/sh", "-c", CacheScript).
		WithPorts(corev1ac.ContainerPort().WithName(CachePortName).WithContainerPort(CachePort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(
			secretEnv(EnvStreamingCachePassword, n.Secret, SecretKeyStreamingCachePassword),
			// redis-cli (the probes) reads the password from here, not from its command line.
			secretEnv("REDISCLI_AUTH", n.Secret, SecretKeyStreamingCachePassword),
			corev1ac.EnvVar().WithName(EnvCacheMaxMemory).WithValue(cacheMaxMemory(m)),
		).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("data").WithMountPath("/data"),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		).
		WithResources(resources(m.Resources)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithStartupProbe(startup).
		WithReadinessProbe(ready).
		WithLivenessProbe(live).
		WithSecurityContext(restrictedContainerSecurityContext())

	podSpec := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(podIdentity{uid: RunAsUser, gid: RunAsUser, fsGroup: RunAsUser})).
		WithContainers(c).
		WithVolumes(
			corev1ac.Volume().WithName("data").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		)
	podPlacement(podSpec, m.ImagePullSecrets, m.NodeSelector, m.Tolerations)
	sts := appsv1ac.StatefulSet(n.Cache, ti.Namespace).
		WithLabels(labels).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(1).
			WithServiceName(n.Cache).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(podSpec)))
	return svc, sts
}
