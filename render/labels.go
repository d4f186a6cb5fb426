package render

import (
	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Component values of the v1alpha1.LabelAppComponent label.
const (
	ComponentServer   = "server"
	ComponentDatabase = "database"
	ComponentData     = "data"
	ComponentBackups  = "backups"
	// ComponentCache labels the managed streaming cache.
	ComponentCache = "cache"
	// ComponentJob labels the Jobs (and their pods) of the upgrade procedure's steps.
	ComponentJob = "lifecycle"
)

// AppName is the value of the v1alpha1.LabelAppName label on every object.
const AppName = "tiled"

// Labels are the labels every object of the instance carries.
func Labels(ti *v1alpha1.TiledInstance, component string) map[string]string {
	instance := ti.Labels[v1alpha1.LabelInstance]
	if instance == "" {
		instance = ti.Name
	}
	return map[string]string{
		v1alpha1.LabelAppName:      AppName,
		v1alpha1.LabelAppInstance:  ti.Name,
		v1alpha1.LabelAppComponent: component,
		v1alpha1.LabelManagedBy:    v1alpha1.ManagedByValue,
		v1alpha1.LabelCluster:      ti.Labels[v1alpha1.LabelCluster],
		v1alpha1.LabelInstance:     instance,
	}
}

// SelectorLabels are the immutable pod selector of a workload: a subset of Labels.
func SelectorLabels(ti *v1alpha1.TiledInstance, component string) map[string]string {
	return map[string]string{
		v1alpha1.LabelAppName:      AppName,
		v1alpha1.LabelAppInstance:  ti.Name,
		v1alpha1.LabelAppComponent: component,
	}
}
