package webhooks

import (
	"fmt"
	"strings"

	"github.com/bluesky/tiled-operator/webhooks/certs"
)

// CertMode says who provides the webhook server's serving certificate and the webhook
// configurations' caBundle (docs/webhooks.md, "Certificates").
type CertMode string

const (
	// CertSelf: the manager's own CA (package certs), shared by all replicas through one Secret in
	// its namespace; every replica patches the caBundle. config/default.
	CertSelf CertMode = "self"
	// CertCertManager: cert-manager issues the certificate into a Secret mounted at CertDir and
	// injects the caBundle (config/certmanager).
	CertCertManager CertMode = "cert-manager"
	// CertOLM: OLM creates the webhook configurations from the CSV's webhookdefinitions, issues
	// the certificate and mounts it at OLMCertDir.
	CertOLM CertMode = "olm"
)

// OLMCertDir is where OLM mounts the serving certificate of the deployment that serves a CSV's
// webhooks (tls.crt, tls.key); it is also controller-runtime's default CertDir.
const OLMCertDir = "/tmp/k8s-webhook-server/serving-certs"

// CertModes lists the modes, for flag help and errors.
var CertModes = []CertMode{CertSelf, CertCertManager, CertOLM}

// ParseCertMode reads a --cert-management value.
func ParseCertMode(s string) (CertMode, error) {
	for _, m := range CertModes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(CertModes))
	for i, m := range CertModes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown certificate management %q: want one of %s", s, strings.Join(names, ", "))
}

// CertOptions configure the manager's own CA (CertSelf); see certs.Options.
type CertOptions = certs.Options
