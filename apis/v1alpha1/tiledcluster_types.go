package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TiledClusterSpec lists the Tiled instances (one per beamline) of a facility and the profiles
// their settings come from. It is written by people (usually through Git) and never by the operator.
type TiledClusterSpec struct {
	// ProfileSelector selects the TiledProfiles, in the cluster's namespace, that every instance
	// takes its defaults from. `{}` selects all profiles in the namespace; it is required so that a
	// cluster never takes profiles by accident.
	// +required
	ProfileSelector *metav1.LabelSelector `json:"profileSelector"`

	// Template holds cluster-wide settings; they win over every profile and lose to an instance's
	// overrides.
	// +optional
	Template *InstanceTemplate `json:"template,omitempty"`

	// Instances are the Tiled instances of the cluster, one per beamline, keyed by name. Each becomes
	// a TiledInstance named <cluster>-<name>.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Instances []ClusterInstance `json:"instances,omitempty"`

	// Paused stops every write the operator makes for this cluster: its instances and their objects
	// are left as they are until it is unset.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Rollout limits how a change reaches the instances.
	// +optional
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// ClusterInstance is one instance (one beamline) of a TiledCluster.
type ClusterInstance struct {
	// Name of the instance, e.g. the beamline's name; a DNS label, unique within the cluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Labels are added to the TiledInstance and are visible to expressions as instance.labels.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// ProfileSelector selects further profiles for this instance only, beside those the cluster's
	// profileSelector selects (for example the profile of a family of beamlines).
	// +optional
	ProfileSelector *metav1.LabelSelector `json:"profileSelector,omitempty"`

	// Overrides are settings of this instance alone; they win over every other layer.
	// +optional
	Overrides *InstanceTemplate `json:"overrides,omitempty"`

	// Hold keeps this instance as it is while its beamline is in user operation (beamtime): a change
	// to a profile, the cluster's template or this instance's overrides that would change its
	// TiledInstance (and so restart its pods) is not applied to it. The other instances of the
	// cluster change as usual. The cluster's status lists the held instance in status.held with the
	// fields that would change, counts it in status.heldInstances (the HELD column of
	// `kubectl get tc`) and names it in the Ready condition; a held instance is not counted as
	// unavailable and takes nothing from the rollout budget.
	//
	// Hold only protects an instance that exists: a new instance is created even when held. Setting
	// hold back to false (or removing it) applies the held change within the rollout budget
	// (rollout.maxUnavailable), like any other change. Hold never stops the operator from repairing
	// the instance's own objects (a deleted Service comes back); to stop every write, use paused.
	// A standalone TiledInstance has no hold: it is not a member of a cluster.
	// +optional
	Hold bool `json:"hold,omitempty"`
}

// RolloutSpec limits how a change reaches the instances of a cluster.
type RolloutSpec struct {
	// MaxUnavailable is how many instances (a number, or a percentage of the instances) may be
	// updating at once when a profile or the template changes. Defaults to 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="maxUnavailable must be a positive number or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// SelectedProfile records a profile a cluster's instances take settings from, at the generation used.
type SelectedProfile struct {
	// Name of the profile.
	Name string `json:"name"`
	// UID of the profile.
	UID types.UID `json:"uid"`
	// Generation of the profile that was expanded.
	Generation int64 `json:"generation"`
	// Priority of the profile at that generation.
	Priority int32 `json:"priority"`
}

// TiledClusterStatus is the observed state of a TiledCluster.
type TiledClusterStatus struct {
	// ObservedGeneration is the generation of the cluster this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling, Stalled (read by kstatus, ArgoCD and Flux) and ProfilesResolved.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Profiles are the profiles selected, ordered by (priority, name).
	// +optional
	// +listType=atomic
	Profiles []SelectedProfile `json:"profiles,omitempty"`

	// ProfileNames is the names of the selected profiles, comma-separated in order, for display.
	// +optional
	ProfileNames string `json:"profileNames,omitempty"`

	// Instances is the number of instances the cluster lists.
	// Always written, so that the INSTANCES column of `kubectl get tc` shows 0 rather than a blank.
	// +optional
	Instances int32 `json:"instances"`

	// ReadyInstances is the number of instances that are ready.
	// Always written, so that the READY column of `kubectl get tc` shows 0 rather than a blank
	// while no instance is ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances"`

	// UpdatedInstances is the number of instances whose spec matches the current expansion.
	// +optional
	UpdatedInstances int32 `json:"updatedInstances,omitempty"`

	// HeldInstances is the number of instances whose change is held back by spec.instances[].hold:
	// their TiledInstance differs from what the cluster's current expansion would make it.
	// Always written, so that the HELD column of `kubectl get tc` shows 0 rather than <none>.
	// +optional
	HeldInstances int32 `json:"heldInstances"`

	// PendingInstances is the number of instances whose change waits for the rollout budget
	// (rollout.maxUnavailable): they are applied as instances being updated become ready.
	// Always written, like heldInstances.
	// +optional
	PendingInstances int32 `json:"pendingInstances"`

	// Held lists the instances whose change is held back, by name, with the fields that would change;
	// at most 50 entries (heldInstances counts them all).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=50
	Held []HeldInstance `json:"held,omitempty"`

	// InstanceSelector selects the cluster's TiledInstances: `kubectl get ti -l <instanceSelector>`.
	// +optional
	InstanceSelector string `json:"instanceSelector,omitempty"`
}

// HeldInstance is an instance whose change is held back by spec.instances[].hold.
type HeldInstance struct {
	// Name of the TiledInstance.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Fields are the paths of the fields that releasing the hold would change, in the provenance
	// format (e.g. spec.tiled.podAnnotations["team"]), sorted; at most 10 (fieldCount counts them
	// all). "provenance" stands for a change in where values come from that changes no value. A
	// change the operator renders without a change of the spec (the instance's
	// status.pendingRollout, e.g. after an operator upgrade) is listed as the StatefulSet and the
	// path in its pod template (e.g. "StatefulSet tiled-x spec.template.metadata.annotations[k]").
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Fields []string `json:"fields,omitempty"`

	// FieldCount is the number of fields that releasing the hold would change.
	// +optional
	FieldCount int32 `json:"fieldCount,omitempty"`

	// Since is when the operator first held back a change of this instance.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tc,categories=tiled
// +kubebuilder:printcolumn:name="Profiles",type=string,JSONPath=`.status.profileNames`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.instances`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Held",type=integer,JSONPath=`.status.heldInstances`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingInstances`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be lower-case letters, digits and '-', starting with a letter: it begins the names of the instances' Services"

// TiledCluster is a terse list of Tiled instances (one per beamline) that the operator expands,
// through the TiledProfiles it selects, into fully populated TiledInstances.
type TiledCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec lists the instances and selects the profiles.
	// +required
	Spec TiledClusterSpec `json:"spec"`

	// Status is the observed state of the cluster.
	// +optional
	Status TiledClusterStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// TiledClusterList is a list of TiledClusters.
type TiledClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TiledCluster `json:"items"`
}
