package crdcompat_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/hack/crdcompat"
)

// baseCRD is a small CRD with one of each kind of schema node Compare looks at: scalars with a
// type, a format, int-or-string, an enum, a bound and a pattern; a set, a list-map and an atomic
// list; a map of strings; an atomic map; an object preserving unknown fields; a required property;
// a nullable property; a CEL rule; the status subresource.
const baseCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [image]
            x-kubernetes-validations:
            - rule: "!has(self.replicas) || self.replicas <= 10"
              message: at most ten replicas
            properties:
              image: {type: string, description: the image}
              replicas: {type: integer, format: int32, minimum: 1}
              size: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}
              when: {type: string, format: date-time}
              mode: {type: string, enum: [Fast, Safe]}
              note: {type: string, nullable: true, maxLength: 100}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              args:
                type: array
                items: {type: string}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              labels:
                type: object
                additionalProperties: {type: string}
              selector:
                type: object
                x-kubernetes-map-type: atomic
                properties:
                  app: {type: string}
              config:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              ready: {type: boolean}
`

// widget parses baseCRD.
func widget(t *testing.T) apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(baseCRD), &crd); err != nil {
		t.Fatalf("baseCRD: %v", err)
	}
	return crd
}

// Helpers that reach into the base CRD's first version.
func root(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
	return c.Spec.Versions[0].Schema.OpenAPIV3Schema
}

func spec(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
	s := root(c).Properties["spec"]
	return &s
}

// setSpecField replaces one property of .spec.
func setSpecField(c *apiextensionsv1.CustomResourceDefinition, name string, edit func(*apiextensionsv1.JSONSchemaProps)) {
	s := *spec(c)
	p := s.Properties[name]
	edit(&p)
	s.Properties[name] = p
	root(c).Properties["spec"] = s
}

func editSpec(c *apiextensionsv1.CustomResourceDefinition, edit func(*apiextensionsv1.JSONSchemaProps)) {
	s := *spec(c)
	edit(&s)
	root(c).Properties["spec"] = s
}

func jsonValues(vs ...string) []apiextensionsv1.JSON {
	out := make([]apiextensionsv1.JSON, 0, len(vs))
	for _, v := range vs {
		out = append(out, apiextensionsv1.JSON{Raw: []byte(v)})
	}
	return out
}

const w = "widgets.example.com v1alpha1: "

func TestCompare(t *testing.T) {
	cases := []struct {
		name string
		// old edits the old CRD (nil: the base), edit the new one (nil: the base).
		old, edit func(c *apiextensionsv1.CustomResourceDefinition)
		// extraNew is a further CRD in the new set.
		extraNew  bool
		dropNew   bool
		problems  []string
		warnings  []string
		wantEmpty bool // no problems and no warnings
	}{
		// Identical sets: nothing to report.
		{name: "identical", wantEmpty: true},

		// Problems.
		{name: "field removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) { delete(s.Properties, "when") })
			},
			problems: []string{w + ".spec.when: field removed"}},
		{name: "nested field removed (list items)",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "ports", func(p *apiextensionsv1.JSONSchemaProps) { delete(p.Items.Schema.Properties, "port") })
			},
			problems: []string{w + ".spec.ports[*].port: field removed"}},
		{name: "top-level field removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				delete(root(c).Properties, "status")
			},
			problems: []string{w + ".status: field removed"}},
		{name: "map values schema removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.AdditionalProperties = nil })
			},
			problems: []string{w + ".spec.labels.*: map values schema (additionalProperties) removed"}},
		{name: "map value type changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.AdditionalProperties.Schema.Type = "integer" })
			},
			problems: []string{w + ".spec.labels.*: type string -> integer"}},
		{name: "array items schema removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "args", func(p *apiextensionsv1.JSONSchemaProps) { p.Items = nil })
			},
			problems: []string{w + ".spec.args[*]: array items schema removed"}},
		{name: "type changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "image", func(p *apiextensionsv1.JSONSchemaProps) { p.Type = "integer" })
			},
			problems: []string{w + ".spec.image: type string -> integer"}},
		{name: "format changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "when", func(p *apiextensionsv1.JSONSchemaProps) { p.Format = "date" })
			},
			problems: []string{w + ".spec.when: format date-time -> date"}},
		{name: "format removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "replicas", func(p *apiextensionsv1.JSONSchemaProps) { p.Format = "" })
			},
			problems: []string{w + ".spec.replicas: format int32 -> (none)"}},
		{name: "int-or-string turned into a string",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "size", func(p *apiextensionsv1.JSONSchemaProps) {
					p.XIntOrString, p.AnyOf, p.Type = false, nil, "string"
				})
			},
			problems: []string{
				w + ".spec.size: type (none) -> string",
				w + ".spec.size: x-kubernetes-int-or-string true -> false",
			}},
		{name: "anyOf changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.AnyOf = p.AnyOf[:1] })
			},
			warnings: []string{w + ".spec.size: anyOf changed"}},
		{name: "preserve-unknown-fields turned off",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "config", func(p *apiextensionsv1.JSONSchemaProps) { p.XPreserveUnknownFields = nil })
			},
			problems: []string{w + ".spec.config: x-kubernetes-preserve-unknown-fields true -> false"}},
		{name: "preserve-unknown-fields turned on",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.XPreserveUnknownFields = ptr.To(true) })
			},
			problems: []string{w + ".spec.labels: x-kubernetes-preserve-unknown-fields false -> true"}},
		{name: "list type set -> atomic",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.XListType = nil })
			},
			problems: []string{w + ".spec.tags: x-kubernetes-list-type set -> atomic"}},
		{name: "list map keys changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "ports", func(p *apiextensionsv1.JSONSchemaProps) {
					p.XListMapKeys = []string{"name", "port"}
					p.Items.Schema.Required = []string{"name", "port"}
				})
			},
			problems: []string{
				w + ".spec.ports: x-kubernetes-list-map-keys [name] -> [name port]",
				w + ".spec.ports[*].port: became required",
			}},
		{name: "map type atomic -> granular",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "selector", func(p *apiextensionsv1.JSONSchemaProps) { p.XMapType = ptr.To("granular") })
			},
			problems: []string{w + ".spec.selector: x-kubernetes-map-type atomic -> granular"}},
		{name: "existing field became required",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) { s.Required = append(s.Required, "replicas") })
			},
			problems: []string{w + ".spec.replicas: became required"}},
		{name: "new field is required",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) {
					s.Properties["zone"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
					s.Required = append(s.Required, "zone")
				})
			},
			problems: []string{w + ".spec.zone: new field is required"}},
		{name: "enum lost a value",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = jsonValues(`"Fast"`) })
			},
			problems: []string{w + `.spec.mode: enum lost "Safe"`}},
		{name: "enum added where there was none",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "image", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = jsonValues(`"a"`, `"b"`) })
			},
			problems: []string{w + `.spec.image: enum added: only "a", "b" allowed`}},
		{name: "nullable turned off",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "note", func(p *apiextensionsv1.JSONSchemaProps) { p.Nullable = false })
			},
			problems: []string{w + ".spec.note: nullable true -> false"}},
		{name: "served version missing",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Name = "v1beta1"
			},
			problems: []string{
				"widgets.example.com: storage version v1alpha1 -> v1beta1 while v1alpha1 is no longer served",
				w + "served version missing in the new CRD",
			}},
		{name: "version no longer served",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Served = false
			},
			problems: []string{w + "version no longer served"}},
		{name: "storage moved to a new version, old one unserved",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				v := *c.Spec.Versions[0].DeepCopy()
				v.Name = "v1beta1"
				c.Spec.Versions[0].Storage, c.Spec.Versions[0].Served = false, false
				c.Spec.Versions = append(c.Spec.Versions, v)
			},
			problems: []string{
				"widgets.example.com: storage version v1alpha1 -> v1beta1 while v1alpha1 is no longer served",
				w + "version no longer served",
			}},
		{name: "CRD missing", dropNew: true,
			problems: []string{"widgets.example.com: CRD missing in the new set"}},
		{name: "scope changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Scope = apiextensionsv1.ClusterScoped
			},
			problems: []string{"widgets.example.com: scope Namespaced -> Cluster"}},
		{name: "kind changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Names.Kind = "Gadget"
			},
			problems: []string{"widgets.example.com: kind Widget -> Gadget"}},
		{name: "status subresource removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Subresources = nil
			},
			problems: []string{w + "status subresource removed"}},
		{name: "several problems, in path order",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.Items.Schema.Type = "integer" })
				setSpecField(c, "image", func(p *apiextensionsv1.JSONSchemaProps) { p.Type = "boolean" })
				delete(root(c).Properties, "status")
			},
			problems: []string{
				w + ".spec.image: type string -> boolean",
				w + ".spec.tags[*]: type string -> integer",
				w + ".status: field removed",
			}},

		// Allowed changes.
		{name: "optional field added",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) {
					s.Properties["zone"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
				})
			},
			wantEmpty: true},
		{name: "enum value added",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = jsonValues(`"Safe"`, `"Fast"`, `"Turbo"`) })
			},
			wantEmpty: true},
		{name: "enum removed (every value allowed)",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = nil })
			},
			wantEmpty: true},
		{name: "descriptions and defaults",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "image", func(p *apiextensionsv1.JSONSchemaProps) { p.Description = "another text" })
				setSpecField(c, "mode", func(p *apiextensionsv1.JSONSchemaProps) {
					p.Default = &apiextensionsv1.JSON{Raw: []byte(`"Safe"`)}
				})
				setSpecField(c, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.AnyOf[0].Description = "a count" })
			},
			wantEmpty: true},
		{name: "required entry dropped",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) { s.Required = nil })
			},
			wantEmpty: true},
		{name: "default list type and map type spelled out",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "args", func(p *apiextensionsv1.JSONSchemaProps) { p.XListType = ptr.To("atomic") })
				setSpecField(c, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.XMapType = ptr.To("granular") })
			},
			wantEmpty: true},
		{name: "new version added, storage moved to it, old one still served",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				v := *c.Spec.Versions[0].DeepCopy()
				v.Name = "v1beta1"
				c.Spec.Versions[0].Storage = false
				c.Spec.Versions = append(c.Spec.Versions, v)
			},
			wantEmpty: true},
		{name: "unserved old version removed",
			old: func(c *apiextensionsv1.CustomResourceDefinition) {
				v := *c.Spec.Versions[0].DeepCopy()
				v.Name, v.Served, v.Storage = "v0", false, false
				delete(v.Schema.OpenAPIV3Schema.Properties, "spec")
				c.Spec.Versions = append(c.Spec.Versions, v)
			},
			wantEmpty: true},
		{name: "new CRD", extraNew: true, wantEmpty: true},
		{name: "CEL rule removed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) { s.XValidations = nil })
			},
			wantEmpty: true},
		{name: "CEL rule's message changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) { s.XValidations[0].Message = "ten at most" })
			},
			wantEmpty: true},
		{name: "CEL rule on a new field",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) {
					s.Properties["zone"] = apiextensionsv1.JSONSchemaProps{Type: "string",
						XValidations: apiextensionsv1.ValidationRules{{Rule: "self != ''"}}}
				})
			},
			wantEmpty: true},

		// Allowed, with a warning.
		{name: "new CEL rule",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "image", func(p *apiextensionsv1.JSONSchemaProps) {
					p.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.contains(':')", Message: "a tag"}}
				})
			},
			warnings: []string{w + ".spec.image: new x-kubernetes-validations rule: self.contains(':')"}},
		{name: "CEL rule's text changed",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				editSpec(c, func(s *apiextensionsv1.JSONSchemaProps) { s.XValidations[0].Rule = "self.replicas <= 5" })
			},
			warnings: []string{w + ".spec: new x-kubernetes-validations rule: self.replicas <= 5"}},
		{name: "tightened bounds and pattern",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "note", func(p *apiextensionsv1.JSONSchemaProps) {
					p.MaxLength = ptr.To[int64](50)
					p.Pattern = "^[a-z]*$"
				})
				setSpecField(c, "replicas", func(p *apiextensionsv1.JSONSchemaProps) {
					p.Minimum = ptr.To(2.0)
					p.Maximum = ptr.To(10.0)
				})
				setSpecField(c, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxItems = ptr.To[int64](8) })
			},
			warnings: []string{
				w + ".spec.note: pattern (none) -> ^[a-z]*$",
				w + ".spec.note: maxLength 100 -> 50",
				w + ".spec.replicas: maximum (none) -> 10",
				w + ".spec.replicas: minimum 1 -> 2",
				w + ".spec.tags: maxItems (none) -> 8",
			}},
		{name: "loosened bounds",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				setSpecField(c, "note", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxLength = ptr.To[int64](500) })
				setSpecField(c, "replicas", func(p *apiextensionsv1.JSONSchemaProps) { p.Minimum = nil })
			},
			wantEmpty: true},
		{name: "status subresource added",
			old: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Subresources = nil
			},
			warnings: []string{w + "status subresource added: status written through the main resource is now ignored"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o, n := widget(t), widget(t)
			if tc.old != nil {
				tc.old(&o)
			}
			if tc.edit != nil {
				tc.edit(&n)
			}
			current := []apiextensionsv1.CustomResourceDefinition{n}
			if tc.dropNew {
				current = nil
			}
			if tc.extraNew {
				other := widget(t)
				other.Name, other.Spec.Names.Plural, other.Spec.Names.Kind = "gadgets.example.com", "gadgets", "Gadget"
				current = append(current, other)
			}

			got := crdcompat.Compare([]apiextensionsv1.CustomResourceDefinition{o}, current)

			if tc.wantEmpty {
				g.Expect(tc.problems).To(BeEmpty(), "a case wanting nothing lists problems")
				g.Expect(strs(got.Problems)).To(BeEmpty())
				g.Expect(strs(got.Warnings)).To(BeEmpty())
				return
			}
			g.Expect(len(tc.problems)+len(tc.warnings)).NotTo(BeZero(), "a case must want something")
			// Exact and in order: the order is documented as stable.
			g.Expect(strs(got.Problems)).To(Equal(orEmpty(tc.problems)))
			g.Expect(strs(got.Warnings)).To(Equal(orEmpty(tc.warnings)))
		})
	}
}

// TestCompareOnlyServedVersions shows that a version the old CRD does not serve is not compared,
// while the same change in a served version is reported.
func TestCompareOnlyServedVersions(t *testing.T) {
	g := NewWithT(t)
	o, n := widget(t), widget(t)
	// Both CRDs get a second version, v0, whose .spec.image changes type.
	for _, c := range []*apiextensionsv1.CustomResourceDefinition{&o, &n} {
		v := *c.Spec.Versions[0].DeepCopy()
		v.Name, v.Storage = "v0", false
		c.Spec.Versions = append(c.Spec.Versions, v)
	}
	img := n.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"]
	p := img.Properties["image"]
	p.Type = "integer"
	img.Properties["image"] = p
	n.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"] = img

	o.Spec.Versions[1].Served = true
	got := crdcompat.Compare([]apiextensionsv1.CustomResourceDefinition{o}, []apiextensionsv1.CustomResourceDefinition{n})
	g.Expect(strs(got.Problems)).To(Equal([]string{"widgets.example.com v0: .spec.image: type string -> integer"}))

	o.Spec.Versions[1].Served = false
	got = crdcompat.Compare([]apiextensionsv1.CustomResourceDefinition{o}, []apiextensionsv1.CustomResourceDefinition{n})
	g.Expect(got.Problems).To(BeEmpty())
}

// TestCompareOrder shows that the findings come in CRD name order, whatever the order of the old set.
func TestCompareOrder(t *testing.T) {
	g := NewWithT(t)
	widgets, gadgets := widget(t), widget(t)
	gadgets.Name, gadgets.Spec.Names.Plural, gadgets.Spec.Names.Kind = "gadgets.example.com", "gadgets", "Gadget"
	got := crdcompat.Compare([]apiextensionsv1.CustomResourceDefinition{widgets, gadgets}, nil)
	g.Expect(strs(got.Problems)).To(Equal([]string{
		"gadgets.example.com: CRD missing in the new set",
		"widgets.example.com: CRD missing in the new set",
	}))
}

func TestFindingString(t *testing.T) {
	g := NewWithT(t)
	g.Expect(crdcompat.Finding{CRD: "a.b", Version: "v1", Path: ".spec.x", Message: "m"}.String()).To(Equal("a.b v1: .spec.x: m"))
	g.Expect(crdcompat.Finding{CRD: "a.b", Version: "v1", Message: "m"}.String()).To(Equal("a.b v1: m"))
	g.Expect(crdcompat.Finding{CRD: "a.b", Message: "m"}.String()).To(Equal("a.b: m"))
}

func TestLoadDir(t *testing.T) {
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := strings.NewReplacer("widgets.example.com", "gadgets.example.com", "plural: widgets", "plural: gadgets").Replace(baseCRD)

	t.Run("several files and documents", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		write(t, dir, "b.yaml", baseCRD)
		write(t, dir, "a.yaml", "---\n"+other+"\n---\n")
		write(t, dir, "COMMIT", "not yaml: [")
		crds, err := crdcompat.LoadDir(dir)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(crds).To(HaveLen(2))
		g.Expect(crds[0].Name).To(Equal("gadgets.example.com"))
		g.Expect(crds[1].Name).To(Equal("widgets.example.com"))
		g.Expect(crds[1].Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties).To(HaveKey("ports"))
	})
	t.Run("another kind", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		write(t, dir, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
		_, err := crdcompat.LoadDir(dir)
		g.Expect(err).To(MatchError(ContainSubstring("kind ConfigMap")))
	})
	t.Run("a CRD twice", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		write(t, dir, "a.yaml", baseCRD)
		write(t, dir, "b.yaml", baseCRD)
		_, err := crdcompat.LoadDir(dir)
		g.Expect(err).To(MatchError(ContainSubstring("CRD widgets.example.com already in")))
	})
	t.Run("no file", func(t *testing.T) {
		g := NewWithT(t)
		_, err := crdcompat.LoadDir(t.TempDir())
		g.Expect(err).To(MatchError(ContainSubstring("no *.yaml file")))
	})
}

func strs(fs []crdcompat.Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
