package promcheck

import "sigs.k8s.io/yaml"

// PrometheusConfig returns a prometheus.yml: the global scrape and evaluation intervals, the rule
// files (paths as the server sees them) and the scrape configs.
func PrometheusConfig(scrapeInterval, evaluationInterval string, ruleFiles []string, sc ScrapeConfigs) ([]byte, error) {
	cfgs := make([]any, 0, len(sc.Configs))
	for _, c := range sc.Configs {
		cfgs = append(cfgs, c)
	}
	return yaml.Marshal(map[string]any{
		"global": map[string]any{
			"scrape_interval":     scrapeInterval,
			"evaluation_interval": evaluationInterval,
		},
		"rule_files":     ruleFiles,
		"scrape_configs": cfgs,
	})
}
