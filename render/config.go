package render

import (
	"crypto/sha256"
	_ "embed" // the entrypoint of the Tiled containers
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/tiledversion"
)

// Fixed facts of the rendered deployment.
const (
	// ConfigKey is the key of the ConfigMap holding Tiled's configuration file.
	ConfigKey = "config.yml"
	// EntrypointKey is the key of the ConfigMap holding the entrypoint of the Tiled containers
	// (entrypoint.py, see Entrypoint). Tiled reads only *.yml and *.yaml files of its config directory.
	EntrypointKey = "entrypoint.py"
	// CatalogExpectedKey is the key of the ConfigMap saying, "true", that the instance had a catalog
	// (status.database.catalogRevision was recorded): the migrate step of entrypoint.py then refuses
	// to initialise an empty database, which would be a lost catalog served empty. Mounted as a file
	// beside config.yml (Tiled reads only *.yml and *.yaml there). Not part of the config hash: it is
	// read at the next start of a pod, and writing it rolls nothing.
	CatalogExpectedKey = "catalog-expected"
	// ReadyScriptKey is the key of the ConfigMap holding ready.py, the readiness check of the Tiled
	// container (ReadyCommand). Not part of the config hash: the kubelet runs the file as the mount
	// holds it at each probe, so a new version of it needs no new pod, and it judges each pod on what
	// that pod's Tiled was started with (entrypoint.py's serving file), not on the ConfigMap.
	ReadyScriptKey = "ready.py"
	// MetricsScriptKey is the key of the ConfigMap holding metrics.py, the program of the metrics
	// sidecar (see MetricsSidecar); present only when the instance asks for a ServiceMonitor.
	MetricsScriptKey = "metrics.py"
	// ConfigDir is where the ConfigMap is mounted; TILED_CONFIG points at it.
	ConfigDir = "/deploy/config"
	// DataPath is where the writable data volume is mounted. Read-only mounts default to
	// /data/<name>, so the writable volume lives apart from them.
	DataPath = "/storage"
	// Port is the port Tiled listens on, named PortName in the Services.
	Port     = 8000
	PortName = "http"
	// PostgresPort is the port of the managed PostgreSQL.
	PostgresPort = 5432
	// DatabaseUser owns the catalog, storage and auth databases of a managed PostgreSQL.
	DatabaseUser = "tiled"
	// Database names in a managed PostgreSQL.
	CatalogDatabase = "catalog"
	StorageDatabase = "storage"
	AuthDatabase    = "auth"
	// ConfigHashAnnotation on the Tiled pod template changes with config.yml, so a new config rolls out.
	ConfigHashAnnotation = "tiled.blueskyproject.io/config-hash"
)

// Environment variables of the Tiled containers. Tiled reads TILED_SINGLE_USER_API_KEY and
// TILED_SECRET_KEYS itself; the external URIs are referenced as ${VAR} in config.yml and the migrate
// command. A managed database's credentials are in libpq's own variables, PGUSER and PGPASSWORD, which
// asyncpg (catalog and auth databases) and libpq (SQL storage through ADBC) read when a URI names no
// user or password: its URIs then hold no secret, and Tiled, which logs its catalog URI at start, logs
// none. The operator's own variables deliberately avoid the TILED_ prefix, which Tiled's settings claim.
const (
	EnvAPIKey           = "TILED_SINGLE_USER_API_KEY"
	EnvSecretKeys       = "TILED_SECRET_KEYS"
	EnvConfig           = "TILED_CONFIG"
	EnvDatabaseUser     = "PGUSER"
	EnvDatabasePassword = "PGPASSWORD"
	EnvCatalogURI       = "CATALOG_DATABASE_URI"
	EnvStorageURI       = "STORAGE_DATABASE_URI"
	EnvAuthURI          = "AUTH_DATABASE_URI"
	// EnvStreamingCachePassword holds the streaming cache's password (the managed cache's, or an
	// external Sentinel deployment's); config.yml references it, so that it is in no ConfigMap.
	EnvStreamingCachePassword = "STREAMING_CACHE_PASSWORD"
	// EnvStreamingCacheURI holds an external cache's URI, password included.
	EnvStreamingCacheURI = "STREAMING_CACHE_URI"
)

