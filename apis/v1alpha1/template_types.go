package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceTemplate holds the settings of one Tiled deployment. A TiledProfile, the template of a
// TiledCluster and the overrides of one of its instances each set some of these fields; the operator
// layers them, lowest to highest: built-in defaults, profiles by (priority, name), the cluster
// template, the instance overrides. Maps merge, scalars replace, keyed lists (env by name, read-only
// mounts by name) merge by key, other lists are replaced whole. A field whose name ends in
// "Expression" holds a CEL expression that computes its sibling field for each instance, over
// `instance` (name, labels), `cluster` (name, labels) and `namespace`.
type InstanceTemplate struct {
	// Tiled configures the Tiled server container and its pods.
	// +optional
	Tiled *TiledServerSpec `json:"tiled,omitempty"`

	// Storage configures the writable data volume and the read-only detector data mounts.
	// +optional
	Storage *StorageSpec `json:"storage,omitempty"`

	// Database configures the PostgreSQL database that holds Tiled's catalog: one managed by the
	// operator, or an external one referenced by a Secret.
	// +optional
	Database *DatabaseSpec `json:"database,omitempty"`

	// Auth configures how clients authenticate: a single-user API key, or OIDC providers.
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`

	// Expose configures how Tiled is reached: its Service and an optional Ingress.
	// +optional
	Expose *ExposeSpec `json:"expose,omitempty"`

	// Monitoring configures Prometheus scraping of Tiled's metrics endpoint.
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`

	// Backup configures logical backups (pg_dump) of the instance's databases to a claim or an
	// S3-compatible bucket, on a schedule and on demand (`kubectl tiled backup`), and the backup a new
	// instance's database is restored from. Set once in a profile; absent, nothing is backed up (a
	// managed database then gets an admission warning and the condition BackedUp=False).
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Streaming configures the streaming cache through which Tiled serves live data: websocket
	// subscriptions to arrays, tables and containers written during a scan. Every Tiled replica of an
	// instance publishes to and subscribes through the same cache, so replicas and autoscaling need
	// it too. By default (built-in) the operator runs a Redis-protocol cache beside each instance; a
	// profile may name an external one instead, or turn streaming off.
	// +optional
	Streaming *StreamingSpec `json:"streaming,omitempty"`

	// NetworkPolicy configures the NetworkPolicies the operator renders for the instance (on by
	// default): its database and streaming cache accept connections only from the instance's own
	// pods, Tiled's port only from the sources named here, and, when egress is restricted, the
	// instance's pods connect only to DNS, their database and cache and the destinations allowed.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// Maintenance is the facility's calendar for disruptive changes: recurring allow windows and
	// exclusions (a beam run). A change that restarts Tiled or its database — a change of the Tiled
	// or PostgreSQL pod template, from the spec or from a new operator release, and the start of a
	// Tiled upgrade with its migration — waits until the calendar is open, and status.maintenance
	// says whether it is and when it next opens. First creation, repairs (a deleted child made
	// again), scaling, backups and status are never gated, and a step that started (an upgrade
	// under way) always finishes. Absent, every change is applied at once, as without a calendar.
	// Set it in a profile; a beamline overrides it (windows are replaced whole, exclusions merge by
	// name). docs/maintenance.md.
	// +optional
	Maintenance *MaintenanceSpec `json:"maintenance,omitempty"`

	// Notifications sends the instance's state changes that need a person's attention — a change
	// waiting for approval, a maintenance window opened with work queued, an upgrade started,
	// finished or failed, a backup failed — to a generic webhook (Slack- and Teams-compatible
	// payload), once per state change, in addition to the Kubernetes Events that are always sent.
	// Absent, nothing is sent. Set it in a profile; a beamline overrides it. docs/maintenance.md
	// "Notifications".
	// +optional
	Notifications *NotificationsSpec `json:"notifications,omitempty"`

	// Config is a free-form fragment of Tiled's own configuration file, merged over the configuration
	// the operator renders (maps merge, other values replace). Tiled rejects unknown keys, so only keys
	// of Tiled's config schema belong here, e.g. `{response_bytesize_limit: 500000000}`.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Config *apiextensionsv1.JSON `json:"config,omitempty"`
}

