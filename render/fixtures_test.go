package render

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Hand-built, fully expanded instances, standing in for the expansion engine's output.

func baseInstance(name string) *v1alpha1.TiledInstance {
	return &v1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "nsls2-" + name,
			Namespace: "beamlines",
			Labels:    map[string]string{v1alpha1.LabelCluster: "nsls2", v1alpha1.LabelInstance: name},
		},
		Spec: v1alpha1.TiledInstanceSpec{InstanceTemplate: v1alpha1.InstanceTemplate{
			Tiled: &v1alpha1.TiledServerSpec{
				Image:           "ghcr.io/bluesky/tiled:0.2.20",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Replicas:        ptr.To[int32](1),
				Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
				},
			},
			Storage: &v1alpha1.StorageSpec{
				Data:      &v1alpha1.DataVolume{Size: "50Gi", StorageClassName: ptr.To("fast"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
				Retention: v1alpha1.RetentionRetain,
			},
			Database: &v1alpha1.DatabaseSpec{Managed: &v1alpha1.ManagedDatabase{Image: "postgres:16", Size: "20Gi"}},
			Auth:     &v1alpha1.AuthSpec{SingleUserAPIKey: &v1alpha1.SingleUserAPIKey{}, AllowAnonymousAccess: ptr.To(false)},
			Expose: &v1alpha1.ExposeSpec{
				Service: &v1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
				Ingress: &v1alpha1.IngressSpec{Enabled: ptr.To(false)},
			},
			Monitoring: &v1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(false), Interval: "30s"},
		}},
	}
}

// singleUserManaged: the default shape, data on a claim template, managed PostgreSQL.
func singleUserManaged() *v1alpha1.TiledInstance { return baseInstance("csx") }

// oidcExternal: OIDC with two providers, an external database, an Ingress with TLS, extra env, a
// config fragment.
func oidcExternal() *v1alpha1.TiledInstance {
	ti := baseInstance("hxn")
	ti.Spec.Database = &v1alpha1.DatabaseSpec{External: &v1alpha1.ExternalDatabase{
		URISecretRef: &v1alpha1.SecretKeyRef{Name: "hxn-db", Key: "uri"},
	}}
	ti.Spec.Auth = &v1alpha1.AuthSpec{
		AllowAnonymousAccess: ptr.To(true),
		OIDC: &v1alpha1.OIDCAuth{
			Providers: []v1alpha1.OIDCProvider{
				{Name: "orcid", ClientID: "APP-123", ClientSecretRef: &v1alpha1.SecretKeyRef{Name: "orcid", Key: "secret"}, WellKnownURI: "https://orcid.org/.well-known/openid-configuration"},
				{Name: "bnl-sso", ClientID: "tiled", ClientSecretRef: &v1alpha1.SecretKeyRef{Name: "bnl-sso"}, WellKnownURI: "https://sso.bnl.gov/.well-known/openid-configuration"},
			},
			Admins: []string{"orcid:0000-0001-2345-6789"},
		},
	}
	ti.Spec.Expose.Ingress = &v1alpha1.IngressSpec{
		Enabled: ptr.To(true), ClassName: "nginx", Host: "hxn.tiled.nsls2.bnl.gov", TLSSecretName: "tiled-tls",
		Annotations: map[string]string{"nginx.ingress.kubernetes.io/proxy-body-size": "0"},
	}
	ti.Spec.Tiled.Env = []v1alpha1.EnvVar{
		{Name: "TILED_SERVER_LOG_LEVEL", Value: ptr.To("info")},
		{Name: "S3_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}, Key: "key"}}},
	}
	ti.Spec.Config = &apiextensionsv1.JSON{Raw: []byte(`{"response_bytesize_limit": 500000000, "uvicorn": {"proxy_headers": true}}`)}
	return ti
}

// nfsScaled: NFS data, detector mounts on NFS and on an existing claim, three replicas, a
// ServiceMonitor, retention Delete, scheduling settings, the pods' uid and groups, image pull
// secrets, affinity and topology spread (Tiled), node selector and tolerations (PostgreSQL).
func nfsScaled() *v1alpha1.TiledInstance {
	ti := baseInstance("chx")
	ti.Spec.Tiled.Replicas = ptr.To[int32](3)
	ti.Spec.Tiled.NodeSelector = map[string]string{"nsls2.bnl.gov/pool": "tiled"}
	ti.Spec.Tiled.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tiled", Effect: corev1.TaintEffectNoSchedule}}
	ti.Spec.Tiled.PodAnnotations = map[string]string{"example.org/team": "data"}
	ti.Spec.Tiled.PodLabels = map[string]string{"team": "data", "app.kubernetes.io/name": "not-tiled"}
	ti.Spec.Storage = &v1alpha1.StorageSpec{
		Data: &v1alpha1.DataVolume{Size: "1Ti", NFS: &v1alpha1.NFSVolumeSource{Server: "nfs.nsls2.bnl.gov", Path: "/nsls2/data/chx/tiled"}},
		ReadOnlyMounts: []v1alpha1.ReadOnlyMount{
			{Name: "proposals", NFS: &v1alpha1.NFSVolumeSource{Server: "nfs.nsls2.bnl.gov", Path: "/nsls2/data/chx/proposals"}},
			{Name: "legacy", MountPath: "/legacy", ExistingClaimName: "chx-legacy"},
		},
		Retention: v1alpha1.RetentionDelete,
	}
	ti.Spec.Monitoring = &v1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true), Interval: "15s"}
	// The facility's identity on its NFS exports, a private registry, placement.
	ti.Spec.Tiled.RunAsUser = ptr.To[int64](52011)
	ti.Spec.Tiled.RunAsGroup = ptr.To[int64](52000)
	ti.Spec.Tiled.FSGroup = ptr.To[int64](52000)
	ti.Spec.Tiled.SupplementalGroups = []int64{3001, 3002}
	ti.Spec.Tiled.ImagePullSecrets = []v1alpha1.LocalObjectReference{{Name: "nsls2-registry"}}
	ti.Spec.Tiled.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 50, PodAffinityTerm: corev1.PodAffinityTerm{
			TopologyKey:   "kubernetes.io/hostname",
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "database"}},
		}}},
	}}
	ti.Spec.Tiled.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "server"}},
		MatchLabelKeys: []string{"app.kubernetes.io/instance"},
	}}
	ti.Spec.Database.Managed.ImagePullSecrets = []v1alpha1.LocalObjectReference{{Name: "nsls2-registry"}}
	ti.Spec.Database.Managed.NodeSelector = map[string]string{"nsls2.bnl.gov/disk": "ssd"}
	ti.Spec.Database.Managed.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "database", Effect: corev1.TaintEffectNoSchedule}}
	return ti
}

// existingClaim: data on an existing claim, API key taken from another Secret, a NodePort Service.
func existingClaim() *v1alpha1.TiledInstance {
	ti := baseInstance("iss")
	ti.Spec.Storage.Data = &v1alpha1.DataVolume{ExistingClaimName: "iss-data"}
	ti.Spec.Auth.SingleUserAPIKey.SecretRef = &v1alpha1.SecretKeyRef{Name: "iss-api-key", Key: "key"}
	ti.Spec.Expose.Service = &v1alpha1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Annotations: map[string]string{"metallb.universe.tf/allow-shared-ip": "tiled"}}
	ti.Spec.Monitoring = &v1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(true)}
	return ti
}
