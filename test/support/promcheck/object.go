package promcheck

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ReadObject reads a YAML file holding one Kubernetes object (a ServiceMonitor or PrometheusRule of
// config/components/prometheus, say) as the unstructured object RuleFile and Translate take.
func ReadObject(file string) (*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}