// TiledServerSpec configures the Tiled server container and the pods that run it.
type TiledServerSpec struct {
	// Image is the Tiled container image, e.g. ghcr.io/bluesky/tiled:0.2.20 (Tiled's tags have no "v").
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Version states the Tiled release the image runs (e.g. 0.2.14), for an image whose tag does not
	// say it: a digest, latest, a facility's own tag. Unset, the version is read from the image's tag;
	// when the tag does not say it either, the newest supported version is assumed and admission
	// warns. The configuration is checked and rendered for this version.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+\.[0-9]+$`
	Version string `json:"version,omitempty"`

	// ImagePullPolicy is the pull policy of the Tiled image: Always, IfNotPresent or Never.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Replicas is the number of Tiled server pods. More than one adds a PodDisruptionBudget; Tiled
	// runs with --scalable so that replicas share the database.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`

	// Autoscaling lets a HorizontalPodAutoscaler set the number of Tiled pods between minReplicas and
	// maxReplicas from their CPU use; while it is on, replicas is left to it (and ignored). Several
	// replicas need a data volume that pods on several nodes can mount (ReadWriteMany or NFS), and the
	// streaming cache, which they share.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`

	// Resources are the CPU and memory requests and limits of the Tiled containers. Unless a layer
	// sets them, the built-in defaults apply (provenance `default`): requests cpu 250m and memory
	// 512Mi, limit memory 2Gi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Env lists extra environment variables of the Tiled container, merged across layers by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Env []EnvVar `json:"env,omitempty"`

	// NodeSelector constrains the Tiled pods to nodes with these labels; maps merge across layers.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the Tiled pods. The list is replaced whole by a higher layer.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PodAnnotations are added to the Tiled pods; maps merge across layers.
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// PodLabels are added to the Tiled pods; maps merge across layers. The operator's own labels win.
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// PriorityClassName is the priority class of the Tiled pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// ServiceAccountName runs the Tiled pods under this service account instead of the default one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// RunAsUser is the uid the Tiled containers run as (default 999), e.g. the uid a facility's NFS
	// exports grant access to. It must not be 0: the pods pass the restricted Pod Security Standard.
	// It reaches the NFS server's files, so it is an administrator's decision: a cluster's template
	// or overrides, or a standalone instance, may set it only to a uid one of its TiledProfiles lists
	// in allowedUserIDs.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	RunAsUser *int64 `json:"runAsUser,omitempty"`

	// RunAsGroup is the primary gid of the Tiled containers (default 999). Outside profiles, only a
	// gid one of the instance's TiledProfiles lists in allowedGroupIDs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`

	// FSGroup is the gid that owns the pod's volumes that support ownership management (claims on
	// a storage class; not NFS) and is added to the containers' groups (default 999). Outside
	// profiles, only a gid one of the instance's TiledProfiles lists in allowedGroupIDs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	FSGroup *int64 `json:"fsGroup,omitempty"`

	// SupplementalGroups are further gids of the Tiled containers, e.g. the group that may read a
	// beamline's detector files on NFS. The list is replaced whole by a higher layer. Outside
	// profiles, only gids one of the instance's TiledProfiles lists in allowedGroupIDs.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Minimum=0
	// +kubebuilder:validation:items:Maximum=2147483647
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`

	// ImagePullSecrets are Secrets of the instance's namespace holding credentials for the registry
	// of the Tiled image, merged across layers by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Affinity constrains which nodes the Tiled pods run on and beside which pods, as in a pod's
	// spec.affinity. Objects merge across layers; the lists within are replaced whole.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints spread the Tiled pods across zones or nodes, as in a pod's
	// spec.topologySpreadConstraints. To spread the replicas of each instance on their own, use
	// matchLabelKeys: [app.kubernetes.io/instance]. The list is replaced whole by a higher layer.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
}

// LocalObjectReference names an object, here a Secret, in the instance's namespace.
type LocalObjectReference struct {
	// Name of the object, a DNS subdomain; the key by which layers merge such lists.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// EnvVar is an environment variable of the Tiled container: a literal value, a value computed per
// instance by a CEL expression, or a key of a Secret or ConfigMap.
// +kubebuilder:validation:XValidation:rule="(has(self.value) ? 1 : 0) + (has(self.valueExpression) ? 1 : 0) + (has(self.valueFrom) ? 1 : 0) <= 1",message="value, valueExpression and valueFrom are mutually exclusive"
type EnvVar struct {
	// Name of the variable; the key by which layers merge the env list.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z][-._a-zA-Z0-9]*$`
	Name string `json:"name"`

	// Value is the literal value of the variable.
	// +optional
	Value *string `json:"value,omitempty"`

	// ValueExpression is a CEL expression returning a string, evaluated per instance, e.g.
	// `'https://' + instance.name + '.example.org'`.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ValueExpression *string `json:"valueExpression,omitempty"`

	// ValueFrom takes the value from a key of a Secret or ConfigMap.
	// +optional
	ValueFrom *corev1.EnvVarSource `json:"valueFrom,omitempty"`
}

// RetentionPolicy says what happens to an instance's data volumes and database volume when the
// instance is removed from its cluster or the cluster is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type RetentionPolicy string

const (
	// RetentionRetain keeps the volumes: they are released from the instance, labelled, and reported.
	RetentionRetain RetentionPolicy = "Retain"
	// RetentionDelete deletes the volumes with the instance.
	RetentionDelete RetentionPolicy = "Delete"
)

// StorageSpec configures the volumes of a Tiled instance.
type StorageSpec struct {
	// Data is the writable volume where Tiled stores the arrays and files clients upload.
	// +optional
	Data *DataVolume `json:"data,omitempty"`

	// ReadOnlyMounts are volumes of existing detector data that Tiled serves read-only, merged across
	// layers by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ReadOnlyMounts []ReadOnlyMount `json:"readOnlyMounts,omitempty"`

	// Retention says whether the data volume and the database volume are kept (Retain, the default)
	// or deleted (Delete) when the instance is removed or its cluster deleted.
	// +optional
	Retention RetentionPolicy `json:"retention,omitempty"`
}

