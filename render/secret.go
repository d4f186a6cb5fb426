package render

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Keys of the instance's Secret. The API key and signing keys are also the names of the environment
// variables they feed; the database password feeds PGPASSWORD (and the managed PostgreSQL's
// POSTGRES_PASSWORD) under a key that existing Secrets already hold.
const (
	SecretKeyAPIKey           = EnvAPIKey
	SecretKeySecretKeys       = EnvSecretKeys
	SecretKeyDatabasePassword = "DATABASE_PASSWORD"
	// SecretKeyStreamingCachePassword is the managed streaming cache's password; it feeds the
	// variable of the same name in the cache and Tiled containers.
	SecretKeyStreamingCachePassword = EnvStreamingCachePassword
)

const alphanumeric = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// Lengths of generated values: 48 alphanumeric characters carry about 285 bits.
const (
	apiKeyLength   = 48
	passwordLength = 32
	signingKeyLen  = 64
)

// SecretKeys returns the keys the instance's Secret must hold, sorted: the single-user API key
// (unless taken from another Secret), the token signing keys, the managed database's password and
// the managed streaming cache's password.
func SecretKeys(ti *v1alpha1.TiledInstance) []string {
	var keys []string
	if modeOf(ti) == authSingleUser && !apiKeyFromRef(ti) {
		keys = append(keys, SecretKeyAPIKey)
	}
	if db := ti.Spec.Database; db != nil && db.Managed != nil {
		keys = append(keys, SecretKeyDatabasePassword)
	}
	if managedCache(ti) != nil {
		keys = append(keys, SecretKeyStreamingCachePassword)
	}
	keys = append(keys, SecretKeySecretKeys)
	slices.Sort(keys)
	return keys
}

func apiKeyFromRef(ti *v1alpha1.TiledInstance) bool {
	a := ti.Spec.Auth
	return a != nil && a.SingleUserAPIKey != nil && a.SingleUserAPIKey.SecretRef != nil && a.SingleUserAPIKey.SecretRef.Name != ""
}

// GenerateSecretData returns new values for the keys of SecretKeys(ti) that existing lacks (or holds
// empty), and nothing for keys already present: existing values are never regenerated. random is
// crypto/rand.Reader in production and a seeded reader in tests. The caller merges the result into
// existing and applies the whole map with Secret; it must never log the values.
func GenerateSecretData(ti *v1alpha1.TiledInstance, existing map[string][]byte, random io.Reader) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, k := range SecretKeys(ti) {
		if len(existing[k]) > 0 {
			continue
		}
		var v string
		var err error
		switch k {
		case SecretKeyAPIKey:
			v, err = randomString(random, apiKeyLength)
		case SecretKeyDatabasePassword, SecretKeyStreamingCachePassword:
			v, err = randomString(random, passwordLength)
		case SecretKeySecretKeys:
			var s string
			s, err = randomString(random, signingKeyLen)
			if err == nil {
				var b []byte
				b, err = json.Marshal([]string{s})
				v = string(b)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("generating %s: %w", k, err)
		}
		out[k] = []byte(v)
	}
	return out, nil
}

// randomString draws n characters uniformly from [A-Za-z0-9] (rejection sampling, no modulo bias).
func randomString(r io.Reader, n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n)
	for len(out) < n {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b >= 248 { // 248 = 4 × 62: keep the distribution uniform
				continue
			}
			out = append(out, alphanumeric[int(b)%len(alphanumeric)])
			if len(out) == n {
				break
			}
		}
	}
	return string(out), nil
}

// Secret returns the instance's Secret with data, which must be the complete data (existing keys
// plus generated ones): server-side apply removes keys the operator owned and no longer sends.
func Secret(ti *v1alpha1.TiledInstance, in Inputs) *corev1ac.SecretApplyConfiguration {
	return opaqueSecret(ti, in.names(ti).Secret, in.SecretData)
}

// opaqueSecret is an Opaque Secret of the instance with data (WithData copies it), the complete data:
// server-side apply removes the keys the operator owned and no longer sends.
func opaqueSecret(ti *v1alpha1.TiledInstance, name string, data map[string][]byte) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(name, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithType("Opaque").
		WithData(data)
}

// SecretKeyMetricsToken is the key of the metrics Secret (names.Objects.MetricsSecret) holding the
// bearer token Prometheus presents to the metrics sidecar (see MetricsSidecar).
const SecretKeyMetricsToken = "token"

// GenerateMetricsSecretData returns a new token for the metrics Secret when the instance asks for a
// ServiceMonitor (Monitored) and existing lacks one, and nothing otherwise: like GenerateSecretData,
// an existing token is never regenerated. The caller merges the result into existing and passes the
// whole map as Inputs.MetricsSecretData.
func GenerateMetricsSecretData(ti *v1alpha1.TiledInstance, existing map[string][]byte, random io.Reader) (map[string][]byte, error) {
	out := map[string][]byte{}
	if !Monitored(ti) || len(existing[SecretKeyMetricsToken]) > 0 {
		return out, nil
	}
	v, err := randomString(random, apiKeyLength)
	if err != nil {
		return nil, fmt.Errorf("generating the metrics token: %w", err)
	}
	out[SecretKeyMetricsToken] = []byte(v)
	return out, nil
}

// MetricsSecret returns the Secret holding the metrics sidecar's bearer token (in.MetricsSecretData,
// the complete data, as for Secret): when the instance asks for a ServiceMonitor, and also after it
// stopped asking while the Secret exists (in.MetricsSecretData not empty). It is kept on purpose,
// not pruned as the other optional children are: pruning would need delete on every Secret (RBAC
// cannot narrow it to the operator's), and the pods the rollout is replacing still read the token
// (docs/observability.md, Tiled's own metrics); the garbage collector removes it with the instance,
// and a ServiceMonitor asked for again gets the same token. Nil otherwise. It holds
// nothing else, so that Prometheus, which reads it, never reads the instance's API key.
func MetricsSecret(ti *v1alpha1.TiledInstance, in Inputs) *corev1ac.SecretApplyConfiguration {
	if !Monitored(ti) && len(in.MetricsSecretData) == 0 {
		return nil
	}
	return opaqueSecret(ti, in.names(ti).MetricsSecret, in.MetricsSecretData)
}
