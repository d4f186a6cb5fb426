package desired

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/render"
)

// Renders is the desired state of TiledInstances' children, and its cache: per instance, the
// applier's prepared form of the objects its last render gave and the hash of the inputs it came
// from. A reconcile caused by a child's status (the most common kind) has the same inputs, and render
// is pure, so it need not render nor encode them again; the objects themselves are rendered again
// only when one must be sent. Safe for concurrent use by reconciles of different instances; the zero
// value is ready.
type Renders struct {
	memos sync.Map // types.NamespacedName -> *renderMemo
}

// renderMemo is an instance's last render: the hash of its inputs and the prepared objects.
type renderMemo struct {
	inputs   [32]byte
	prepared []applier.Prepared
}

// Render returns the children the instance ti wants, rendered from spec (ti expanded) and in — or,
// when the inputs are those of its last render, their prepared form from the cache, the objects to
// be rendered again only if one must be sent. A render error is a *RenderError (the instance cannot
// be rendered as it is).
func (r *Renders) Render(ti, spec *tiledv1alpha1.TiledInstance, in render.Inputs) (*Children, error) {
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	objects := func() ([]*unstructured.Unstructured, error) {
		objs, err := render.Render(spec, in)
		if err != nil {
			return nil, &RenderError{err}
		}
		return InstanceObjects(ti, objs)
	}
	inputs, err := renderInputs(ti, spec, in)
	if err != nil {
		return nil, err
	}
	if m, ok := r.memos.Load(key); ok && m.(*renderMemo).inputs == inputs {
		return &Children{prepared: m.(*renderMemo).prepared, render: objects}, nil
	}
	objs, err := objects()
	if err != nil {
		return nil, err
	}
	prepared := make([]applier.Prepared, len(objs))
	for i, u := range objs {
		if prepared[i], err = applier.PrepareUnstructured(u); err != nil {
			return nil, err
		}
	}
	r.memos.Store(key, &renderMemo{inputs: inputs, prepared: prepared})
	return &Children{prepared: prepared, render: objects, objects: objs}, nil
}

// Forget drops what is remembered of the instance: it is gone.
func (r *Renders) Forget(instance types.NamespacedName) { r.memos.Delete(instance) }

// Len is how many instances are remembered.
func (r *Renders) Len() int {
	n := 0
	r.memos.Range(func(any, any) bool { n++; return true })
	return n
}

// RenderError is an error of render.Render: the instance cannot be rendered.
type RenderError struct{ err error }

func (e *RenderError) Error() string { return e.err.Error() }
func (e *RenderError) Unwrap() error { return e.err }

// renderInputs hashes everything the objects of an instance are rendered from: the owner
// (InstanceObjects' controller reference), the expanded instance's name, namespace, labels,
// annotations and spec, and render's other inputs (the Secret's data, an external database's keys,
// whether ServiceMonitors exist).
func renderInputs(ti, spec *tiledv1alpha1.TiledInstance, in render.Inputs) ([32]byte, error) {
	data, err := json.Marshal(struct {
		UID, Name               string
		SpecName, SpecNamespace string
		Labels, Annotations     map[string]string
		Spec                    tiledv1alpha1.TiledInstanceSpec
		In                      render.Inputs
	}{string(ti.UID), ti.Name, spec.Name, spec.Namespace, spec.Labels, spec.Annotations, spec.Spec, in})
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(data), nil
}

// Children is the desired children of one instance for one reconcile, in the order they are applied:
// their prepared form, and the objects themselves, rendered at most once and only if one must be
// sent. Not safe for concurrent use (an instance's children are applied one after another).
type Children struct {
	prepared []applier.Prepared
	render   func() ([]*unstructured.Unstructured, error)
	objects  []*unstructured.Unstructured
}

// Len is the number of children.
func (c *Children) Len() int { return len(c.prepared) }

// Prepared is the applier's prepared form of child i.
func (c *Children) Prepared(i int) applier.Prepared { return c.prepared[i] }

// Object returns child i, rendering the instance if this reconcile has not yet.
func (c *Children) Object(i int) (*unstructured.Unstructured, error) {
	if c.objects == nil {
		objs, err := c.render()
		if err != nil {
			return nil, err
		}
		c.objects = objs
	}
	if len(c.objects) != len(c.prepared) || keyOf(c.objects[i]) != c.prepared[i].Key {
		return nil, fmt.Errorf("the render of %s changed under the same inputs", c.prepared[i].Key)
	}
	return c.objects[i], nil
}

func keyOf(u *unstructured.Unstructured) applier.Key {
	return applier.Key{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
}

// InstanceObjects returns the objects the controller applies for an instance, in order: the rendered
// objects, each controller-owned by the instance except, under the Retain policy, the data and
// database claims and the Secret (the database's password, the API key), which outlive it.
func InstanceObjects(ti *tiledv1alpha1.TiledInstance, objs *render.Objects) ([]*unstructured.Unstructured, error) {
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(ti, tiledv1alpha1.GroupVersion.WithKind("TiledInstance"))}
	retained := map[any]bool{}
	if render.Retained(ti) {
		for _, c := range objs.Claims {
			retained[c] = true
		}
		// The Secret goes with the data: the database on a retained claim only opens with the
		// password in it, and clients keep their API key when the beamline comes back.
		if objs.Secret != nil {
			retained[objs.Secret] = true
		}
	}
	all := objs.All()
	out := make([]*unstructured.Unstructured, 0, len(all))
	for _, o := range all {
		u, err := toUnstructured(o)
		if err != nil {
			return nil, err
		}
		if u.GetNamespace() != "" && !retained[o] {
			u.SetOwnerReferences(owner)
		}
		out = append(out, u)
	}
	return out, nil
}