// Keys of the external database Secret (ExternalDatabase.URISecretRef). The catalog URI is under the
// reference's key (default ExternalKeyURI); the storage and auth URIs are optional keys of the same
// Secret.
const (
	ExternalKeyURI        = "uri"
	ExternalKeyStorageURI = "storage-uri"
	ExternalKeyAuthURI    = "auth-uri"
)

// Inputs are what rendering needs beyond the TiledInstance.
type Inputs struct {
	// Names of the objects; the zero value means names.For(instance's namespace, instance's name).
	Names *names.Objects
	// DatabaseAddress overrides host:port of the managed PostgreSQL (the conformance suite points it
	// at a local server). Empty means the managed Service's in-cluster DNS name.
	DatabaseAddress string
	// CacheAddress overrides host:port of the managed streaming cache (the conformance suite points it
	// at a local server). Empty means the cache Service's in-cluster DNS name.
	CacheAddress string
	// DataPath overrides where writable data lives (the conformance suite uses a temporary
	// directory). Empty means DataPath.
	DataPath string
	// ExternalSecretKeys are the keys present in the external database Secret, so that the optional
	// storage and auth URIs are used only when present.
	ExternalSecretKeys []string
	// ServiceMonitorAvailable says the monitoring.coreos.com/v1 ServiceMonitor CRD exists.
	ServiceMonitorAvailable bool
	// SecretData is the complete data of the instance's Secret: the existing keys plus those
	// GenerateSecretData returned. It is written only into the Secret, never into other objects.
	SecretData map[string][]byte
	// MetricsSecretData is the complete data of the metrics Secret (MetricsSecret): the existing
	// token, else the one GenerateMetricsSecretData returned; the existing data also when the
	// instance no longer asks for a ServiceMonitor (the Secret is kept). Written only into that
	// Secret.
	MetricsSecretData map[string][]byte
	// Lifecycle is what the upgrade procedure asks of this render: the image that serves while the
	// databases are not yet migrated, Tiled stopped, the Job of the current step, the backup claim.
	// Nil serves spec.tiled.image.
	Lifecycle *Lifecycle
	// ToolsImage runs pg_dump and psql in the backup and restore Jobs of an instance on an external
	// database (a managed one uses its own image); Lifecycle.ToolsImage, when set, wins. The
	// controller gives the built-in PostgreSQL image, whose tools read older servers.
	ToolsImage string
	// CatalogExpected writes CatalogExpectedKey into the ConfigMap: the instance had a catalog, and
	// the migrate step must never initialise a new one in its place.
	CatalogExpected bool
}

func (in Inputs) names(ti *v1alpha1.TiledInstance) names.Objects {
	if in.Names != nil {
		return *in.Names
	}
	return names.For(ti.Namespace, ti.Name)
}

func (in Inputs) dataPath() string {
	if in.DataPath != "" {
		return in.DataPath
	}
	return DataPath
}

func (in Inputs) hasExternalKey(k string) bool {
	for _, x := range in.ExternalSecretKeys {
		if x == k {
			return true
		}
	}
	return false
}

// authMode is how clients authenticate.
type authMode int

const (
	authSingleUser authMode = iota
	authOIDC
)

func modeOf(ti *v1alpha1.TiledInstance) authMode {
	if a := ti.Spec.Auth; a != nil && a.OIDC != nil {
		return authOIDC
	}
	return authSingleUser
}

// databaseURIs are the connection URIs Tiled uses, with ${VAR} references instead of secrets; the same
// text is valid in config.yml (Tiled expands it) and as an argument of the migrate command (the
// entrypoint expands it). A managed database's URIs name neither user nor password (see
// EnvDatabaseUser).
type databaseURIs struct {
	catalog, storage, auth string
}

