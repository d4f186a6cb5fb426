// Package webhook embeds the webhook configurations that controller-gen generates into
// manifests.yaml from the markers of package webhooks, so that the manager can install them itself
// for local runs and tests (pointing them at a URL instead of the in-cluster Service).
package webhook

import (
	_ "embed"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"bufio"
	"bytes"
	"errors"
	"io"
)

//go:embed manifests.yaml
var manifests []byte

// Configurations returns the generated MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration.
func Configurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var m *admissionregistrationv1.MutatingWebhookConfiguration
	var v *admissionregistrationv1.ValidatingWebhookConfiguration
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, err
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m = &admissionregistrationv1.MutatingWebhookConfiguration{}
			err = yaml.UnmarshalStrict(doc, m)
		case "ValidatingWebhookConfiguration":
			v = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			err = yaml.UnmarshalStrict(doc, v)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("embedded webhook configuration: %w", err)
		}
	}
	if m == nil || v == nil {
		return nil, nil, errors.New("embedded webhook manifests lack a mutating or a validating configuration")
	}
	return m, v, nil
}
