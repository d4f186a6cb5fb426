package render

import (
	"bytes"
	"encoding/json"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

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
			Streaming: &v1alpha1.StreamingSpec{
				Enabled: ptr.To(true),
				Managed: &v1alpha1.ManagedCache{Image: "valkey/valkey:8.1", Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				}},
				DataTTLSeconds: ptr.To[int32](3600), SequenceTTLSeconds: ptr.To[int32](2592000),
			},
			NetworkPolicy: &v1alpha1.NetworkPolicySpec{
				Enabled:                    ptr.To(true),
				IngressControllerNamespace: ptr.To("ingress-nginx"),
				MetricsNamespace:           ptr.To("monitoring"),
				Egress:                     &v1alpha1.NetworkEgressSpec{Restricted: ptr.To(false), DNSPorts: []int32{53}},
			},
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
	// The facility's Redis Sentinel deployment, over TLS, with a password; updates kept ten minutes.
	ti.Spec.Streaming = &v1alpha1.StreamingSpec{
		Enabled: ptr.To(true),
		External: &v1alpha1.ExternalCache{Sentinel: &v1alpha1.CacheSentinel{
			Addresses:         []string{"sentinel-0.redis:26379", "sentinel-1.redis:26379", "sentinel-2.redis:26379"},
			ServiceName:       "tiled",
			PasswordSecretRef: &v1alpha1.SecretKeyRef{Name: "redis-sentinel"},
			TLS:               ptr.To(true),
		}},
		DataTTLSeconds: ptr.To[int32](600),
	}
	// Only the facility's notebooks and the ingress controller reach Tiled; its pods connect out only
	// to DNS, the external database, the Sentinels and the OIDC providers (the facility's proxy).
	ti.Spec.NetworkPolicy.IngressControllerNamespace = ptr.To("")
	ti.Spec.NetworkPolicy.TiledFrom = []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility.example.org/notebooks": "true"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.20.0.0/16", Except: []string{"10.20.99.0/24"}}},
	}
	tcp := corev1.ProtocolTCP
	ti.Spec.NetworkPolicy.Egress = &v1alpha1.NetworkEgressSpec{
		Restricted: ptr.To(true),
		DNSPorts:   []int32{53, 5353}, // OpenShift's DNS pods answer on 5353
		Allow: []networkingv1.NetworkPolicyEgressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(5432))}}, To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.30.1.5/32"}}}},
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(26379)), EndPort: ptr.To[int32](26381)}}, To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "redis"}}, PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"sentinel", "redis"}}}}}}},
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(3128))}}, To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.8/32"}}}},
		},
	}
	return ti
}

// nfsScaled: NFS data, detector mounts on NFS and on an existing claim, three replicas, a
// ServiceMonitor, retention Delete, scheduling settings, the pods' uid and groups, image pull
// secrets, affinity and topology spread (Tiled), node selector and tolerations (PostgreSQL).
func nfsScaled() *v1alpha1.TiledInstance {
	ti := baseInstance("chx")
	ti.Spec.Tiled.Replicas = ptr.To[int32](3)
	// An autoscaler between 2 and 6 pods (replicas is left to it), the cache placed like the database.
	ti.Spec.Tiled.Autoscaling = &v1alpha1.AutoscalingSpec{Enabled: ptr.To(true), MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](6),
		TargetCPUUtilizationPercentage: ptr.To[int32](60), ScaleDownStabilizationSeconds: ptr.To[int32](120)}
	ti.Spec.Streaming.Managed.NodeSelector = map[string]string{"nsls2.bnl.gov/disk": "ssd"}
	ti.Spec.Streaming.Managed.ImagePullSecrets = []v1alpha1.LocalObjectReference{{Name: "nsls2-registry"}}
	ti.Spec.Tiled.NodeSelector = map[string]string{"nsls2.bnl.gov/pool": "tiled"}
	ti.Spec.Tiled.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tiled", Effect: corev1.TaintEffectNoSchedule}}
	ti.Spec.Tiled.PodAnnotations = map[string]string{"example.org/team": "data"}
	ti.Spec.Tiled.PodLabels = map[string]string{"team": "data", v1alpha1.LabelAppName: "not-tiled"}
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
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelAppComponent: "database"}},
		}}},
	}}
	ti.Spec.Tiled.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelAppComponent: "server"}},
		MatchLabelKeys: []string{v1alpha1.LabelAppInstance},
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
	// Streaming off: no cache, no streaming_cache in config.yml, no password.
	ti.Spec.Streaming.Enabled = ptr.To(false)
	return ti
}

type fixture struct {
	name string
	ti   func() *v1alpha1.TiledInstance
	in   Inputs
}

var secretData = map[string][]byte{
	SecretKeyAPIKey:                 []byte("golden0api0key"),
	SecretKeySecretKeys:             []byte(`["golden0signing0key"]`),
	SecretKeyDatabasePassword:       []byte("golden0password"),
	SecretKeyStreamingCachePassword: []byte("golden0cache0password"),
}

// metricsSecretData is the metrics Secret's data, of the fixtures with a ServiceMonitor.
var metricsSecretData = map[string][]byte{SecretKeyMetricsToken: []byte("golden0metrics0token")}

func fixtures() []fixture {
	return []fixture{
		{"single-user-managed", singleUserManaged, Inputs{SecretData: secretData}},
		{"oidc-external", oidcExternal, Inputs{SecretData: secretData, ExternalSecretKeys: []string{"uri", ExternalKeyStorageURI, ExternalKeyAuthURI}}},
		{"nfs-scaled", nfsScaled, Inputs{SecretData: secretData, MetricsSecretData: metricsSecretData, ServiceMonitorAvailable: true}},
		{"existing-claim", existingClaim, Inputs{SecretData: secretData, MetricsSecretData: metricsSecretData}}, // ServiceMonitor CRD absent
	}
}

// objectsYAML serializes every rendered object, in a fixed order, as one multi-document YAML.
func objectsYAML(o *Objects) ([]byte, error) {
	var docs []any
	for _, v := range o.All() {
		if u, ok := v.(*unstructured.Unstructured); ok {
			v = u.Object
		}
		docs = append(docs, v)
	}
	var buf bytes.Buffer
	for _, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// podTemplates converts every pod template rendered for the fixture into core types.
func podTemplates(g Gomega, o *Objects) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	conv := func(name string, tpl *corev1ac.PodTemplateSpecApplyConfiguration) {
		b, err := json.Marshal(tpl)
		g.Expect(err).NotTo(HaveOccurred())
		var p corev1.PodTemplateSpec
		g.Expect(json.Unmarshal(b, &p)).To(Succeed())
		out[name] = p
	}
	conv("tiled", o.StatefulSet.Spec.Template)
	if o.Postgres != nil {
		conv("postgres", o.Postgres.Spec.Template)
	}
	if o.Cache != nil {
		conv("cache", o.Cache.Spec.Template)
	}
	return out
}
