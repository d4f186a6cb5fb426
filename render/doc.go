// Package render turns one fully expanded TiledInstance into the Kubernetes objects that run it, as
// client-go typed apply configurations ready for server-side apply.
//
// # Contract
//
// render is pure: it holds no client, reads no clock, draws no randomness except from the io.Reader a
// caller passes to GenerateSecretData (and GenerateMetricsSecretData), and iterates no map into its output, so the same inputs give
// byte-identical objects. It trusts that the TiledInstance has every field populated by the expansion
// engine (package expansion); where a field is still empty it falls back to the small defaults
// documented on each function rather than failing, except for choices it cannot make (no database at
// all, OIDC on an external database without an auth URI), which are errors.
//
// What the render package cannot know comes in through Inputs: the address of the managed database
// when a test points it elsewhere, whether the ServiceMonitor CRD exists, which keys the external
// database Secret holds. Object names come from package names (names.For of the instance's
// namespace and name, in Objects.Names): that package decides every name the operator gives, and its
// output is frozen (live objects are found by these names); callers take names from it, never build
// them.
//
// # Objects
//
// For each instance, Render returns:
//
//   - the ConfigMap holding config.yml for `tiled serve config` and entrypoint.py, the program the Tiled
//     containers run (see Entrypoint), and metrics.py when a ServiceMonitor is asked for (see
//     MetricsSidecar): the catalog on PostgreSQL, writable
//     storage (the data volume and, for appendable tables, the PostgreSQL storage database), readable
//     storage (the read-only detector mounts), authentication, the auth database for OIDC, metrics,
//     uvicorn host and port and the pool sizes at the top level, with the spec's free-form config
//     fragment merged over it. Passwords never appear in it: a managed database's URIs name no
//     credentials (PGUSER and PGPASSWORD carry them), and Tiled expands ${VAR} references to an
//     external database's URIs from the environment (tiled.utils.parse, os.path.expandvars), whose
//     variables come from Secrets;
//   - the Secret with TILED_SINGLE_USER_API_KEY, TILED_SECRET_KEYS and DATABASE_PASSWORD (see
//     GenerateSecretData: values are generated once, only for missing keys);
//   - when a ServiceMonitor is asked for (Monitored), the metrics Secret with the token Prometheus
//     presents to the metrics sidecar (GenerateMetricsSecretData, generated once likewise);
//   - the Tiled StatefulSet (restricted Pod Security Standard, an init container running the database
//     migrations of MigrateCommand, probes on /healthz, a hash of the ConfigMap's content on the pod
//     template, FallbackToLogsOnError termination messages), with the metrics sidecar when a
//     ServiceMonitor is asked for;
//   - a ClusterIP Service (port 8000, named http; and 9090, named metrics, with the sidecar) and a
//     headless Service for the StatefulSet;
//   - an Ingress when enabled, a PodDisruptionBudget when replicas > 1;
//   - a PersistentVolume and claim for every NFS volume (inline nfs volumes are forbidden by the
//     restricted Pod Security Standard);
//   - for a managed database, a PostgreSQL StatefulSet, its Service and an init ConfigMap creating the
//     catalog, storage and auth databases;
//   - a prometheus-operator ServiceMonitor (unstructured) when asked for and its CRD exists, scraping
//     the metrics sidecar with the metrics Secret's bearer token (never a Tiled key).
//
// Every object carries app.kubernetes.io/{name,instance,component,managed-by} and the
// tiled.blueskyproject.io/{cluster,instance} labels (Labels; the keys are constants of package
// v1alpha1).
//
// # Tiled facts this package relies on (Tiled 0.2.14 to 0.2.20)
//
// The configuration is validated by the pydantic model tiled.config.Config, which forbids unknown keys
// (the YAML schema in tiled/config_schemas is documentation only and lacks `catalog`). The model
// changes within the supported range (tiledversion.Oldest to tiledversion.Newest): knownConfigKeys is
// the union of its keys over the range, and package tiledversion's table (Keys, Lacks), the one place
// saying what differs across the range, takes away the keys a release lacks; UnknownConfigKeysFor
// reports the keys a given release would refuse, UnknownConfigKeys those the newest would. What
// Config renders itself is the same for every release and made of keys every release of the range has
// (a test renders each fixture for each release); only spec.config can name a key some release lacks,
// and admission refuses it for the release the instance's image runs (expansion's config check). The
// single-user API key and the token signing keys are read from the environment variables
// TILED_SINGLE_USER_API_KEY and TILED_SECRET_KEYS (a JSON list) by tiled.server.settings. Clients
// authenticate with the header `Authorization: Apikey <key>`. The command line the operator uses is
// the same across the range: `tiled catalog init --if-not-exists` is idempotent, `tiled admin
// initialize-database` is not, and both upgrade-database commands fail on an empty database.
package render
