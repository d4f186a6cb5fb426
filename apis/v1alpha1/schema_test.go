package v1alpha1_test

import (
	"sort"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/bluesky/tiled-operator/config/crd"
)

// TestEveryFieldIsDocumented walks the generated CRD schemas: every field has a description, which
// is what `kubectl explain` shows.
func TestEveryFieldIsDocumented(t *testing.T) {
	g := NewWithT(t)
	crds, err := crd.CRDs()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crds).To(HaveLen(3))
	var missing []string
	var rootPath string
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		for name, p := range s.Properties {
			child := path + "." + name
			typeMeta := path == rootPath && (name == "metadata" || name == "apiVersion" || name == "kind")
			if p.Description == "" && !typeMeta {
				missing = append(missing, child)
			}
			walk(child, &p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", s.Items.Schema)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(path+"{}", s.AdditionalProperties.Schema)
		}
	}
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			rootPath = c.Spec.Names.Kind
			walk(rootPath, v.Schema.OpenAPIV3Schema)
		}
	}
	sort.Strings(missing)
	g.Expect(missing).To(BeEmpty(), "fields without a description (add a doc comment to the Go type)")
}
