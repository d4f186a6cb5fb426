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

	// AllowedNFS lists the NFS exports that the clusters and standalone instances selecting this
	// profile may name themselves (in a cluster's template or an instance's overrides, or in a
	// standalone instance's own spec), in storage.data.nfs or storage.readOnlyMounts[].nfs,
	// literally or through a pathExpression. NFS values the profiles set themselves need no entry.
	// Everything else is refused at admission and stalls the object: only the authors of
	// TiledProfiles (administrators) decide which servers and directories a beamline reaches.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	AllowedNFS []AllowedNFSExport `json:"allowedNFS,omitempty"`

	// AllowedUserIDs are the ranges of uids that the clusters and standalone instances selecting this
	// profile may set themselves as tiled.runAsUser. Values the profiles set need no entry.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(r, r.min >= 1)",message="uid 0 (root) cannot be allowed: the pods pass the restricted Pod Security Standard"
	AllowedUserIDs []IDRange `json:"allowedUserIDs,omitempty"`

	// AllowedGroupIDs are the ranges of gids that the clusters and standalone instances selecting
	// this profile may set themselves as tiled.runAsGroup, tiled.fsGroup and
	// tiled.supplementalGroups. Values the profiles set need no entry.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	AllowedGroupIDs []IDRange `json:"allowedGroupIDs,omitempty"`
}

// AllowedNFSExport is a directory tree of an NFS server that instances may name.
type AllowedNFSExport struct {
	// Server is the NFS server's host name or IP address, as the instances write it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Server string `json:"server"`

	// PathPrefix is the directory the instances' paths must equal or lie beneath, e.g.
	// /nsls2/data allows /nsls2/data/chx/proposals but not /nsls2/database.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="pathPrefix must be absolute"
	PathPrefix string `json:"pathPrefix"`

	// ReadOnly allows the export for read-only mounts only (storage.readOnlyMounts), not as the
	// writable data volume.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// IDRange is an inclusive range of uids or gids.
// +kubebuilder:validation:XValidation:rule="self.min <= self.max",message="min must not exceed max"
type IDRange struct {
	// Min is the lowest id of the range.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Min int64 `json:"min"`

	// Max is the highest id of the range.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Max int64 `json:"max"`
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
