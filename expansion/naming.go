package expansion

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
)

// hashLength is the number of hexadecimal characters of the hash a truncated name ends with.
const hashLength = 8

// Name joins parts with "-" and, when the result is longer than limit, shortens it to exactly limit
// characters: a prefix of the joined name, "-", and the first 8 hexadecimal characters of the
// SHA-256 of the whole joined name. The hash keeps distinct long names distinct and the result is
// stable: the same parts and limit always give the same name. A prefix ending in "-" or "." is
// trimmed so that the result stays a DNS label. Limits below 10 return the hash alone, cut to limit.
func Name(limit int, parts ...string) string {
	full := strings.Join(parts, "-")
	if len(full) <= limit {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	h := hex.EncodeToString(sum[:])[:hashLength]
	if limit < hashLength+2 {
		return h[:max(limit, 0)]
	}
	prefix := strings.TrimRight(full[:limit-hashLength-1], "-.")
	if prefix == "" {
		return h
	}
	return prefix + "-" + h
}

// InstanceName is the name of the TiledInstance of instance in cluster: <cluster>-<instance>, cut
// to MaxInstanceNameLength by Name.
func InstanceName(cluster, instance string) string {
	return Name(MaxInstanceNameLength, cluster, instance)
}

// LabelValue shortens s, if needed, to a valid label value length by Name.
func LabelValue(s string) string { return Name(MaxLabelValueLength, s) }