func uris(ti *v1alpha1.TiledInstance, in Inputs) (databaseURIs, error) {
	db := ti.Spec.Database
	switch {
	case db != nil && db.External != nil:
		if db.External.URISecretRef == nil || db.External.URISecretRef.Name == "" {
			return databaseURIs{}, fmt.Errorf("spec.database.external.uriSecretRef: a Secret holding the catalog URI is required")
		}
		u := databaseURIs{catalog: "${" + EnvCatalogURI + "}"}
		if in.hasExternalKey(ExternalKeyStorageURI) {
			u.storage = "${" + EnvStorageURI + "}"
		}
		if in.hasExternalKey(ExternalKeyAuthURI) {
			u.auth = "${" + EnvAuthURI + "}"
		}
		if modeOf(ti) == authOIDC && u.auth == "" {
			return databaseURIs{}, fmt.Errorf("spec.database.external.uriSecretRef: OIDC keeps sessions in an auth database; Secret %q needs key %q", db.External.URISecretRef.Name, ExternalKeyAuthURI)
		}
		return u, nil
	case db != nil && db.Managed != nil:
		base := managedBaseURI(ti, in)
		u := databaseURIs{catalog: base + CatalogDatabase, storage: base + StorageDatabase}
		if modeOf(ti) == authOIDC {
			u.auth = base + AuthDatabase
		}
		return u, nil
	default:
		return databaseURIs{}, fmt.Errorf("spec.database: one of managed or external is required")
	}
}

// managedBaseURI is the managed PostgreSQL's URI without a database, "postgresql://host:port/":
// in.DatabaseAddress, else its Service's in-cluster DNS name.
func managedBaseURI(ti *v1alpha1.TiledInstance, in Inputs) string {
	addr := in.DatabaseAddress
	if addr == "" {
		addr = fmt.Sprintf("%s.%s.svc:%d", in.names(ti).Postgres, ti.Namespace, PostgresPort)
	}
	return "postgresql://" + addr + "/"
}

// oidcSecretEnv is the variable holding provider p's client secret.
func oidcSecretEnv(p string) string {
	return "OIDC_" + strings.ToUpper(strings.ReplaceAll(p, "-", "_")) + "_CLIENT_SECRET"
}

// Config returns Tiled's configuration as a map: the rendered settings with spec.config merged over
// them (maps merge, other values replace).
func Config(ti *v1alpha1.TiledInstance, in Inputs) (map[string]any, error) {
	u, err := uris(ti, in)
	if err != nil {
		return nil, err
	}
	writable := []any{in.dataPath()}
	if u.storage != "" {
		writable = append(writable, u.storage)
	}
	catalog := map[string]any{
		"uri":                u.catalog,
		"writable_storage":   writable,
		"init_if_not_exists": false, // the init container migrates before the server starts
	}
	var readable []any
	if s := ti.Spec.Storage; s != nil {
		for _, m := range s.ReadOnlyMounts {
			readable = append(readable, mountPath(m))
		}
	}
	if len(readable) > 0 {
		catalog["readable_storage"] = readable
	}

	auth := map[string]any{}
	if a := ti.Spec.Auth; a != nil && a.AllowAnonymousAccess != nil {
		auth["allow_anonymous_access"] = *a.AllowAnonymousAccess
	} else {
		auth["allow_anonymous_access"] = false
	}
	cfg := map[string]any{
		"catalog":        catalog,
		"authentication": auth,
		"metrics":        map[string]any{"prometheus": true},
		"uvicorn":        map[string]any{"host": "0.0.0.0", "port": Port},
		// Tiled 0.2.20 copies these top-level values into the catalog's arguments.
		"catalog_pool_size":    5,
		"catalog_max_overflow": 10,
		"storage_pool_size":    5,
		"storage_max_overflow": 10,
	}
	if sc := streamingCacheConfig(ti, in); sc != nil {
		cfg["streaming_cache"] = sc
	}
	if modeOf(ti) == authOIDC {
		o := ti.Spec.Auth.OIDC
		var providers []any
		for _, p := range o.Providers {
			args := map[string]any{
				"audience":       p.ClientID,
				"client_id":      p.ClientID,
				"client_secret":  "${" + oidcSecretEnv(p.Name) + "}",
				"well_known_uri": p.WellKnownURI,
			}
			providers = append(providers, map[string]any{
				"provider":      p.Name,
				"authenticator": "tiled.authenticators:OIDCAuthenticator",
				"args":          args,
			})
		}
		auth["providers"] = providers
		var admins []any
		for _, a := range o.Admins {
			prov, id, ok := strings.Cut(a, ":")
			if !ok {
				return nil, fmt.Errorf("spec.auth.oidc.admins: %q is not provider:id", a)
			}
			admins = append(admins, map[string]any{"provider": prov, "id": id})
		}
		if len(admins) > 0 {
			auth["tiled_admins"] = admins
		}
		// The signing keys come from TILED_SECRET_KEYS (a JSON list), which Tiled reads itself.
		cfg["database"] = map[string]any{
			"uri":          u.auth,
			"pool_size":    5,
			"max_overflow": 10,
		}
	}

	if ti.Spec.Config != nil && len(ti.Spec.Config.Raw) > 0 {
		var frag map[string]any
		if err := json.Unmarshal(ti.Spec.Config.Raw, &frag); err != nil {
			return nil, fmt.Errorf("spec.config: %w", err)
		}
		mergeInto(cfg, frag)
	}
	return cfg, nil
}

