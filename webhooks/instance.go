package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/profiles"
)

// InstanceDefaulter is the mutating webhook of TiledInstance: it expands a standalone instance with
// the engine (expansion.ExpandInstance) over the profiles of its namespace, so that the stored
// object, and the answer to `kubectl apply --dry-run=server -o yaml`, hold the complete spec and
// its provenance. Instances of a TiledCluster, and the operator's own writes, pass through.
type InstanceDefaulter struct {
	// Reader lists TiledProfiles: the manager's cache.
	Reader client.Reader
	// APIReader, when set, lists TiledProfiles again from the API server when the cache finds
	// none that the selector matches: a profile created a moment before the instance (kubectl apply
	// of a directory) may not have reached the cache yet.
	APIReader client.Reader
	// Builtins are the built-in defaults, as the controllers use.
	Builtins expansion.Builtins
	// Operator identifies the operator's own requests, which pass through.
	Operator Identity
}

// Identity says which admission requests the operator itself sent.
type Identity struct {
	// FieldManager is the operator's field manager (v1alpha1.FieldOwner).
	FieldManager string
	// Usernames are the users the operator runs as, e.g.
	// system:serviceaccount:tiled-operator-system:tiled-operator-controller-manager.
	Usernames []string
}

// Matches reports whether the request was sent by the operator: by one of its users, or under its
// field manager.
func (id Identity) Matches(req admission.Request) bool {
	if slices.Contains(id.Usernames, req.UserInfo.Username) {
		return true
	}
	return id.FieldManager != "" && fieldManager(req) == id.FieldManager
}

// fieldManager reads the field manager from the create, update or patch options of a request.
func fieldManager(req admission.Request) string {
	if len(req.Options.Raw) == 0 {
		return ""
	}
	var opts struct {
		FieldManager string `json:"fieldManager"`
	}
	if json.Unmarshal(req.Options.Raw, &opts) != nil {
		return ""
	}
	return opts.FieldManager
}

// clusterOf returns the name of the TiledCluster that controls obj, or "".
func clusterOf(obj metav1.Object) string {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "TiledCluster" {
		return ""
	}
	if g, err := parseGroupVersion(ref.APIVersion); err != nil || g != v1alpha1.GroupVersion.Group {
		return ""
	}
	return ref.Name
}

// Handle implements admission.Handler.
func (h *InstanceDefaulter) Handle(ctx context.Context, req admission.Request) admission.Response {
	if err := checkKind(req, "TiledInstance"); err != nil {
		return badRequest("%v", err)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, resp := decodeNamed[*v1alpha1.TiledInstance](req, "TiledInstance")
	if resp != nil {
		return *resp
	}
	if c := clusterOf(obj); c != "" {
		return admission.Allowed("an instance of TiledCluster " + c + ": its controller expands it")
	}
	if h.Operator.Matches(req) {
		return admission.Allowed("written by the operator")
	}
	old, err := decodeOld[*v1alpha1.TiledInstance](req, "TiledInstance")
	if err != nil {
		return badRequest("%v", err)
	}
	expanded, err := h.Expand(ctx, obj, old)
	if err != nil {
		var infra *infraError
		if errors.As(err, &infra) {
			// Consistent with failurePolicy Ignore: the controller expands the instance itself.
			return admission.Allowed("").WithWarnings(fmt.Sprintf("TiledInstance %s was not expanded at admission: %v; the operator expands it when it reconciles",
				objectName(obj.Namespace, obj.Name), infra.err))
		}
		return refuse("TiledInstance", obj.Namespace, obj.Name, "%v", err)
	}
	current, err := patchedRaw(req.Object.Raw, expanded)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, current)
}

// infraError is a failure to read profiles, as opposed to a fault of the object.
type infraError struct{ err error }

func (e *infraError) Error() string { return e.err.Error() }

// Expand returns obj expanded with expansion.Reexpand, over the profiles of its namespace in the cache (and,
// when the cache has none the selector matches, or none that allows what the instance sets, those
// the API server lists).
func (h *InstanceDefaulter) Expand(ctx context.Context, obj, old *v1alpha1.TiledInstance) (*v1alpha1.TiledInstance, error) {
	candidates, err := h.profiles(ctx, h.Reader, obj.Namespace)
	if err != nil {
		return nil, err
	}
	out, err := expansion.Reexpand(obj, old, candidates, h.Builtins)
	var none *profiles.NoProfilesError
	var notAllowed *expansion.NotAllowedError
	if (errors.As(err, &none) || errors.As(err, &notAllowed)) && h.APIReader != nil {
		if candidates, err = h.profiles(ctx, h.APIReader, obj.Namespace); err != nil {
			return nil, err
		}
		out, err = expansion.Reexpand(obj, old, candidates, h.Builtins)
	}
	return out, err
}

func (h *InstanceDefaulter) profiles(ctx context.Context, r client.Reader, namespace string) ([]v1alpha1.TiledProfile, error) {
	var list v1alpha1.TiledProfileList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, &infraError{fmt.Errorf("listing the TiledProfiles of namespace %s: %w", namespace, err)}
	}
	return list.Items, nil
}