// DataVolume is the writable volume of a Tiled instance: a PersistentVolumeClaim the operator creates
// (storageClassName, size, accessModes), the institution's NFS (through a PersistentVolume and claim
// the operator creates, as the restricted Pod Security Standard forbids inline NFS), or an existing
// claim.
// +kubebuilder:validation:XValidation:rule="[has(self.nfs), has(self.existingClaimName), has(self.storageClassName)].filter(x, x).size() <= 1",message="nfs, existingClaimName and storageClassName are mutually exclusive: an NFS volume and an existing claim have no storage class"
type DataVolume struct {
	// Size is the capacity of the volume, e.g. 50Gi.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",message="size must be a positive quantity, e.g. 50Gi"
	Size string `json:"size,omitempty"`

	// StorageClassName is the storage class of the claim the operator creates. Empty uses the
	// cluster's default class.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// AccessModes of the claim, e.g. [ReadWriteOnce]. Replicas > 1 need ReadWriteMany.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`

	// NFS puts the volume on an NFS export.
	// +optional
	NFS *NFSVolumeSource `json:"nfs,omitempty"`

	// ExistingClaimName uses an existing PersistentVolumeClaim in the instance's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ExistingClaimName string `json:"existingClaimName,omitempty"`
}

// NFSVolumeSource is an NFS export. The path is given literally or computed per instance. The
// merged result needs both a server and a path. NFS exports are an administrator's decision: a
// cluster's template or overrides, or a standalone instance, may name only an export that one of
// its TiledProfiles lists in allowedNFS (values the profiles set themselves are allowed).
// +kubebuilder:validation:XValidation:rule="!(has(self.path) && has(self.pathExpression))",message="path and pathExpression are mutually exclusive"
type NFSVolumeSource struct {
	// Server is the host name or address of the NFS server.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Server string `json:"server,omitempty"`

	// Path is the exported directory, an absolute path.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="path must be absolute"
	Path string `json:"path,omitempty"`

	// PathExpression is a CEL expression returning the path per instance, e.g.
	// `'/nsls2/data/' + instance.name + '/proposals'`.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	PathExpression string `json:"pathExpression,omitempty"`
}

// ReadOnlyMount is existing data, such as a beamline's detector files, that Tiled serves read-only.
// +kubebuilder:validation:XValidation:rule="!(has(self.nfs) && has(self.existingClaimName))",message="nfs and existingClaimName are mutually exclusive"
type ReadOnlyMount struct {
	// Name identifies the mount; layers merge read-only mounts by name. It becomes part of the names
	// of the volume and claim, so it is a DNS label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// MountPath is where the data appears in the Tiled container; defaults to /data/<name>.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="mountPath must be absolute"
	MountPath string `json:"mountPath,omitempty"`

	// NFS serves an NFS export, mounted through a PersistentVolume and claim the operator creates.
	// +optional
	NFS *NFSVolumeSource `json:"nfs,omitempty"`

	// ExistingClaimName serves an existing PersistentVolumeClaim in the instance's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ExistingClaimName string `json:"existingClaimName,omitempty"`
}

// DatabaseSpec selects Tiled's PostgreSQL database: managed by the operator, or external.
// +kubebuilder:validation:XValidation:rule="!(has(self.managed) && has(self.external))",message="managed and external are mutually exclusive"
type DatabaseSpec struct {
	// Managed runs PostgreSQL as a StatefulSet beside Tiled, with the catalog, storage and auth
	// databases created by the operator.
	// +optional
	Managed *ManagedDatabase `json:"managed,omitempty"`

	// External uses a PostgreSQL server run apart from Tiled, whose connection URI is in a Secret.
	// +optional
	External *ExternalDatabase `json:"external,omitempty"`
}

