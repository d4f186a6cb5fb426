package render

import (
	"sort"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// Component values of the app.kubernetes.io/component label.
const (
	ComponentServer   = "server"
	ComponentDatabase = "database"
	ComponentData     = "data"
)

// AppName is the value of the app.kubernetes.io/name label on every object.
const AppName = "tiled"

// Names are the names of the objects of one instance (package names decides them, and is frozen:
// the names of live objects depend on its output).
type Names = names.Objects

// NamesFor returns the object names of an instance: names.For of its namespace and name. The
// controller takes every name of a child from here.
func NamesFor(ti *v1alpha1.TiledInstance) Names {
	return names.For(ti.Namespace, ti.Name)
}

// Labels are the labels every object of the instance carries.
func Labels(ti *v1alpha1.TiledInstance, component string) map[string]string {
	instance := ti.Labels[v1alpha1.LabelInstance]
	if instance == "" {
		instance = ti.Name
	}
	return map[string]string{
		"app.kubernetes.io/name":      AppName,
		"app.kubernetes.io/instance":  ti.Name,
		"app.kubernetes.io/component": component,
		v1alpha1.LabelManagedBy:       v1alpha1.ManagedByValue,
		v1alpha1.LabelCluster:         ti.Labels[v1alpha1.LabelCluster],
		v1alpha1.LabelInstance:        instance,
	}
}

// SelectorLabels are the immutable pod selector of a workload: a subset of Labels.
func SelectorLabels(ti *v1alpha1.TiledInstance, component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      AppName,
		"app.kubernetes.io/instance":  ti.Name,
		"app.kubernetes.io/component": component,
	}
}

func sortStrings(s []string) []string {
	sort.Strings(s)
	return s
}
