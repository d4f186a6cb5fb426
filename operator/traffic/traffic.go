package traffic

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// Verbs as counted: the apiserver's request verbs, with server-side apply told apart from other
// patches.
const (
	VerbGet    = "get"
	VerbList   = "list"
	VerbWatch  = "watch"
	VerbCreate = "create"
	VerbUpdate = "update"
	VerbPatch  = "patch"
	VerbApply  = "apply"
	VerbDelete = "delete"
)

// Key identifies a kind of request.
type Key struct {
	// Verb is one of the Verb constants (or another apiserver verb, e.g. deletecollection).
	Verb string
	// Resource is the plural resource, with "/subresource" appended when there is one, e.g.
	// "tiledclusters/status".
	Resource string
}

// IsWrite reports whether the request changes state.
func (k Key) IsWrite() bool {
	switch k.Verb {
	case VerbGet, VerbList, VerbWatch:
		return false
	}
	return true
}

// IsRead reports whether the request is a GET or LIST (watches are not counted as reads).
func (k Key) IsRead() bool { return k.Verb == VerbGet || k.Verb == VerbList }

// Counter counts requests. The zero value is not usable; call New.
type Counter struct {
	mu      sync.Mutex
	counts  map[Key]int64
	metric  *prometheus.CounterVec
	factory *apirequest.RequestInfoFactory
}

// New returns a Counter. When reg is not nil the counts are also exported to it as
// tiled_operator_api_requests_total{verb,resource}.
func New(reg prometheus.Registerer) *Counter {
	c := &Counter{
		counts: map[Key]int64{},
		factory: &apirequest.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
	}
	if reg != nil {
		c.metric = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiled_operator_api_requests_total",
			Help: "Requests the operator sent to the Kubernetes API server, by verb and resource.",
		}, []string{"verb", "resource"})
		if err := reg.Register(c.metric); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok { //nolint:errorlint // prometheus returns the value type
				c.metric = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return c
}

// Instrument makes every client built from cfg count its requests here. It returns cfg for chaining.
func (c *Counter) Instrument(cfg *rest.Config) *rest.Config {
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return roundTripper{next: rt, counter: c}
	}
	return cfg
}

type roundTripper struct {
	next    http.RoundTripper
	counter *Counter
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r.counter.observe(req)
	return r.next.RoundTrip(req)
}

func (c *Counter) observe(req *http.Request) {
	info, err := c.factory.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return
	}
	k := Key{Verb: info.Verb, Resource: info.Resource}
	if info.Subresource != "" {
		k.Resource += "/" + info.Subresource
	}
	if k.Verb == VerbPatch && strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
		k.Verb = VerbApply
	}
	c.mu.Lock()
	c.counts[k]++
	c.mu.Unlock()
	if c.metric != nil {
		c.metric.WithLabelValues(k.Verb, k.Resource).Inc()
	}
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := make(Snapshot, len(c.counts))
	for k, v := range c.counts {
		s[k] = v
	}
	return s
}

// Snapshot is a copy of the counts at one moment.
type Snapshot map[Key]int64

// Sub returns the requests counted in s but not in before: the traffic of a phase.
func (s Snapshot) Sub(before Snapshot) Snapshot {
	out := Snapshot{}
	for k, v := range s {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Sum adds up the requests that match.
func (s Snapshot) Sum(match func(Key) bool) int64 {
	var n int64
	for k, v := range s {
		if match == nil || match(k) {
			n += v
		}
	}
	return n
}

// Writes is the number of requests that change state.
func (s Snapshot) Writes() int64 { return s.Sum(Key.IsWrite) }

// Reads is the number of GET and LIST requests.
func (s Snapshot) Reads() int64 { return s.Sum(Key.IsRead) }

// Total is the number of requests of any kind.
func (s Snapshot) Total() int64 { return s.Sum(nil) }

// String lists the counts, one "verb resource=n" per line, sorted, for test failure messages.
func (s Snapshot) String() string {
	lines := make([]string, 0, len(s))
	for k, v := range s {
		lines = append(lines, k.Verb+" "+k.Resource+"="+strconv.FormatInt(v, 10))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
