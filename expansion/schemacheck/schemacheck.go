package schemacheck

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/config/crd"
	"github.com/bluesky/tiled-operator/expansion"
)

// DecodeChecked decodes a document with expansion.Decode and then checks it as the API server would
// before admitting it (CheckSchema): the CRD's bounds, patterns and CEL rules included.
func DecodeChecked(doc []byte) (runtime.Object, error) {
	obj, err := expansion.Decode(doc)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	if err := CheckSchema(&unstructured.Unstructured{Object: m}); err != nil {
		return nil, err
	}
	return obj, nil
}

// DecodeAllChecked is expansion.DecodeAll with DecodeChecked: what kubectl-tiled reads.
func DecodeAllChecked(name string, r io.Reader) ([]runtime.Object, error) {
	return expansion.DecodeAllWith(name, r, DecodeChecked)
}

// CheckSchema validates an object as the API server validates a custom resource of its kind before
// any webhook sees it: the CRD's defaults applied (to a copy), then its OpenAPI schema (types, enums,
// patterns, bounds, lengths, required fields), the uniqueness of list-map keys and its
// x-kubernetes-validations CEL rules, with apiextensions-apiserver's own validators, after the
// object's metadata (validateObjectMeta). It takes the object as read (unstructured), since a typed round trip would drop
// values the schema refuses, such as an empty string. kubectl-tiled runs it on the files it reads
// (DecodeAllChecked), so that a CI pipeline sees the refusal the API server would give. The error is
// an *InvalidFieldError naming the object, the first field in the API server's notation (e.g.
// spec.instances[0].overrides.database) and its reason.
func CheckSchema(obj *unstructured.Unstructured) error {
	u := obj.DeepCopy()
	kind := u.GetKind()
	v, err := schemaValidatorFor(kind)
	if err != nil {
		return err
	}
	object := kind + "/" + u.GetName()
	errs := validateObjectMeta(u)
	structuraldefaulting.Default(u.Object, v.structural)
	errs = append(errs, apiextensionsvalidation.ValidateCustomResource(nil, u.Object, v.schema)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, u.Object)...)
	if v.cel != nil && len(errs) == 0 {
		celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if len(errs) == 0 {
		return nil
	}
	reason := errs[0].ErrorBody()
	if len(errs) > 1 {
		more := make([]string, 0, len(errs)-1)
		for _, e := range errs[1:] {
			more = append(more, e.Field)
		}
		reason += fmt.Sprintf(" (and %d more: %s)", len(errs)-1, strings.Join(more, ", "))
	}
	return &expansion.InvalidFieldError{Object: object, Field: errs[0].Field, Reason: reason}
}

type crdValidator struct {
	schema     apiextensionsvalidation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

var (
	validatorsOnce sync.Once
	validators     map[string]*crdValidator
	validatorsErr  error
)

func schemaValidatorFor(kind string) (*crdValidator, error) {
	validatorsOnce.Do(func() { validators, validatorsErr = buildValidators() })
	if validatorsErr != nil {
		return nil, validatorsErr
	}
	v, ok := validators[kind]
	if !ok {
		return nil, fmt.Errorf("kind %q is not one of TiledCluster, TiledProfile, TiledInstance", kind)
	}
	return v, nil
}

func buildValidators() (map[string]*crdValidator, error) {
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	out := map[string]*crdValidator{}
	for _, c := range crds {
		for _, ver := range c.Spec.Versions {
			if ver.Name != v1alpha1.GroupVersion.Version || ver.Schema == nil || ver.Schema.OpenAPIV3Schema == nil {
				continue
			}
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(ver.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			sv, _, err := apiextensionsvalidation.NewSchemaValidator(internal)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			st, err := structuralschema.NewStructural(internal)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			out[c.Spec.Names.Kind] = &crdValidator{schema: sv, structural: st, cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
		}
	}
	return out, nil
}
