package webhooks

// The webhook configurations, generated into config/webhook/manifests.yaml by `make manifests`.
// Failure policies and timeouts are explained in docs/webhooks.md and in the package comment.
//
// Instances whose app.kubernetes.io/managed-by label is tiled-operator (those a TiledCluster
// stamps out) are left out by an objectSelector, so that the operator's own writes never wait
// for its webhooks; the handlers check the controller reference again. Markers take no constants:
// TestInstanceWebhooksLeaveOutManagedInstances checks the generated selector against
// v1alpha1.LabelManagedBy and ManagedByValue.
//
// +kubebuilder:webhookconfiguration:mutating=true,name=mutating-webhook-configuration
// +kubebuilder:webhookconfiguration:mutating=false,name=validating-webhook-configuration
//
// +kubebuilder:webhook:path=/mutate-tiled-blueskyproject-io-v1alpha1-tiledinstance,mutating=true,failurePolicy=ignore,sideEffects=None,groups=tiled.blueskyproject.io,resources=tiledinstances,verbs=create;update,versions=v1alpha1,name=mtiledinstance.tiled.blueskyproject.io,admissionReviewVersions=v1,timeoutSeconds=5,reinvocationPolicy=IfNeeded,patch=`{"objectSelector":{"matchExpressions":[{"key":"app.kubernetes.io/managed-by","operator":"NotIn","values":["tiled-operator"]}]}}`
// +kubebuilder:webhook:path=/validate-tiled-blueskyproject-io-v1alpha1-tiledinstance,mutating=false,failurePolicy=ignore,sideEffects=None,groups=tiled.blueskyproject.io,resources=tiledinstances,verbs=create;update,versions=v1alpha1,name=vtiledinstance.tiled.blueskyproject.io,admissionReviewVersions=v1,timeoutSeconds=5,patch=`{"objectSelector":{"matchExpressions":[{"key":"app.kubernetes.io/managed-by","operator":"NotIn","values":["tiled-operator"]}]}}`
// +kubebuilder:webhook:path=/validate-tiled-blueskyproject-io-v1alpha1-tiledprofile,mutating=false,failurePolicy=fail,sideEffects=None,groups=tiled.blueskyproject.io,resources=tiledprofiles,verbs=create;update,versions=v1alpha1,name=vtiledprofile.tiled.blueskyproject.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-tiled-blueskyproject-io-v1alpha1-tiledprofile-delete,mutating=false,failurePolicy=ignore,sideEffects=None,groups=tiled.blueskyproject.io,resources=tiledprofiles,verbs=delete,versions=v1alpha1,name=vtiledprofiledelete.tiled.blueskyproject.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-tiled-blueskyproject-io-v1alpha1-tiledcluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=tiled.blueskyproject.io,resources=tiledclusters,verbs=create;update,versions=v1alpha1,name=vtiledcluster.tiled.blueskyproject.io,admissionReviewVersions=v1,timeoutSeconds=5

// Paths at which the webhook server serves the handlers; they match the markers above.
const (
	MutateInstancePath        = "/mutate-tiled-blueskyproject-io-v1alpha1-tiledinstance"
	ValidateInstancePath      = "/validate-tiled-blueskyproject-io-v1alpha1-tiledinstance"
	ValidateProfilePath       = "/validate-tiled-blueskyproject-io-v1alpha1-tiledprofile"
	ValidateProfileDeletePath = "/validate-tiled-blueskyproject-io-v1alpha1-tiledprofile-delete"
	ValidateClusterPath       = "/validate-tiled-blueskyproject-io-v1alpha1-tiledcluster"
)

// Names of the webhook configurations in a cluster: config/webhook generates mutating- and
// validating-webhook-configuration, and config/default prefixes them with tiled-operator-; the
// manager installs them under the same names in local runs.
const (
	MutatingConfigurationName   = "tiled-operator-mutating-webhook-configuration"
	ValidatingConfigurationName = "tiled-operator-validating-webhook-configuration"
)

// The permissions of the manager's own CA (reading and patching these configurations) are in
// package certs, generated into their own roles (config/rbac/webhookcerts).
