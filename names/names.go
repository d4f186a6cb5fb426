package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Name length limits of the kinds the operator names after an instance.
const (
	// MaxInstanceNameLength bounds TiledInstance names, so that the name is also a valid label value
	// and DNS label.
	MaxInstanceNameLength = 63
	// MaxStatefulSetNameLength bounds StatefulSet names: the pods' controller-revision-hash label
	// value is <name>-<10 characters>, which must fit in 63.
	MaxStatefulSetNameLength = 52
	// MaxServiceNameLength bounds Service names (DNS-1035 labels).
	MaxServiceNameLength = 63
	// MaxLabelValueLength bounds label values.
	MaxLabelValueLength = 63
	// MaxCronJobNameLength bounds CronJob names: the controller appends "-" and the scheduled time in
	// minutes (11 characters) to name its Jobs, which are label values of their pods.
	MaxCronJobNameLength = 52
	// MaxObjectNameLength bounds the names of an instance's other children, which also appear as
	// label values.
	MaxObjectNameLength = 63
)

// hashLength is the number of hexadecimal characters of the hash a shortened name ends with.
const hashLength = 8

// hash is the first hashLength hexadecimal characters of the SHA-256 of full.
func hash(full string) string {
	sum := sha256.Sum256([]byte(full))
	return hex.EncodeToString(sum[:])[:hashLength]
}

// Join joins parts with "-" and, when the result is longer than limit, shortens it to exactly limit
// characters: a prefix of the joined name, "-", and the first 8 hexadecimal characters of the
// SHA-256 of the whole joined name. The hash keeps distinct long names distinct and the result is
// stable: the same parts and limit always give the same name. A prefix ending in "-" or "." is
// trimmed so that the result stays a DNS label. Limits below 10 return the hash alone, cut to limit.
// Frozen: see the package documentation.
func Join(limit int, parts ...string) string {
	full := strings.Join(parts, "-")
	if len(full) <= limit {
		return full
	}
	h := hash(full)
	if limit < hashLength+2 {
		return h[:min(max(limit, 0), hashLength)]
	}
	prefix := strings.TrimRight(full[:limit-hashLength-1], "-.")
	if prefix == "" {
		return h
	}
	return prefix + "-" + h
}

// Instance is the name of the TiledInstance of instance in cluster: <cluster>-<instance>, cut to
// MaxInstanceNameLength by Join. Frozen: see the package documentation.
func Instance(cluster, instance string) string {
	return Join(MaxInstanceNameLength, cluster, instance)
}

// LabelValue shortens s, if needed, to a valid label value length by Join. Frozen.
func LabelValue(s string) string { return Join(MaxLabelValueLength, s) }

// Object joins base and suffix with "-" and, when the result is longer than limit (at least 10),
// keeps a prefix of base (trailing "-" trimmed) and appends "-<suffix>-<hash>", the hash being the
// first 8 hexadecimal characters of the SHA-256 of the full name, so distinct inputs stay distinct
// and the suffix still says which object it is. Frozen: see the package documentation.
func Object(base, suffix string, limit int) string {
	full := base
	if suffix != "" {
		full = base + "-" + suffix
	}
	if len(full) <= limit {
		return full
	}
	h := hash(full)
	tail := "-" + h
	if suffix != "" {
		tail = "-" + suffix + tail
	}
	keep := limit - len(tail)
	if keep < 1 {
		return full[:limit-hashLength-1] + "-" + h
	}
	prefix := base[:min(keep, len(base))]
	for len(prefix) > 0 && prefix[len(prefix)-1] == '-' {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + tail
}

// Objects are the names of the children of one instance. For derives them; every name of a child
// comes from here.
type Objects struct {
	// Base is the name the others derive from: the TiledInstance's own name.
	Base string
	// Tiled names the StatefulSet, Service, Ingress, PodDisruptionBudget, ServiceMonitor and
	// NetworkPolicy of Tiled.
	Tiled string
	// HeadlessService governs the Tiled StatefulSet.
	HeadlessService string
	// ConfigMap holding config.yml.
	ConfigMap string
	// Secret holding the generated API key, signing keys and database password.
	Secret string
	// MetricsSecret holds the token Prometheus presents to the metrics sidecar of the Tiled pods
	// (spec.monitoring.serviceMonitor), apart from Secret so that Prometheus never reads the API key.
	MetricsSecret string
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
	// BackupClaim is the claim the instance's backups are written to (the upgrade's backup before a
	// migration); created at the first upgrade.
	BackupClaim string
	// Cache is the managed streaming cache's StatefulSet and its Service.
	Cache string
	// BackupCronJob takes the scheduled backups; its Jobs (and the on-demand ones `kubectl tiled
	// backup` creates from it) are named after it.
	BackupCronJob string
	// EgressPolicy is the NetworkPolicy that restricts the connections of the instance's pods
	// (spec.networkPolicy.egress.restricted). The other NetworkPolicies are named like the workloads
	// whose pods they select: Tiled, Postgres and Cache.
	EgressPolicy string
}

// Job names the Job of one step of the upgrade procedure (check, backup, migrate, restore); key
// tells runs apart (a Job's pod template cannot change, so a new target is a new Job). The name is
// also a label value of the Job's pods, hence at most MaxLabelValueLength.
func (n Objects) Job(step, key string) string {
	return Object(n.Base, step+"-"+key, MaxLabelValueLength)
}

// For returns the names of the children of the TiledInstance namespace/name: the instance's name
// plus a suffix, each shortened by Object to the limit of its kind (the cluster-scoped
// PersistentVolumes start with the namespace). Frozen: see the package documentation.
func For(namespace, name string) Objects {
	b := name
	return Objects{
		Base:            b,
		Tiled:           Object(b, "", MaxStatefulSetNameLength),
		HeadlessService: Object(b, "headless", MaxObjectNameLength),
		ConfigMap:       Object(b, "config", MaxObjectNameLength),
		Secret:          Object(b, "secret", MaxObjectNameLength),
		MetricsSecret:   Object(b, "metrics", MaxObjectNameLength),
		DataClaim:       Object(b, "data", MaxObjectNameLength),
		DataVolume:      Object(namespace+"-"+b, "data", MaxObjectNameLength),
		Postgres:        Object(b, "postgres", MaxStatefulSetNameLength),
		PostgresInit:    Object(b, "postgres-init", MaxObjectNameLength),
		DatabaseClaim:   Object(b, "postgres-data", MaxObjectNameLength),
		BackupClaim:     Object(b, "backups", MaxObjectNameLength),
		BackupCronJob:   Object(b, "backup", MaxCronJobNameLength),
		Cache:           Object(b, "cache", MaxStatefulSetNameLength),
		EgressPolicy:    Object(b, "egress", MaxObjectNameLength),
	}
}

// ReadOnlyClaimName is the claim of read-only mount m when the operator creates it (NFS).
func (n Objects) ReadOnlyClaimName(m string) string {
	return Object(n.Base, "ro-"+m, MaxObjectNameLength)
}

// ReadOnlyVolumeName is the cluster-scoped PersistentVolume of read-only mount m on NFS.
func (n Objects) ReadOnlyVolumeName(namespace, m string) string {
	return Object(namespace+"-"+n.Base, "ro-"+m, MaxObjectNameLength)
}
