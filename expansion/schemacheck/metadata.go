package schemacheck

import (
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateObjectMeta checks an object's metadata as the API server checks that of every custom
// resource before its schema (apiextensions-apiserver's customResourceValidator), with
// apimachinery's own validator, so that the messages are the server's: the name a DNS subdomain,
// label keys and values (a value of at most 63 characters, a key without spaces), annotation keys
// and their total size, owner references and finalizers, under metadata.name, metadata.labels,
// metadata.annotations... The three kinds are namespaced; an object that names no namespace is
// checked as in the one it will be given (the API server fills it in from the request).
func validateObjectMeta(u *unstructured.Unstructured) field.ErrorList {
	if u.GetNamespace() == "" {
		u = u.DeepCopy()
		u.SetNamespace("default")
	}
	return validation.ValidateObjectMetaAccessor(u, true, validation.NameIsDNSSubdomain, field.NewPath("metadata"))
}
