package webhooks

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
)

// kindOf returns the group-kind an admission request is about, checking that it is one of ours.
func checkKind(req admission.Request, kind string) error {
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	if gk.Group != v1alpha1.GroupVersion.Group || gk.Kind != kind {
		return fmt.Errorf("this webhook admits %s.%s, not %q", kind, v1alpha1.GroupVersion.Group, gk.String())
	}
	if req.Kind.Version != "" && req.Kind.Version != v1alpha1.GroupVersion.Version {
		return fmt.Errorf("this webhook admits %s, not version %q", v1alpha1.GroupVersion, req.Kind.Version)
	}
	return nil
}

// badRequest is the answer to a malformed admission request: a 400, never a panic.
func badRequest(format string, args ...any) admission.Response {
	return admission.Errored(http.StatusBadRequest, fmt.Errorf(format, args...))
}

// refuse denies a request because of the object's content: 422 Invalid, with a message naming the
// object, the field and why.
func refuse(kind, namespace, name, format string, args ...any) admission.Response {
	msg := fmt.Sprintf("%s %s refused: %s", kind, objectName(namespace, name), fmt.Sprintf(format, args...))
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusUnprocessableEntity,
			Reason:  metav1.StatusReasonInvalid,
			Message: msg,
		},
	}}
}

func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// decodeRaw decodes the object of an admission request with the engine's Decode, so that fields
// the CRD's schema does not declare are an *expansion.UnknownFieldError naming the field (the API
// server prunes or rejects them first; a request built by hand may still hold them). An error that
// is not about the schema (not JSON at all, another kind) is reported as malformed.
func decodeRaw(raw runtime.RawExtension, kind string) (runtime.Object, error, bool) {
	if len(raw.Raw) == 0 {
		return nil, fmt.Errorf("the admission request holds no %s", kind), true
	}
	obj, err := expansion.Decode(raw.Raw)
	if err != nil {
		var ue *expansion.UnknownFieldError
		var ie *expansion.InvalidFieldError
		if errors.As(err, &ue) || errors.As(err, &ie) {
			return nil, err, false
		}
		return nil, fmt.Errorf("cannot decode the %s: %w", kind, err), true
	}
	return obj, nil, false
}

// decodeOld decodes the old object of an update request as a T of the given kind, with decodeRaw;
// the zero T (and no error) when the request is not an update or holds no old object.
func decodeOld[T runtime.Object](req admission.Request, kind string) (T, error) {
	var zero T
	if req.Operation != admissionv1.Update || len(req.OldObject.Raw) == 0 {
		return zero, nil
	}
	decoded, err, _ := decodeRaw(req.OldObject, "old "+kind)
	if err != nil {
		return zero, err
	}
	old, ok := decoded.(T)
	if !ok {
		return zero, fmt.Errorf("the admission request's old object is a %T, not a %s", decoded, kind)
	}
	return old, nil
}

// withoutObject drops the "Kind/name: " that Decode puts in front of schema errors: the refusal
// names the object already.
func withoutObject(err error) error {
	var ue *expansion.UnknownFieldError
	if errors.As(err, &ue) {
		c := *ue
		c.Object = ""
		return &c
	}
	var ie *expansion.InvalidFieldError
	if errors.As(err, &ie) {
		c := *ie
		c.Object = ""
		return &c
	}
	return err
}

// groupWarnings turns per-instance warnings into one warning per distinct message, naming the
// instances (at most ten by name), so that a cluster of a thousand beamlines does not print a
// thousand lines.
func groupWarnings(byInstance map[string][]string) []string {
	who := map[string][]string{}
	for inst, ws := range byInstance {
		for _, w := range ws {
			who[w] = append(who[w], inst)
		}
	}
	var out []string
	for _, w := range slices.Sorted(maps.Keys(who)) {
		names := who[w]
		slices.Sort(names)
		label := "instance " + names[0]
		if len(names) > 1 {
			shown := names
			if len(shown) > 10 {
				shown = shown[:10]
			}
			label = fmt.Sprintf("instances %s", strings.Join(shown, ", "))
			if len(names) > len(shown) {
				label += fmt.Sprintf(" and %d more", len(names)-len(shown))
			}
		}
		out = append(out, label+": "+w)
	}
	return out
}

// parseGroupVersion returns the group of an apiVersion such as tiled.blueskyproject.io/v1alpha1.
func parseGroupVersion(apiVersion string) (string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return "", err
	}
	return gv.Group, nil
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// decodeNamed decodes the request's object as a T of the given kind, with the request's namespace
// and name where the object has none. A non-nil response is the answer to give instead: a 400 for a
// malformed request, a refusal naming the object for one the schema rejects.
func decodeNamed[T metav1.Object](req admission.Request, kind string) (T, *admission.Response) {
	var zero T
	decoded, err, malformed := decodeRaw(req.Object, kind)
	if malformed {
		r := badRequest("%v", err)
		return zero, &r
	}
	if err != nil {
		r := refuse(kind, req.Namespace, req.Name, "%v", withoutObject(err))
		return zero, &r
	}
	obj, ok := decoded.(T)
	if !ok {
		r := badRequest("the admission request holds a %T, not a %s", decoded, kind)
		return zero, &r
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(req.Namespace)
	}
	if obj.GetName() == "" {
		obj.SetName(req.Name)
	}
	return obj, nil
}
