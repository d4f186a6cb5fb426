package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TiledProfileSpec holds defaults for the Tiled instances of the clusters that select the profile.
type TiledProfileSpec struct {
	// Priority orders the profiles a cluster selects: a profile of higher priority wins where two set
	// the same field; equal priorities are applied by name, and two profiles of equal priority setting
	// one field to different values is a conflict the cluster reports.
	// +optional
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Priority int32 `json:"priority,omitempty"`

	// InstanceTemplate holds the defaults themselves: any of tiled, storage, database, auth, expose,
	// monitoring and config.
	InstanceTemplate `json:",inline"`
}

// TiledProfileStatus is the observed state of a TiledProfile.
type TiledProfileStatus struct {
	// ObservedGeneration is the generation of the profile last examined by the operator.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions of the profile, e.g. Valid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp;tprof,categories=tiled
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TiledProfile holds defaults for Tiled deployments, defined once and selected by label from
// TiledClusters (and standalone TiledInstances) in the same namespace. Values that differ per
// beamline are CEL expressions over the instance, e.g. an NFS path computed from the instance name.
type TiledProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the defaults and the priority of the profile.
	// +optional
	Spec TiledProfileSpec `json:"spec,omitempty"`

	// Status is the observed state of the profile.
	// +optional
	Status TiledProfileStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// TiledProfileList is a list of TiledProfiles.
type TiledProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TiledProfile `json:"items"`
}
