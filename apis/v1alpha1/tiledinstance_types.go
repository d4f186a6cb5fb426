package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TiledInstanceSpec is the complete specification of one Tiled deployment. Instances stamped out by a
// TiledCluster have every field populated; a standalone instance may set only some fields and a
// profileSelector, and is expanded at admission.
type TiledInstanceSpec struct {
	// ProfileSelector selects TiledProfiles for a standalone instance (one not created by a
	// TiledCluster); the instance's own fields win over theirs.
	// +optional
	ProfileSelector *metav1.LabelSelector `json:"profileSelector,omitempty"`

	// InstanceTemplate holds the settings: tiled, storage, database, auth, expose, monitoring, config.
	InstanceTemplate `json:",inline"`
}

// DatabaseStatus is the observed state of an instance's database.
type DatabaseStatus struct {
	// Mode is Managed or External.
	// +optional
	Mode string `json:"mode,omitempty"`

	// Ready is true when the database accepts connections (managed) or its Secret is complete
	// (external).
	// +optional
	Ready bool `json:"ready,omitempty"`
}

// TiledInstanceStatus is the observed state of a TiledInstance.
type TiledInstanceStatus struct {
	// ObservedGeneration is the generation of the instance this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling and Stalled (read by kstatus, ArgoCD and Flux); DatabaseReady
	// for a managed database; ExternalEdits while another writer manages fields of a child object;
	// IngressEnabled=False while the ingress has a host but enabled is not set (no Ingress is created).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// URL at which Tiled is served inside the cluster.
	// +optional
	URL string `json:"url,omitempty"`

	// ReadyReplicas is the number of Tiled pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Image is the Tiled image the instance's pods are rendered with: spec.tiled.image after expansion,
	// also for a standalone instance stored without it (created while the mutating webhook was not
	// answering, and expanded by the controller). The Image column of `kubectl get tiledinstances`
	// shows it.
	// +optional
	Image string `json:"image,omitempty"`

	// Database is the observed state of the database.
	// +optional
	Database *DatabaseStatus `json:"database,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ti,categories=tiled
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels.tiled\.blueskyproject\.io/cluster`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`
// +kubebuilder:printcolumn:name="Storage",type=string,JSONPath=`.spec.storage.data.size`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.status.database.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be at most 63 lower-case letters, digits and '-', starting with a letter: it names the instance's Services and is a label value of its objects"

// TiledInstance is one Tiled deployment (usually one beamline): a Tiled server StatefulSet with its
// configuration, Secret, volumes, Services and PostgreSQL database. Every field is populated, and
// provenance says which layer (built-in default, profile, cluster template, instance override, or an
// expression in one of them) set it.
type TiledInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the complete specification of the deployment.
	// +optional
	Spec TiledInstanceSpec `json:"spec,omitempty"`

	// Provenance maps the path of every expanded leaf field (e.g. spec.storage.data.size) to the layer
	// that set it: default, profile/<name>@<generation>, cluster/template, instance/<name>/overrides,
	// or instance (for a standalone instance's own fields), with " (expression)" appended when a CEL
	// expression of that layer computed the value. `kubectl tiled why` reads it.
	// +optional
	Provenance map[string]string `json:"provenance,omitempty"`

	// Status is the observed state of the deployment.
	// +optional
	Status TiledInstanceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// TiledInstanceList is a list of TiledInstances.
type TiledInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TiledInstance `json:"items"`
}
