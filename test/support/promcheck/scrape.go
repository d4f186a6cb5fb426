package promcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ServiceMonitor is the part of a prometheus-operator ServiceMonitor (monitoring.coreos.com/v1)
// the translation reads. Fields it does not know make Translate fail, so that a ServiceMonitor the
// operator starts to render differently is not silently scraped another way.
type ServiceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		JobLabel          string     `json:"jobLabel,omitempty"`
		Endpoints         []Endpoint `json:"endpoints"`
		Selector          Selector   `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
	} `json:"spec"`
}

// Selector is a label selector with matchLabels only (the translation refuses matchExpressions).
type Selector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// SecretKey names a key of a Secret in the ServiceMonitor's namespace.
type SecretKey struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Endpoint is one endpoint of a ServiceMonitor.
type Endpoint struct {
	Port            string `json:"port,omitempty"`
	Path            string `json:"path,omitempty"`
	Scheme          string `json:"scheme,omitempty"`
	Interval        string `json:"interval,omitempty"`
	ScrapeTimeout   string `json:"scrapeTimeout,omitempty"`
	HonorLabels     bool   `json:"honorLabels,omitempty"`
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	Authorization   *struct {
		Type        string     `json:"type,omitempty"`
		Credentials *SecretKey `json:"credentials,omitempty"`
	} `json:"authorization,omitempty"`
	TLSConfig *struct {
		InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
		ServerName         string `json:"serverName,omitempty"`
	} `json:"tlsConfig,omitempty"`
}

// MountedSecret is a Secret key a scrape config reads from a file: the Prometheus pod must mount
// the value of key Key of Secret Namespace/Name at File (FileKey is the file's name within
// SecretDir, a valid Secret key: one Secret can hold them all).
type MountedSecret struct {
	Namespace, Name, Key string
	FileKey              string
	File                 string
}

// Options shape the translation.
type Options struct {
	// Role is the kubernetes_sd_configs role: "endpointslice" (the default; what
	// prometheus-operator uses with serviceDiscoveryRole EndpointSlice) or "endpoints".
	Role string
	// SecretDir is where the Prometheus pod mounts the Secret holding every MountedSecret (one file
	// per FileKey). Default /etc/prometheus/secrets.
	SecretDir string
	// Interval, when set, replaces every endpoint's interval (an e2e scrapes every 5s).
	Interval string
}

// ScrapeConfigs holds the scrape_configs of a prometheus.yml and the Secret keys they read.
type ScrapeConfigs struct {
	Configs []map[string]any
	Secrets []MountedSecret
}

// ParseServiceMonitor reads a ServiceMonitor, refusing fields the translation does not know.
func ParseServiceMonitor(u *unstructured.Unstructured) (ServiceMonitor, error) {
	var sm ServiceMonitor
	if u.GetKind() != "ServiceMonitor" || u.GetAPIVersion() != "monitoring.coreos.com/v1" {
		return sm, fmt.Errorf("%s %s is not a monitoring.coreos.com/v1 ServiceMonitor", u.GetKind(), u.GetName())
	}
	obj := u.DeepCopy().Object
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(obj, "status")
	raw, err := json.Marshal(obj)
	if err != nil {
		return sm, err
	}
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sm); err != nil {
		return sm, fmt.Errorf("ServiceMonitor %s/%s: %w (the translation knows port, path, scheme, interval, scrapeTimeout, honorLabels, bearerTokenFile, authorization, tlsConfig.insecureSkipVerify/serverName, selector.matchLabels, namespaceSelector, jobLabel)", u.GetNamespace(), u.GetName(), err)
	}
	return sm, nil
}

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// sanitize is how Prometheus's Kubernetes discovery turns a Kubernetes label name into a part of a
// meta label name (strutil.SanitizeLabelName).
func sanitize(s string) string { return invalidLabelChars.ReplaceAllString(s, "_") }

// Translate returns the scrape configs of the ServiceMonitors, in order, one per endpoint, named
// as prometheus-operator names them (serviceMonitor/<namespace>/<name>/<index>) and with the
// relabelings it generates:
//
//   - keep the Services matching selector.matchLabels and the endpoint port with the port's name;
//   - target labels namespace, service, pod, container (and node for node endpoints), endpoint (the
//     port name), job (the Service's name, or the value of the Service's label jobLabel);
//   - targets of pods that ended (Failed, Succeeded) dropped;
//   - honor_labels as the endpoint says (false renames a scraped label that clashes with a target
//     label to exported_<name>).
//
// The namespaces discovered are the ServiceMonitor's own unless namespaceSelector says otherwise.
// authorization.credentials (a Secret key) becomes a credentials_file under opts.SecretDir,
// listed in Secrets; bearerTokenFile becomes authorization type Bearer with that file.
func Translate(monitors []*unstructured.Unstructured, opts Options) (ScrapeConfigs, error) {
	var out ScrapeConfigs
	if opts.Role == "" {
		opts.Role = "endpointslice"
	}
	if opts.SecretDir == "" {
		opts.SecretDir = "/etc/prometheus/secrets"
	}
	meta := map[string]string{
		"endpointslice": "__meta_kubernetes_endpointslice_",
		"endpoints":     "__meta_kubernetes_endpoint_",
	}[opts.Role]
	if meta == "" {
		return out, fmt.Errorf("role %q: want endpointslice or endpoints", opts.Role)
	}
	seen := map[string]bool{}
	for _, u := range monitors {
		sm, err := ParseServiceMonitor(u)
		if err != nil {
			return out, err
		}
		ns := sm.Metadata.Namespace
		if ns == "" {
			return out, fmt.Errorf("ServiceMonitor %s has no namespace", sm.Metadata.Name)
		}
		sd := map[string]any{"role": opts.Role}
		switch nsSel := sm.Spec.NamespaceSelector; {
		case nsSel != nil && nsSel.Any:
		case nsSel != nil && len(nsSel.MatchNames) > 0:
			sd["namespaces"] = map[string]any{"names": slices.Clone(nsSel.MatchNames)}
		default:
			sd["namespaces"] = map[string]any{"names": []string{ns}}
		}
		if len(sm.Spec.Endpoints) == 0 {
			return out, fmt.Errorf("ServiceMonitor %s/%s has no endpoints", ns, sm.Metadata.Name)
		}
		for i, ep := range sm.Spec.Endpoints {
			if ep.Port == "" {
				return out, fmt.Errorf("ServiceMonitor %s/%s endpoint %d has no port name (targetPort is not translated)", ns, sm.Metadata.Name, i)
			}
			job := fmt.Sprintf("serviceMonitor/%s/%s/%d", ns, sm.Metadata.Name, i)
			if seen["job:"+job] {
				return out, fmt.Errorf("two ServiceMonitors %s/%s (Prometheus refuses two scrape configs named %s)", ns, sm.Metadata.Name, job)
			}
			seen["job:"+job] = true
			sc := map[string]any{
				"job_name":              job,
				"honor_labels":          ep.HonorLabels,
				"kubernetes_sd_configs": []any{sd},
			}
			if ep.Path != "" {
				sc["metrics_path"] = ep.Path
			}
			if ep.Scheme != "" {
				sc["scheme"] = ep.Scheme
			}
			if iv := ep.Interval; opts.Interval != "" || iv != "" {
				if opts.Interval != "" {
					iv = opts.Interval
				}
				sc["scrape_interval"] = iv
			}
			if ep.ScrapeTimeout != "" {
				sc["scrape_timeout"] = ep.ScrapeTimeout
			}
			if ep.Authorization != nil && ep.BearerTokenFile != "" {
				return out, fmt.Errorf("%s: both authorization and bearerTokenFile", job)
			}
			if a := ep.Authorization; a != nil {
				if a.Credentials == nil || a.Credentials.Name == "" || a.Credentials.Key == "" {
					return out, fmt.Errorf("%s: authorization without credentials name and key", job)
				}
				typ := a.Type
				if typ == "" {
					typ = "Bearer"
				}
				fk := ns + "_" + a.Credentials.Name + "_" + a.Credentials.Key
				file := path.Join(opts.SecretDir, fk)
				sc["authorization"] = map[string]any{"type": typ, "credentials_file": file}
				if !seen[fk] {
					seen[fk] = true
					out.Secrets = append(out.Secrets, MountedSecret{Namespace: ns, Name: a.Credentials.Name, Key: a.Credentials.Key, FileKey: fk, File: file})
				}
			}
			if ep.BearerTokenFile != "" {
				sc["authorization"] = map[string]any{"type": "Bearer", "credentials_file": ep.BearerTokenFile}
			}
			if tc := ep.TLSConfig; tc != nil {
				t := map[string]any{"insecure_skip_verify": tc.InsecureSkipVerify}
				if tc.ServerName != "" {
					t["server_name"] = tc.ServerName
				}
				sc["tls_config"] = t
			}
			sc["relabel_configs"] = relabelings(sm, ep, meta)
			out.Configs = append(out.Configs, sc)
		}
	}
	return out, nil
}

func relabelings(sm ServiceMonitor, ep Endpoint, meta string) []any {
	r := []any{
		map[string]any{"source_labels": []string{"job"}, "target_label": "__tmp_prometheus_job_name"},
	}
	keys := make([]string, 0, len(sm.Spec.Selector.MatchLabels))
	for k := range sm.Spec.Selector.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := sanitize(k)
		r = append(r, map[string]any{
			"action":        "keep",
			"source_labels": []string{"__meta_kubernetes_service_label_" + s, "__meta_kubernetes_service_labelpresent_" + s},
			"regex":         "(" + regexp.QuoteMeta(sm.Spec.Selector.MatchLabels[k]) + ");true",
		})
	}
	r = append(r,
		map[string]any{"action": "keep", "source_labels": []string{meta + "port_name"}, "regex": regexp.QuoteMeta(ep.Port)},
		map[string]any{"source_labels": []string{meta + "address_target_kind", meta + "address_target_name"}, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
		map[string]any{"source_labels": []string{meta + "address_target_kind", meta + "address_target_name"}, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
	)
	if sm.Spec.JobLabel != "" {
		r = append(r, map[string]any{"source_labels": []string{"__meta_kubernetes_service_label_" + sanitize(sm.Spec.JobLabel)}, "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
	}
	r = append(r, map[string]any{"target_label": "endpoint", "replacement": ep.Port})
	return r
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
