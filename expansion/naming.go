package expansion

import "github.com/bluesky/tiled-operator/names"

// Name length limits of the kinds the operator names after an instance (package names).
const (
	MaxInstanceNameLength    = names.MaxInstanceNameLength
	MaxStatefulSetNameLength = names.MaxStatefulSetNameLength
	MaxServiceNameLength     = names.MaxServiceNameLength
	MaxLabelValueLength      = names.MaxLabelValueLength
)

// Name is names.Join: parts joined with "-", shortened with a hash to limit. Frozen (package names).
func Name(limit int, parts ...string) string { return names.Join(limit, parts...) }

// InstanceName is the name of the TiledInstance of instance in cluster: names.Instance,
// <cluster>-<instance> shortened to MaxInstanceNameLength. Frozen (package names).
func InstanceName(cluster, instance string) string { return names.Instance(cluster, instance) }

// LabelValue shortens s, if needed, to a valid label value length: names.LabelValue.
func LabelValue(s string) string { return names.LabelValue(s) }
