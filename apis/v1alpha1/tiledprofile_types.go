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
	// ObservedGeneration is the generation of the profile that the operator last checked: when it
	// equals metadata.generation, the Valid condition is about the spec as it is now.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions of the profile. Valid is True when every CEL expression of the profile compiles
	// and type-checks against the field it computes and every value it sets is one the schema and
	// the API server accept (reason Valid); False names the first field in error and why (reason
	// ExpressionInvalid for an expression, SchemaInvalid for an unknown field or a refused value).
	// The admission webhook refuses such profiles; Valid=False shows one stored while the webhook
	// was not running, or from before an upgrade of the operator. The clusters and standalone
	// instances that select an invalid profile stall until it is fixed. A Warning Event is sent when
	// the profile becomes invalid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// SelectedByClusters is the number of TiledClusters in the profile's namespace that select this
	// profile, through their spec.profileSelector or the profileSelector of any of their
	// spec.instances[]; a cluster counts once however many of its selectors match. A cluster whose
	// selector is missing or does not parse selects nothing. 0 means that no cluster uses the
	// profile: a change to it changes no cluster's instances.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SelectedByClusters int32 `json:"selectedByClusters"`

	// SelectedByInstances is the number of standalone TiledInstances (those with their own
	// spec.profileSelector) in the profile's namespace whose selector selects this profile. The
	// instances that TiledClusters stamp out are not counted here: they take their profiles
	// through their cluster, counted in selectedByClusters.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SelectedByInstances int32 `json:"selectedByInstances"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp;tprof,categories=tiled
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=`.status.selectedByClusters`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.selectedByInstances`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].reason`,priority=1
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
