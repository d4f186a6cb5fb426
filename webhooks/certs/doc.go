// Package certs is the webhook server's own certificate authority, for installs without
// cert-manager or OLM (config/default; `--cert-management=self`, the default).
//
// # One CA for every replica
//
// The CA lives in one Secret in the manager's namespace (tiled-operator-webhook-ca: ca.crt and
// ca.key, and during a rotation next-ca.crt and next-ca.key, and previous-ca.crt). The first
// replica to start creates it; a replica that loses the race to create it (AlreadyExists) reads the
// winner's, so all replicas agree. Every later write is an update conditioned on the Secret's
// resourceVersion: a replica that acted on a stale copy gets a conflict, reads it again and
// decides again. Restarting a replica keeps the CA; only a deleted or unreadable Secret makes a new
// one (and then the CA the replica was using stays trusted as the previous one).
//
// Each replica signs its own serving certificate with the active CA, keeps its key in memory only,
// and serves it through the webhook server's GetCertificate (no files). Its names are those the
// API server uses to call the webhooks: <service>.<namespace>.svc (and .svc.cluster.local) of the
// Services the webhook configurations name, or the host of Options.URL in local runs.
//
// # The CA bundle
//
// Every replica keeps the caBundle of every webhook of both webhook configurations equal to the
// Secret's CAs (active, next, previous), with server-side apply under one field manager, so that
// replicas agree and re-applying is a no-op. To be safe when replicas race, a replica reads the
// configurations first and the Secret second (fresh from the API server, not a cache), and writes
// a configuration only conditioned on the resourceVersion it read: a replica whose Secret is older
// than a write another replica made must also have read the configuration before that write, so
// its own write conflicts instead of removing a newer CA.
//
// # Never a CA the API server does not trust
//
// A replica serves a certificate only when the CA that signed it is in the caBundle of both
// configurations as it last read them; until then its TLS handshakes fail and its readiness check
// ("webhook-certs") fails, so a new pod gets no traffic before the API server trusts it.
//
// # Rotation
//
// The serving certificate is renewed by each replica when a third of its validity is left (30
// days by default, never past the CA's expiry). The CA (365 days by default) is rotated in two
// steps, so that at every moment each replica serves a certificate the API server trusts:
//
//  1. When a third of the active CA's validity is left (or Rotate is called), a replica adds a new
//     CA to the Secret as next. Every replica puts it into the caBundle beside the active one; no
//     one signs with it yet.
//  2. Once a replica has seen the next CA in both configurations for TrustDelay (one minute; long
//     enough for every API server to have loaded them), it promotes it: next becomes active and the
//     active one previous. Every replica then signs a new serving certificate with it. The previous
//     CA stays in the bundle until it expires, so a replica still serving a certificate it signed
//     is trusted until it moves on.
//
// An active CA found expired (the operator was stopped for longer than a third of its validity) is
// replaced at once; webhook calls failed anyway, its certificates being expired.
//
// # Permissions
//
// The markers below generate the ClusterRole and Role tiled-operator-webhook-certs-role
// (config/rbac/webhookcerts, `make manifests`), bound only by config/default: the cert-manager
// overlay and the OLM bundle do without them.
package certs

// The webhook configurations: read and watched by name, their caBundle applied (patch).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;list;watch;patch,resourceNames=tiled-operator-mutating-webhook-configuration;tiled-operator-validating-webhook-configuration

// The CA Secret in the manager's namespace: read and watched by name, created once, updated on
// rotation. A create cannot be restricted to a name, hence the second rule.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;update,resourceNames=tiled-operator-webhook-ca,namespace=system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create,namespace=system