// mergeInto merges src over dst: maps merge recursively, other values replace.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// ConfigYAML returns config.yml. Keys are sorted, so the bytes are deterministic.
func ConfigYAML(ti *v1alpha1.TiledInstance, in Inputs) ([]byte, error) {
	cfg, err := Config(ti, in)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(cfg)
}

// Hash is the short hex SHA-256 the pod template carries for the ConfigMap's content (config.yml and
// the entrypoint, in this order).
func Hash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

//go:embed entrypoint.py
var entrypoint string

// Entrypoint returns entrypoint.py, the program the Tiled containers run (ServeCommand,
// MigrateCommand): it waits for the database and migrates it under a lock, keeps database passwords
// and the API key out of logs and command lines, and checks pooled connections before use. Its
// docstring says why each is needed with Tiled 0.2.20.
func Entrypoint() string { return entrypoint }

//go:embed metrics.py
var metricsScript string

//go:embed ready.py
var readyScript string

// ReadyScript returns ready.py, the readiness check of the Tiled container (ReadyCommand): Tiled
// answers a catalog search on 127.0.0.1 and the streaming cache it was started with answers AUTH and
// PING; otherwise one line naming what fails. Its docstring says how.
func ReadyScript() string { return readyScript }

// MetricsScript returns metrics.py, the program of the metrics sidecar and the wrapper that empties
// the metrics directory when the Tiled container starts (MetricsSidecar).
func MetricsScript() string { return metricsScript }

