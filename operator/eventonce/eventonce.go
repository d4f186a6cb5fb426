package eventonce

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// Window is how long a sent Event's key is remembered. client-go keeps an Event in its series cache
// until a sweep (every 6 minutes) finds it older than 6 minutes, so up to 12 minutes; a repeat
// within that time would become a series. Past Window the broadcaster has forgotten it too, and a
// repeat is a new Event, created.
const Window = 15 * time.Minute

// key is what makes two Events one series in client-go's broadcaster (its getKey), less the
// reporting controller and instance, which are the same for every Event of one Recorder.
type key struct {
	regarding, related ref
	action, reason     string
}

// ref names an object at one version.
type ref struct {
	uid                      types.UID
	namespace, name, version string
}

// Recorder is an events.EventRecorder that passes an Event on unless one of the same key was passed
// on within Window.
type Recorder struct {
	inner events.EventRecorder
	now   func() time.Time

	mu   sync.Mutex
	sent map[key]time.Time
	// swept is when sent was last cleared of keys older than Window.
	swept time.Time
}

// New wraps inner.
func New(inner events.EventRecorder) *Recorder {
	return &Recorder{inner: inner, now: time.Now, sent: map[key]time.Time{}}
}

var _ events.EventRecorder = (*Recorder)(nil)

// Eventf passes the Event on to the wrapped recorder unless it repeats one sent within Window.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	reg, ok := refOf(regarding)
	rel, _ := refOf(related)
	if ok && !r.first(key{regarding: reg, related: rel, action: action, reason: reason}) {
		return
	}
	r.inner.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// first records k as sent now and reports whether it was not sent within Window.
func (r *Recorder) first(k key) bool {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) > Window {
		// Events are few (transitions), so a sweep per Window keeps the map small.
		for k, at := range r.sent {
			if now.Sub(at) > Window {
				delete(r.sent, k)
			}
		}
		r.swept = now
	}
	if at, ok := r.sent[k]; ok && now.Sub(at) <= Window {
		return false
	}
	r.sent[k] = now
	return true
}

// refOf names obj at its version, and reports whether obj has the metadata to name it by; a nil
// object (no related object) is the zero ref.
func refOf(obj runtime.Object) (ref, bool) {
	if obj == nil {
		return ref{}, false
	}
	m, ok := obj.(interface {
		GetUID() types.UID
		GetNamespace() string
		GetName() string
		GetResourceVersion() string
	})
	if !ok {
		return ref{}, false
	}
	return ref{uid: m.GetUID(), namespace: m.GetNamespace(), name: m.GetName(), version: m.GetResourceVersion()}, true
}
