package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "tiled.blueskyproject.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Well-known labels and values shared by the operator, the webhooks and kubectl-tiled.
const (
	// LabelCluster names the TiledCluster a TiledInstance (and each of its objects) belongs to.
	LabelCluster = "tiled.blueskyproject.io/cluster"
	// LabelInstance names the instance (the beamline) of a TiledInstance and its objects.
	LabelInstance = "tiled.blueskyproject.io/instance"
	// LabelManagedBy marks every object the operator manages; its caches select on it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on objects the operator manages.
	ManagedByValue = "tiled-operator"
)

// Field managers of the operator's server-side applies.
const (
	// FieldOwner is the one field manager under which the operator applies every object it
	// manages (the controllers' intents, the statuses, the webhook CA bundle); the webhooks let
	// requests under it pass, and kubectl-tiled diff dry-runs under it.
	FieldOwner = "tiled-operator"
	// RetentionFieldOwner labels the claims and Secret a removed instance leaves behind (Retain). It
	// is not FieldOwner: an apply of the label alone under FieldOwner would drop every other field
	// FieldOwner set.
	RetentionFieldOwner = "tiled-operator-retention"
)

// SchemeGroupVersion is GroupVersion under the name client-go's generated code expects.
var SchemeGroupVersion = GroupVersion

// Resource takes an unqualified resource and returns a group-qualified GroupResource.
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

// addKnownTypes registers the kinds of this API and their lists.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&TiledProfile{}, &TiledProfileList{},
		&TiledCluster{}, &TiledClusterList{},
		&TiledInstance{}, &TiledInstanceList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