// ConfigMap returns the ConfigMap holding config.yml, entrypoint.py and ready.py (and metrics.py when
// the instance asks for a ServiceMonitor, catalog-expected once it had a catalog), and the hash of its
// content (ready.py and catalog-expected excepted).
func ConfigMap(ti *v1alpha1.TiledInstance, in Inputs) (*corev1ac.ConfigMapApplyConfiguration, string, error) {
	b, err := ConfigYAML(ti, in)
	if err != nil {
		return nil, "", err
	}
	n := in.names(ti)
	// ready.py outside the hash: see ReadyScriptKey.
	data := map[string]string{ConfigKey: string(b), EntrypointKey: entrypoint, ReadyScriptKey: readyScript}
	hash := Hash(b, []byte(entrypoint))
	if Monitored(ti) {
		// Only then, so that the ConfigMap and the hash of an instance without monitoring stay as
		// they were before the metrics sidecar existed.
		data[MetricsScriptKey] = metricsScript
		hash = Hash(b, []byte(entrypoint), []byte(metricsScript))
	}
	if in.CatalogExpected {
		// Outside the hash: the pods need not restart to read it (the next start does), and an
		// operator upgrade that writes it into existing instances' ConfigMaps replaces no pod.
		data[CatalogExpectedKey] = "true"
	}
	cm := corev1ac.ConfigMap(n.ConfigMap, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithData(data)
	return cm, hash, nil
}

// knownConfigKeys mirrors the pydantic models of tiled.config (Config and the models of its
// fields, which forbid unknown keys) over the range of supported releases, tiledversion.Oldest
// through tiledversion.Newest: it is the union of their keys, and tiledversion's table (Keys) takes
// away what a release lacks. A nil value means any key below is accepted (free-form arguments, media
// types); a non-nil map lists the accepted keys.
var knownConfigKeys = map[string]any{
	"catalog": map[string]any{
		"uri": nil, "metadata": nil, "specs": nil, "writable_storage": nil, "readable_storage": nil,
		"init_if_not_exists": nil, "adapters_by_mimetype": nil,
		"top_level_access_blob": nil, "top_level_access_tags": nil,
		"mount_node": nil, "catalog_pool_size": nil, "storage_pool_size": nil,
		"catalog_max_overflow": nil, "storage_max_overflow": nil,
	},
	"trees": nil, "media_types": nil, "file_extensions": nil,
	"authentication": map[string]any{
		"providers": nil, "tiled_admins": nil, "secret_keys": nil, "allow_anonymous_access": nil,
		"single_user_api_key": nil, "access_token_max_age": nil, "refresh_token_max_age": nil,
		"session_max_age": nil,
	},
	"database": map[string]any{
		"uri": nil, "init_if_not_exists": nil, "pool_pre_ping": nil, "pool_size": nil, "max_overflow": nil,
	},
	"access_control":          nil,
	"response_bytesize_limit": nil, "exact_count_limit": nil, "allow_origins": nil,
	"uvicorn": map[string]any{
		"host": nil, "port": nil, "workers": nil, "root_path": nil, "proxy_headers": nil,
		"forwarded_allow_ips": nil, "ssl_keyfile": nil, "ssl_certfile": nil,
		"ssl_keyfile_password": nil, "ssl_version": nil, "ssl_cert_reqs": nil, "ssl_ca_certs": nil,
		"ssl_ciphers": nil,
	},
	"metrics":                 map[string]any{"prometheus": nil},
	"specs":                   nil,
	"reject_undeclared_specs": nil, "expose_raw_assets": nil, "routers": nil,
	"streaming_cache": map[string]any{
		"uri": nil, "sentinels": nil, "service_name": nil, "password": nil, "ssl": nil,
		"data_ttl": nil, "seq_ttl": nil, "socket_timeout": nil, "socket_connect_timeout": nil,
		"health_check_interval": nil,
	},
	"webhooks": map[string]any{
		"secret_keys": nil, "blocked_networks": nil, "allow_delivery_hosts": nil,
		"allow_http": nil, "allow_private_addresses": nil,
	},
	"create_mount_nodes_if_not_exist": nil,
	"catalog_pool_size":               nil, "storage_pool_size": nil,
	"catalog_max_overflow": nil, "storage_max_overflow": nil,
}

// UnknownConfigKeys returns the dotted paths of keys in cfg that the configuration model of the
// newest supported release (tiledversion.Newest, the default image's) does not define, sorted: it is
// UnknownConfigKeysFor(tiledversion.Newest, cfg).
func UnknownConfigKeys(cfg map[string]any) []string {
	return UnknownConfigKeysFor(tiledversion.Newest, cfg)
}

// UnknownConfigKeysFor returns the dotted paths of keys in cfg that the configuration model of Tiled
// version does not define, sorted: keys no supported release knows, and keys of releases other than
// version (tiledversion.Lacks). An empty version checks against the union of the supported range
// only. Tiled refuses to start on any of them; a webhook can report them early. (uvicorn is a free
// dict in Tiled, but keys outside uvicorn's settings break the server at start.)
func UnknownConfigKeysFor(version string, cfg map[string]any) []string {
	var out []string
	var walk func(prefix string, m map[string]any, known map[string]any)
	walk = func(prefix string, m map[string]any, known map[string]any) {
		for k, v := range m {
			spec, ok := known[k]
			if !ok || (version != "" && tiledversion.Lacks(version, prefix+k)) {
				out = append(out, prefix+k)
				continue
			}
			sub, isMap := spec.(map[string]any)
			vm, vIsMap := v.(map[string]any)
			if isMap && vIsMap {
				walk(prefix+k+".", vm, sub)
			}
		}
	}
	walk("", cfg, knownConfigKeys)
	sort.Strings(out)
	return out
}

func mountPath(m v1alpha1.ReadOnlyMount) string {
	if m.MountPath != "" {
		return m.MountPath
	}
	return "/data/" + m.Name
}
