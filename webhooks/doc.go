// Package webhooks holds the operator's admission webhooks for TiledProfile, TiledCluster and
// TiledInstance, and how they get their certificates.
//
// # Mutating: TiledInstance
//
// InstanceDefaulter expands a standalone TiledInstance (one without a controller reference to a
// TiledCluster) with the same engine as the controllers, expansion.ExpandInstance, over the
// TiledProfiles of its namespace read from the manager's cache, and answers with a JSON patch that
// replaces spec and provenance. So `kubectl apply --dry-run=server -o yaml -f terse.yaml` prints
// the complete spec and where each field comes from, before anything is stored.
//
// Admitting an instance that is already expanded changes nothing (an empty patch): it is expanded
// again from the fields it sets itself, which its provenance tells ("instance"), plus fields
// without provenance (added since) and, on an update, fields whose value changed. Every other field
// is taken from the defaults and profiles again, so it follows them; the engine's idempotence
// (expanding an expansion gives the same spec) makes the result equal to the object when nothing
// changed. Instances of a TiledCluster (controller reference), and requests of the operator itself
// (its field manager tiled-operator, or its service account), pass through unchanged; the webhook
// configuration leaves instances labelled app.kubernetes.io/managed-by=tiled-operator out
// altogether. TiledCluster is never mutated: it is owned by Git, and a mutation would make GitOps
// tools report drift.
//
// # Validating
//
// ProfileValidator, ClusterValidator and InstanceValidator check what the CRDs' CEL rules cannot:
// fields the schema does not declare (expansion.UnknownFieldError, e.g. a misspelt override),
// selectors that do not parse, CEL expressions compiled and type-checked against the field they
// compute, values the API server would refuse on the child objects or that cannot run
// (expansion.CheckProfile, CheckCluster, CheckInstance, and the expansion's own checks of every
// expanded instance), NFS exports and ids the profiles do not allow (expansion.NotAllowedError) and
// names that would collide with another instance's (expansion.NameCollision). A profile edit that
// would put a cluster using it into a conflict it is not already in is refused, naming the cluster,
// the other profile and the field (v1alpha1.AnnotationAllowConflicts turns the refusal into a
// warning); deleting a profile warns, naming the clusters and instances that select it. Suspicious
// settings (an image tagged latest or untagged, a layer's several replicas on a ReadWriteOnce
// volume, no resource limits, Ingress without TLS, retention Delete, anonymous access) earn
// admission warnings, which never change what is stored. Every refusal is a 422 naming the object,
// the field and why; a malformed request is a 400.
//
// # Failure policy
//
// The mutating webhook and the TiledInstance validating webhook fail open (Ignore, 5s): while the
// operator is down, standalone instances are stored as written, and the instance controller
// expands them itself when it is back. The TiledProfile and TiledCluster validating webhooks fail
// closed (Fail, 5s) on create and update: their checks protect every beamline of a cluster, and
// nothing would act on the change before the operator is back anyway; GitOps tools retry. The
// TiledProfile delete webhook only warns, so it fails open: deleting a namespace or uninstalling
// never waits for the operator. docs/webhooks.md has the whole table.
//
// # Certificates
//
// Options.CertMode says who provides the serving certificate (docs/webhooks.md). CertSelf, the
// default of cmd/manager and config/default: the manager's own CA (package certs), shared by all
// replicas through one Secret in its namespace; each replica serves a certificate it signs with it,
// from memory, once both webhook configurations trust the CA, and every replica keeps their
// caBundle with server-side apply; the CA rotates in two steps so the API server never meets a
// certificate it does not trust. CertCertManager (config/certmanager) and CertOLM (the OLM bundle):
// the certificate is a mounted file the webhook server reloads, and cert-manager or OLM fills the
// caBundle.
//
// Setup registers everything with a controller-runtime manager whose webhook server NewServer
// built from the same Options.
package webhooks