// patchedRaw returns the request's object with its spec and provenance replaced by the expanded
// ones, every other field as sent, so that the JSON patch touches spec and provenance only.
func patchedRaw(raw []byte, expanded *v1alpha1.TiledInstance) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&expanded.Spec)
	if err != nil {
		return nil, err
	}
	m["spec"] = spec
	if len(expanded.Provenance) > 0 {
		m["provenance"] = expanded.Provenance
	} else {
		delete(m, "provenance")
	}
	return json.Marshal(m)
}

// InstanceValidator is the validating webhook of TiledInstance. For a standalone instance it
// checks what the CRD's CEL rules cannot (expansion.CheckInstance: its name, fields the schema does
// not declare, the profileSelector, every CEL expression compiled and type-checked against the field
// it computes, values the API server would refuse on its objects), in case the mutating webhook was
// skipped. With a Reader it also expands the instance as the mutating webhook does, and refuses
// values of the expanded instance that cannot run or that its profiles do not allow
// (expansion.NotAllowedError), and a name that one of its objects would share with another
// instance's. It warns about suspicious settings. Instances of a TiledCluster pass: their controller
// expanded them.
type InstanceValidator struct {
	// Reader lists TiledProfiles and TiledInstances: the manager's cache. Nil skips the checks
	// that need other objects.
	Reader client.Reader
	// APIReader, when set, lists TiledProfiles again from the API server before a refusal that
	// depends on them.
	APIReader client.Reader
	// Builtins are the built-in defaults, as the controllers use.
	Builtins expansion.Builtins
}

// Handle implements admission.Handler.
func (h *InstanceValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if err := checkKind(req, "TiledInstance"); err != nil {
		return badRequest("%v", err)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, refusal := decodeNamed[*v1alpha1.TiledInstance](req, "TiledInstance")
	if refusal != nil {
		return *refusal
	}
	ns, name := obj.Namespace, obj.Name
	if c := clusterOf(obj); c != "" {
		return admission.Allowed("an instance of TiledCluster " + c)
	}
	if err := expansion.CheckInstance(obj); err != nil {
		return refuse("TiledInstance", ns, name, "%v", err)
	}
	if h.Reader != nil {
		if resp := h.checkExpanded(ctx, req, obj); resp != nil {
			return *resp
		}
	}
	complete := len(obj.Provenance) > 0
	return admission.Allowed("").WithWarnings(prefixed("TiledInstance "+objectName(ns, name)+": ", templateWarnings(&obj.Spec.InstanceTemplate, complete))...)
}

// checkExpanded expands a standalone instance over the profiles of its namespace and returns a
// refusal for what the expansion finds wrong with the instance itself, or for a name one of its
// objects would share with another instance's; nil to go on.
func (h *InstanceValidator) checkExpanded(ctx context.Context, req admission.Request, obj *v1alpha1.TiledInstance) *admission.Response {
	old, err := decodeOld[*v1alpha1.TiledInstance](req, "TiledInstance")
	if err != nil {
		old = nil // an unreadable stored object is expanded as a new one
	}
	expand := func(r client.Reader) (*v1alpha1.TiledInstance, error) {
		var list v1alpha1.TiledProfileList
		if err := r.List(ctx, &list, client.InNamespace(obj.Namespace)); err != nil {
			return nil, &infraError{err}
		}
		return expansion.Reexpand(obj, old, list.Items, h.Builtins)
	}
	expanded, err := expand(h.Reader)
	if err != nil && instancesFault(err) && h.APIReader != nil {
		expanded, err = expand(h.APIReader)
	}
	if err != nil {
		if instancesFault(err) {
			r := refuse("TiledInstance", obj.Namespace, obj.Name, "%v", err)
			return &r
		}
		// Profiles missing or in conflict: the mutating webhook and the controller say so.
		expanded = obj
	}
	var all v1alpha1.TiledInstanceList
	// The cache's own instances, not copies: read only.
	if err := h.Reader.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
		r := admission.Errored(http.StatusInternalServerError, fmt.Errorf("listing TiledInstances: %w", err))
		return &r
	}
	others := make([]*v1alpha1.TiledInstance, 0, len(all.Items))
	for i := range all.Items {
		if o := &all.Items[i]; o.Namespace != obj.Namespace || o.Name != obj.Name {
			others = append(others, o)
		}
	}
	if err := expansion.NameCollision(others, []*v1alpha1.TiledInstance{expanded}, func(*v1alpha1.TiledInstance) string { return "metadata.name" }); err != nil {
		r := refuse("TiledInstance", obj.Namespace, obj.Name, "%v", err)
		return &r
	}
	return nil
}

// instancesFault reports whether an expansion error is the standalone instance's own: a value or
// expression of its own, or a setting its profiles do not allow.
func instancesFault(err error) bool {
	var na *expansion.NotAllowedError
	var ie *expansion.InvalidFieldError
	var ue *expansion.UnknownFieldError
	var xe *expansion.ExpressionError
	switch {
	case errors.As(err, &na):
		return true
	case errors.As(err, &ie):
		return !strings.HasPrefix(ie.Layer, "profile/") || strings.HasSuffix(ie.Layer, expansion.ExpressionSuffix)
	case errors.As(err, &ue):
		return !strings.HasPrefix(ue.Layer, "profile/")
	case errors.As(err, &xe):
		return !strings.HasPrefix(xe.Layer, "profile/")
	}
	return false
}