// ManagedDatabase is a PostgreSQL StatefulSet the operator runs for one Tiled instance.
type ManagedDatabase struct {
	// Image is the PostgreSQL image, e.g. postgres:16.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Size is the capacity of the database volume, e.g. 20Gi.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",message="size must be a positive quantity, e.g. 20Gi"
	Size string `json:"size,omitempty"`

	// StorageClassName is the storage class of the database volume. Empty uses the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Resources are the CPU and memory requests and limits of the PostgreSQL container. Unless a layer
	// sets them, the built-in defaults apply (provenance `default`): requests cpu 100m and memory
	// 256Mi, limit memory 1Gi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// ImagePullSecrets are Secrets of the instance's namespace holding credentials for the registry
	// of the PostgreSQL image, merged across layers by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// NodeSelector constrains the PostgreSQL pod to nodes with these labels (e.g. nodes with local
	// SSDs); maps merge across layers. (The Tiled pods have tiled.affinity for finer placement.)
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the PostgreSQL pod. The list is replaced whole by a higher layer.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ExternalDatabase is a PostgreSQL server run apart from Tiled.
type ExternalDatabase struct {
	// URISecretRef names the Secret and key holding the catalog's connection URI,
	// postgresql://user:password@host:5432/dbname.
	// +optional
	URISecretRef *SecretKeyRef `json:"uriSecretRef,omitempty"`
}

// SecretKeyRef names a key of a Secret in the instance's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Key within the Secret.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// AuthSpec selects how clients authenticate to Tiled.
// +kubebuilder:validation:XValidation:rule="!(has(self.singleUserAPIKey) && has(self.oidc))",message="singleUserAPIKey and oidc are mutually exclusive"
type AuthSpec struct {
	// SingleUserAPIKey protects Tiled with one API key, generated once per instance and kept in its
	// Secret (or taken from the Secret named here).
	// +optional
	SingleUserAPIKey *SingleUserAPIKey `json:"singleUserAPIKey,omitempty"`

	// OIDC authenticates users with OpenID Connect providers; sessions are kept in the auth database.
	// +optional
	OIDC *OIDCAuth `json:"oidc,omitempty"`

	// AllowAnonymousAccess lets clients without credentials read public data.
	// +optional
	AllowAnonymousAccess *bool `json:"allowAnonymousAccess,omitempty"`
}

// SingleUserAPIKey protects Tiled with one API key.
type SingleUserAPIKey struct {
	// SecretRef takes the key from an existing Secret instead of generating one.
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`
}

// OIDCAuth authenticates users with OpenID Connect providers.
type OIDCAuth struct {
	// Providers are the identity providers users may log in with, merged across layers by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Providers []OIDCProvider `json:"providers,omitempty"`

	// Admins are identities (provider and id, e.g. "orcid:0000-0001-2345-6789") given admin rights.
	// +optional
	// +listType=atomic
	Admins []string `json:"admins,omitempty"`
}

// OIDCProvider is one OpenID Connect identity provider.
type OIDCProvider struct {
	// Name of the provider as Tiled shows it, e.g. orcid; the key by which layers merge providers.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// ClientID registered with the provider.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClientID string `json:"clientID,omitempty"`

	// ClientSecretRef names the Secret and key holding the client secret.
	// +optional
	ClientSecretRef *SecretKeyRef `json:"clientSecretRef,omitempty"`

	// WellKnownURI is the provider's OpenID configuration document.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="wellKnownURI must be an https:// URL"
	WellKnownURI string `json:"wellKnownURI,omitempty"`
}

// ExposeSpec configures how Tiled is reached.
type ExposeSpec struct {
	// Service configures the Service in front of Tiled (port 8000, named http).
	// +optional
	Service *ServiceSpec `json:"service,omitempty"`

	// Ingress exposes Tiled through an Ingress.
	// +optional
	Ingress *IngressSpec `json:"ingress,omitempty"`
}

// ServiceSpec configures the Service in front of Tiled.
type ServiceSpec struct {
	// Type of the Service: ClusterIP (the default), NodePort or LoadBalancer.
	// +optional
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`

	// Annotations of the Service; maps merge across layers.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// IngressSpec exposes Tiled through an Ingress.
// +kubebuilder:validation:XValidation:rule="!(has(self.host) && has(self.hostExpression))",message="host and hostExpression are mutually exclusive"
type IngressSpec struct {
	// Enabled creates the Ingress; a higher layer sets false to turn off an Ingress a profile enables.
	// Only true creates it: a profile may set className and hostExpression for every beamline and let
	// each beamline opt in. An instance with a host but enabled unset gets an admission warning and
	// the condition IngressEnabled=False (reason HostWithoutEnabled), so the omission is never silent.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// ClassName is the ingress class, e.g. nginx.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClassName string `json:"className,omitempty"`

	// Host is the DNS name Tiled is served at.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Host string `json:"host,omitempty"`

	// HostExpression is a CEL expression returning the host per instance, e.g.
	// `instance.name + '.tiled.example.org'`.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	HostExpression string `json:"hostExpression,omitempty"`

	// TLSSecretName is the Secret with the certificate for the host; empty serves plain HTTP.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TLSSecretName string `json:"tlsSecretName,omitempty"`

	// Annotations of the Ingress; maps merge across layers.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// MonitoringSpec configures Prometheus scraping of Tiled's metrics.
type MonitoringSpec struct {
	// ServiceMonitor adds a metrics sidecar to the Tiled pods, serving Tiled's metrics on port
	// metrics (9090) to the bearer token of the Secret <instance>-metrics, and creates a
	// prometheus-operator ServiceMonitor scraping it with that token (never a Tiled API key) when
	// that CRD exists in the cluster. Works in single-user mode and under OIDC.
	// +optional
	ServiceMonitor *bool `json:"serviceMonitor,omitempty"`

	// Interval between scrapes, e.g. 30s.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	Interval string `json:"interval,omitempty"`
}

// AutoscalingSpec configures a HorizontalPodAutoscaler (autoscaling/v2) of the Tiled pods.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="spec.tiled.autoscaling: minReplicas must not exceed maxReplicas"
type AutoscalingSpec struct {
	// Enabled turns the autoscaler on. Off (the default), the instance runs tiled.replicas pods.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// MinReplicas is the fewest Tiled pods the autoscaler keeps (default 1).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the most Tiled pods the autoscaler runs (default 3).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// TargetCPUUtilizationPercentage is the average CPU use, as a percentage of the Tiled container's
	// CPU request, the autoscaler keeps the pods at (default 70). It needs a CPU request and a metrics
	// API (metrics-server) in the cluster.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	TargetCPUUtilizationPercentage *int32 `json:"targetCPUUtilizationPercentage,omitempty"`

	// ScaleDownStabilizationSeconds is how long the autoscaler waits, after load falls, before it
	// removes pods (default 300, Kubernetes' own default).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	ScaleDownStabilizationSeconds *int32 `json:"scaleDownStabilizationSeconds,omitempty"`
}

// StreamingSpec configures Tiled's streaming cache (its `streaming_cache` setting): a Redis-protocol
// server that numbers every update of a node, keeps it for replay for dataTTLSeconds, and publishes it
// to the subscribers of every Tiled replica. Without one, Tiled refuses subscriptions.
// +kubebuilder:validation:XValidation:rule="!(has(self.managed) && has(self.external))",message="managed and external are mutually exclusive"
type StreamingSpec struct {
	// Enabled turns live streaming on (built-in default true). Off, Tiled runs without a streaming
	// cache: reads and writes work, subscriptions are refused, and the operator runs no cache.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Managed runs a single-node Redis-protocol cache (Redis or Valkey) beside the instance, as a
	// StatefulSet and a Service named <instance>-cache, with a generated password in the instance's
	// Secret (key STREAMING_CACHE_PASSWORD). Its content lives in memory (and an append-only file on an
	// emptyDir, so a container restart keeps it); a new cache pod starts empty and subscribers then
	// start their sequence numbers again.
	// +optional
	Managed *ManagedCache `json:"managed,omitempty"`

	// External uses a cache run apart from the operator: one server by URI, or Redis Sentinel.
	// +optional
	External *ExternalCache `json:"external,omitempty"`

	// DataTTLSeconds is how long each update is kept in the cache for subscribers that replay from an
	// earlier sequence number or reconnect (Tiled's data_ttl, default 3600).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2592000
	DataTTLSeconds *int32 `json:"dataTTLSeconds,omitempty"`

	// SequenceTTLSeconds is how long a node's sequence counter outlives its last update (Tiled's
	// seq_ttl, default 2592000, 30 days).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=31536000
	SequenceTTLSeconds *int32 `json:"sequenceTTLSeconds,omitempty"`
}

// ManagedCache is the streaming cache the operator runs for one instance.
type ManagedCache struct {
	// Image is the cache's image; it must provide /bin/sh, redis-server and redis-cli (the Redis
	// images and Valkey's, which ships these names too), e.g. valkey/valkey:8.1.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Resources are the CPU and memory requests and limits of the cache container. The cache's
	// maxmemory is nine tenths of the memory limit; past it, updates nearest their expiry are evicted
	// first. Unless a layer sets them, the built-in defaults apply (provenance `default`): requests
	// cpu 50m and memory 64Mi, limit memory 256Mi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// ImagePullSecrets are Secrets of the instance's namespace holding credentials for the registry
	// of the cache image, merged across layers by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// NodeSelector constrains the cache pod to nodes with these labels; maps merge across layers.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the cache pod. The list is replaced whole by a higher layer.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ExternalCache is a Redis-protocol cache run apart from the operator.
// +kubebuilder:validation:XValidation:rule="has(self.uriSecretRef) != has(self.sentinel)",message="spec.streaming.external: set exactly one of uriSecretRef and sentinel"
type ExternalCache struct {
	// URISecretRef names the Secret and key (default "uri") holding the cache's URI,
	// redis://:password@host:6379/0 or rediss:// for TLS.
	// +optional
	URISecretRef *SecretKeyRef `json:"uriSecretRef,omitempty"`

	// Sentinel finds the cache's primary through Redis Sentinel and follows its failovers.
	// +optional
	Sentinel *CacheSentinel `json:"sentinel,omitempty"`
}

// CacheSentinel names a Redis Sentinel deployment.
type CacheSentinel struct {
	// Addresses are the Sentinels, each host:port.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:[0-9]{1,5}$`
	// +kubebuilder:validation:items:MaxLength=260
	Addresses []string `json:"addresses"`

	// ServiceName is the name under which the Sentinels monitor the primary.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ServiceName string `json:"serviceName"`

	// PasswordSecretRef names the Secret and key (default "password") holding the password of the
	// Sentinels and the data nodes. Absent, none is sent.
	// +optional
	PasswordSecretRef *SecretKeyRef `json:"passwordSecretRef,omitempty"`

	// TLS connects to the Sentinels and the data nodes over TLS.
	// +optional
	TLS *bool `json:"tls,omitempty"`
}

// BackupSpec configures the backups of an instance's databases. A backup is one custom-format
// pg_dump of each database the instance uses (catalog, tabular storage, auth), with SHA256SUMS and
// a manifest.json (instance, Tiled version, revisions, sizes, checksums, time), under
// <target>/<namespace>/<instance>/<NAME>, NAME being the UTC time it began (20261203T073000Z). A
// backup is whole once its manifest.json exists: a half-written one is never listed or restored.
// An upgrade that migrates the databases backs them up to the target first, as the scheduled
// backups are (the same listing and retention), under NAME-pre-upgrade-<from>-to-<to>
// (20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20); no scheduled backup runs beside an upgrade's
// backup, migration or restore. Files on the data volume (arrays written through Tiled) are not in a
// database backup.
// +kubebuilder:validation:XValidation:rule="!(has(self.claim) && has(self.s3))",message="spec.backup: claim and s3 are exclusive: backups go to one target"
// +kubebuilder:validation:XValidation:rule="!has(self.schedule) || size(self.schedule) == 0 || has(self.claim) || has(self.s3)",message="spec.backup.schedule needs a target: set spec.backup.claim or spec.backup.s3"
// +kubebuilder:validation:XValidation:rule="!has(self.restoreFrom) || size(self.restoreFrom) == 0 || has(self.claim) || has(self.s3)",message="spec.backup.restoreFrom needs a target to read the backup from: set spec.backup.claim or spec.backup.s3"
type BackupSpec struct {
	// Schedule is when backups are taken, in cron syntax (as a CronJob's, e.g. "30 2 * * *" or
	// "@daily"). Empty takes none on a schedule; `kubectl tiled backup` still takes one when a target
	// is set.
	// +optional
	// +kubebuilder:validation:MaxLength=100
	Schedule string `json:"schedule,omitempty"`

	// TimeZone is the IANA time zone of the schedule (e.g. "America/New_York"); empty is the
	// kube-controller-manager's.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`

	// Suspend stops scheduled backups (on-demand ones still run). Nothing is deleted.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// Retention says which whole backups each backup keeps on the target after it is written; the
	// newest is always kept.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// Claim writes backups to an existing claim in the instance's namespace (an NFS export bound as
	// ReadWriteMany is what most facilities have), under claim:/<path>/<namespace>/<instance>/.
	// +optional
	Claim *BackupClaimTarget `json:"claim,omitempty"`

	// S3 writes backups to a bucket of an S3-compatible object store, under
	// s3://<bucket>/<prefix>/<namespace>/<instance>/.
	// +optional
	S3 *BackupS3Target `json:"s3,omitempty"`

	// RestoreFrom makes a new (or re-added) instance start from a backup on the target: "latest" (the
	// newest whole backup) or a backup's name. The database is restored before Tiled starts, and only
	// when it is empty: an instance whose database already holds a catalog (a re-added beamline
	// whose retained volume came back) keeps it, and the status says so. A backup taken with a Tiled
	// version newer than spec.tiled's, or one that is corrupt or missing, is refused with the
	// condition Stalled (reason RestoreFailed) and nothing restored. Done once per instance
	// (status.backup.restore). A backup an upgrade took before its migration is named
	// <time>-pre-upgrade-<fromVersion>-to-<toVersion>; one a restore in place took of the databases
	// it replaced, <time>-pre-restore. To restore a backup into an instance that serves, use
	// `kubectl tiled restore` instead (status.inPlaceRestore).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(latest|[0-9]{8}T[0-9]{6}Z(-pre-upgrade-[A-Za-z0-9._]+-to-[A-Za-z0-9._]+|-pre-restore)?)$`
	RestoreFrom string `json:"restoreFrom,omitempty"`

	// OnCatalogLost says what the operator does when the catalog of an instance that had one is
	// lost: the managed database's claim is not the one the catalog lived on (deleted, and made
	// again empty), or the migrate step finds the database empty. Either way Tiled is stopped (never
	// started on an empty or broken database), scheduled backups are suspended, and the instance is
	// Stalled (reason CatalogLost) naming the claim, the catalog revision lost and the newest whole
	// backup that would restore it (status.catalogLost). Stall (the default, also when empty) waits
	// for a person: set RestoreLatest, or accept the loss with the annotation
	// tiled.blueskyproject.io/accept-catalog-loss. RestoreLatest restores that backup at once into
	// the new database, with Tiled stopped, and starts Tiled once it is restored.
	// +optional
	// +kubebuilder:validation:Enum=Stall;RestoreLatest
	OnCatalogLost CatalogLostPolicy `json:"onCatalogLost,omitempty"`
}

// CatalogLostPolicy is what the operator does when an instance's catalog is lost.
type CatalogLostPolicy string

const (
	// CatalogLostStall stops Tiled and waits for a person.
	CatalogLostStall CatalogLostPolicy = "Stall"
	// CatalogLostRestoreLatest restores the newest whole backup.
	CatalogLostRestoreLatest CatalogLostPolicy = "RestoreLatest"
)

// BackupRetention is how many backups, and how old, each backup keeps on its target.
type BackupRetention struct {
	// Count keeps at most this many whole backups, the newest (default 7).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Count *int32 `json:"count,omitempty"`

	// Days deletes whole backups older than this many days (the newest is kept whatever its age);
	// absent, age deletes none.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=36500
	Days *int32 `json:"days,omitempty"`
}

// BackupClaimTarget is an existing claim that backups are written to.
type BackupClaimTarget struct {
	// ClaimName is the claim, in the instance's namespace. Several instances may share it: each
	// writes under its own directory. The operator never creates nor deletes it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`

	// Path is the directory in the claim backups go under (default "tiled-backups").
	// +optional
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	Path string `json:"path,omitempty"`
}

// BackupS3Target is a bucket of an S3-compatible object store (AWS S3, MinIO, Ceph RGW,
// versitygw), addressed path-style and signed with AWS Signature Version 4.
type BackupS3Target struct {
	// Endpoint is the store's URL, e.g. https://s3.facility.org (path-style: the bucket follows it).
	// +kubebuilder:validation:Pattern=`^https?://[^/?#]+$`
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Prefix is the key prefix backups go under (default "tiled-backups").
	// +optional
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	Prefix string `json:"prefix,omitempty"`

	// Region signs the requests (default "us-east-1", which most S3-compatible stores accept).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// CredentialsSecret names a Secret in the instance's namespace with the keys AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY.
	CredentialsSecret LocalObjectReference `json:"credentialsSecret"`

	// CACertificateSecret names a Secret whose key ca.crt is the CA bundle the endpoint's TLS
	// certificate is checked against (absent: the system's).
	// +optional
	CACertificateSecret *LocalObjectReference `json:"caCertificateSecret,omitempty"`
}

// NetworkPolicySpec configures the networking.k8s.io/v1 NetworkPolicies of an instance. They take
// effect only where the cluster's network plugin enforces NetworkPolicy (Calico, Cilium, kube-router,
// Antrea, OVN-Kubernetes...); elsewhere they are inert. They select pods by the labels the operator
// sets (app.kubernetes.io/instance, app.kubernetes.io/component), which anyone allowed to create pods
// in the namespace can also set: the policies keep other tenants' and other namespaces' pods out,
// not someone who may create pods beside the instance.
type NetworkPolicySpec struct {
	// Enabled renders the instance's NetworkPolicies (built-in default true): <instance> for the
	// Tiled pods, <instance>-postgres for a managed database, <instance>-cache for a managed
	// streaming cache and, with egress.restricted, <instance>-egress. False removes them.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// IngressControllerNamespace is the namespace of the ingress controller whose pods may open
	// connections to Tiled's port (8000), besides every pod of the instance's own namespace (built-in
	// default ingress-nginx). Set "" where no ingress controller fronts Tiled.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	IngressControllerNamespace *string `json:"ingressControllerNamespace,omitempty"`

	// TiledFrom are more sources allowed to open connections to Tiled's port: NetworkPolicy peers
	// (podSelector, namespaceSelector, ipBlock), e.g. the namespace of the facility's analysis
	// notebooks or a load balancer's address range. The list is replaced whole across layers.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	TiledFrom []networkingv1.NetworkPolicyPeer `json:"tiledFrom,omitempty"`

	// MetricsNamespace is the namespace of the Prometheus that scrapes the Tiled pods' metrics sidecar
	// (port 9090, with spec.monitoring.serviceMonitor): its pods may connect to that port (built-in
	// default monitoring). Set "" to allow none.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	MetricsNamespace *string `json:"metricsNamespace,omitempty"`

	// Egress restricts the connections the instance's pods open (open by default).
	// +optional
	Egress *NetworkEgressSpec `json:"egress,omitempty"`
}

// NetworkEgressSpec restricts the connections an instance's pods (Tiled, its database and cache, and
// the upgrade and backup Jobs) open.
type NetworkEgressSpec struct {
	// Restricted adds the NetworkPolicy <instance>-egress (built-in default false): the instance's
	// pods may then open connections only to DNS (dnsPorts, UDP and TCP, anywhere), the instance's
	// managed database (5432) and managed streaming cache (6379), and the destinations of allow. An
	// external database, an external streaming cache, OIDC providers and S3 backup targets must then
	// be listed in allow.
	// +optional
	Restricted *bool `json:"restricted,omitempty"`

	// DNSPorts are the ports the cluster's DNS pods answer on, opened (UDP and TCP, to any address)
	// when egress is restricted (built-in default [53]). A NetworkPolicy sees a connection after the
	// DNS Service's address was translated to a DNS pod's, so this is the Service's targetPort:
	// CoreDNS of kubeadm listens on 53, OpenShift's DNS pods on 5353, a CoreDNS without the
	// NET_BIND_SERVICE capability on a port such as 1053. The list is replaced whole across layers.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=atomic
	DNSPorts []int32 `json:"dnsPorts,omitempty"`

	// Allow are more egress rules of <instance>-egress: each a list of ports and of destinations
	// (podSelector, namespaceSelector, ipBlock), as in a NetworkPolicy. The list is replaced whole
	// across layers. Only used when restricted.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Allow []networkingv1.NetworkPolicyEgressRule `json:"allow,omitempty"`
}

// MaintenanceSpec is when disruptive changes may start: open means inside at least one window (or
// no window declared) and outside every exclusion.
type MaintenanceSpec struct {
	// Windows are recurring allow windows; a disruptive change starts only inside one. Empty (with
	// exclusions) means open at any time outside the exclusions. Overlapping windows add up. A
	// layer that sets windows replaces the list of the layers below it whole.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Windows []MaintenanceWindow `json:"windows,omitempty"`

	// Exclusions are named ranges of time (a beam run, a user week) during which nothing disruptive
	// starts, whatever the windows say. They merge by name across layers: a profile's exclusions and
	// a beamline's own add up, and a beamline redefines one of the profile's by naming it.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Exclusions []MaintenanceExclusion `json:"exclusions,omitempty"`

	// Approval says who lets a disruptive change through: Automatic (absent: the calendar alone
	// decides) or Manual, under which each change that the calendar gates (a change of the Tiled or
	// PostgreSQL pod template, the start of a Tiled upgrade) also waits, whether the window is open
	// or not, until a person approves that exact change (status.pendingRollout.changeHash) with
	// `kubectl tiled approve`. The approver and the time are recorded in status.lastApproval and an
	// Approved Event. docs/maintenance.md.
	// +optional
	// +kubebuilder:validation:Enum=Automatic;Manual
	Approval string `json:"approval,omitempty"`
}

// The values of spec.maintenance.approval.
const (
	ApprovalAutomatic = "Automatic"
	ApprovalManual    = "Manual"
)

// MaintenanceWindow is a recurring allow window: it opens at every time its schedule names and
// stays open for its duration.
type MaintenanceWindow struct {
	// Schedule is when the window opens, in cron syntax as a CronJob's: five fields (minute hour
	// day-of-month month day-of-week, e.g. "0 8 * * 2" for Tuesdays at 08:00) or a descriptor
	// (@daily, @weekly). The times are read in timeZone. A time that does not exist on the day
	// clocks go forward is skipped that day, one that happens twice on the day they go back opens
	// the window twice, as a CronJob fires: choose a start outside 01:00-03:00 to be clear of both.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ')",message="must not name a time zone (CRON_TZ or TZ): set timeZone"
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open once it opens, as elapsed time (a Go duration of at
	// least one minute, e.g. 4h or 90m): a window across a daylight saving change lasts its
	// duration of real time. A change that starts inside the window finishes even if it outlasts it.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(h|m|s))+$') && duration(self) >= duration('1m')",message="must be a duration of at least one minute in hours, minutes and seconds, e.g. 4h or 1h30m"
	Duration metav1.Duration `json:"duration"`

	// TimeZone is the IANA time zone the schedule is read in (e.g. America/New_York,
	// Europe/London); empty is UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
}

// MaintenanceExclusion is a named range of time during which the calendar is closed.
// +kubebuilder:validation:XValidation:rule="self.end > self.start",message="end must be after start"
type MaintenanceExclusion struct {
	// Name names the exclusion (e.g. run-2026-3); it is the key exclusions merge by, and status
	// says it while it closes the calendar.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Start is when the exclusion begins (RFC 3339, e.g. 2026-12-10T08:00:00-05:00).
	Start metav1.Time `json:"start"`

	// End is when it ends (RFC 3339); the calendar may open again at End.
	End metav1.Time `json:"end"`
}

// NotificationsSpec is where an instance's notifications go.
type NotificationsSpec struct {
	// Webhook receives each notification as an HTTP POST of a JSON document (docs/maintenance.md
	// "Notifications"). Absent, nothing is sent.
	// +optional
	Webhook *NotificationWebhook `json:"webhook,omitempty"`
}

// NotificationWebhook is a generic webhook receiver.
type NotificationWebhook struct {
	// URL is where notifications are POSTed: an http:// or https:// URL (a Slack or Teams incoming
	// webhook, or any receiver of JSON). Status and Events name it as scheme://host only, since its
	// path or query may carry a token. Required once the layers are merged (a beamline may override
	// minSeverity alone).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#@ ]+([/?#].*)?$')",message="must be an http:// or https:// URL with a host"
	URL string `json:"url,omitempty"`

	// SecretRef names a Secret of the instance's namespace and the key in it that holds the key the
	// body is signed with (HMAC-SHA256, header X-Tiled-Signature: sha256=<hex>). Absent, the body is
	// not signed.
	// +optional
	SecretRef *NotificationSecretRef `json:"secretRef,omitempty"`

	// MinSeverity is the least severity sent: Info (absent: everything), Warning (a change waiting
	// for approval, failures) or Error (failures only).
	// +optional
	// +kubebuilder:validation:Enum=Info;Warning;Error
	MinSeverity string `json:"minSeverity,omitempty"`
}

// NotificationSecretRef names a key of a Secret in the instance's namespace.
type NotificationSecretRef struct {
	// Name is the Secret's name (required once the layers are merged).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// Key is the key of the Secret's data that holds the HMAC key; absent, "key".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// The severities of notifications (spec.notifications.webhook.minSeverity).
const (
	NotificationSeverityInfo    = "Info"
	NotificationSeverityWarning = "Warning"
	NotificationSeverityError   = "Error"
)
