package render

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Component values of the app.kubernetes.io/component label.
const (
	ComponentServer   = "server"
	ComponentDatabase = "database"
	ComponentData     = "data"
)

// AppName is the value of the app.kubernetes.io/name label on every object.
const AppName = "tiled"

const (
	// maxNameLength is the longest name of a namespaced object that may also appear as a label value.
	maxNameLength = 63
	// maxStatefulSetNameLength leaves room for the controller-revision-hash label (name + "-" + 10).
	maxStatefulSetNameLength = 52
)

// Names are the names of the objects of one instance. NamesFor derives them from the instance; the
// controller should take every name from here so that one function decides them all.
type Names struct {
	// Base is the name the others derive from: the TiledInstance's own name.
	Base string
	// StatefulSet, Service, Ingress, PodDisruptionBudget and ServiceMonitor of Tiled.
	Tiled string
	// HeadlessService governs the Tiled StatefulSet.
	HeadlessService string
	// ConfigMap holding config.yml.
	ConfigMap string
	// Secret holding the generated API key, signing keys and database password.
	Secret string
	// DataClaim is the claim of the data volume: the operator's own claim, on a storage class or
	// bound to its NFS PersistentVolume.
	DataClaim string
	// DataVolume is the cluster-scoped PersistentVolume for NFS data; it includes the namespace.
	DataVolume string
	// Postgres is the managed PostgreSQL StatefulSet and its Service.
	Postgres string
	// DatabaseClaim is the claim of the managed PostgreSQL's volume.
	DatabaseClaim string
	// PostgresInit is the ConfigMap with the script creating the catalog, storage and auth databases.
	PostgresInit string
}

// NamesFor returns the object names of an instance. It is deliberately small so that it can be
// swapped for the expansion package's naming helper: every name is the instance name plus a suffix,
// shortened with a hash when the kind limits its length.
func NamesFor(ti *v1alpha1.TiledInstance) Names {
	b := ti.Name
	return Names{
		Base:            b,
		Tiled:           objectName(b, "", maxStatefulSetNameLength),
		HeadlessService: objectName(b, "headless", maxNameLength),
		ConfigMap:       objectName(b, "config", maxNameLength),
		Secret:          objectName(b, "secret", maxNameLength),
		DataClaim:       objectName(b, "data", maxNameLength),
		DataVolume:      objectName(ti.Namespace+"-"+b, "data", maxNameLength),
		Postgres:        objectName(b, "postgres", maxStatefulSetNameLength),
		PostgresInit:    objectName(b, "postgres-init", maxNameLength),
		DatabaseClaim:   objectName(b, "postgres-data", maxNameLength),
	}
}

// ReadOnlyClaimName is the claim of read-only mount m when the operator creates it (NFS).
func (n Names) ReadOnlyClaimName(m string) string { return objectName(n.Base, "ro-"+m, maxNameLength) }

// ReadOnlyVolumeName is the cluster-scoped PersistentVolume of read-only mount m on NFS.
func (n Names) ReadOnlyVolumeName(namespace, m string) string {
	return objectName(namespace+"-"+n.Base, "ro-"+m, maxNameLength)
}

// objectName joins base and suffix with "-" and, when the result is longer than max, keeps a prefix
// of base and appends an 8-character hash of the full name, so distinct inputs stay distinct.
func objectName(base, suffix string, max int) string {
	full := base
	if suffix != "" {
		full = base + "-" + suffix
	}
	if len(full) <= max {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	h := hex.EncodeToString(sum[:])[:8]
	tail := "-" + h
	if suffix != "" {
		tail = "-" + suffix + tail
	}
	keep := max - len(tail)
	if keep < 1 {
		return full[:max-9] + "-" + h
	}
	prefix := base[:min(keep, len(base))]
	for len(prefix) > 0 && prefix[len(prefix)-1] == '-' {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + tail
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
