package childset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/applier"
)

// apiServer stands in for the API server's answer to the applier's applies: it stores each object
// with a new resourceVersion and a managedFields entry of the field owner, or answers with the
// errors queued for its name (one per attempt). What the real API server does is tested in the
// integration suites; here only the engine's handling of the answers is.
type apiServer struct {
	client.Client
	mu       sync.Mutex
	rv       int
	errs     map[string][]error
	delay    time.Duration // how long an apply that succeeds takes
	attempts []string
	stored   map[string]*metav1.PartialObjectMetadata
}

func newAPIServer() *apiServer {
	return &apiServer{errs: map[string][]error{}, stored: map[string]*metav1.PartialObjectMetadata{}}
}

func (s *apiServer) Patch(_ context.Context, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
	s.mu.Lock()
	name := obj.GetName()
	s.attempts = append(s.attempts, name)
	if q := s.errs[name]; len(q) > 0 {
		s.errs[name] = q[1:]
		if q[0] != nil {
			s.mu.Unlock()
			return q[0]
		}
	}
	delay := s.delay
	s.mu.Unlock()
	time.Sleep(delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return err
	}
	s.rv++
	m := obj.(*metav1.PartialObjectMetadata)
	m.SetResourceVersion(fmt.Sprint(s.rv))
	m.SetGeneration(int64(s.rv))
	m.SetAnnotations(u.GetAnnotations())
	m.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "tiled-operator", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
		FieldsV1: metav1.NewFieldsV1(fmt.Sprintf(`{"f:data":{"f:value":%q}}`, u.Object["data"]))}})
	s.stored[name] = m.DeepCopy()
	return nil
}

// cached is the object name as an informer cache shows it after the server stored it.
func (s *apiServer) cached(name string) client.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored[name].DeepCopy()
}

// configMaps is a set of ConfigMaps with the given names, read from current.
type configMaps struct {
	names    []string
	current  map[string]client.Object
	buildErr map[string]error
}

func (s configMaps) object(i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": s.names[i], "namespace": "ns"},
		"data":     map[string]any{"value": "v-" + s.names[i]},
	}}
}

func (s configMaps) Len() int { return len(s.names) }
func (s configMaps) Prepared(i int) applier.Prepared {
	p, err := applier.PrepareUnstructured(s.object(i))
	if err != nil {
		panic(err)
	}
	return p
}
func (s configMaps) Build(i int) (runtime.ApplyConfiguration, error) {
	if err := s.buildErr[s.names[i]]; err != nil {
		return nil, err
	}
	return client.ApplyConfigurationFromUnstructured(s.object(i)), nil
}
func (s configMaps) Current(_ context.Context, i int) (client.Object, error) {
	if o, ok := s.current[s.names[i]]; ok {
		return o, nil
	}
	return nil, nil
}

func key(name string) applier.Key {
	return applier.Key{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name}
}

var (
	invalid     = apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "b", field.ErrorList{field.Invalid(field.NewPath("data"), "x", "no")})
	conflict    = apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "b", errors.New("modified"))
	unavailable = apierrors.NewServiceUnavailable("etcd")
	errBuild    = errors.New("cannot build")
)

// TestApply: the children are applied in order under the options' strategy; refusals stop the set
// or are recorded, a conflict is tried once more when asked, any other error stops the set and is
// returned as it is, and the record says what was applied.
func TestApply(t *testing.T) {
	abc := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name         string
		opts         Options
		errs         map[string][]error
		buildErr     map[string]error
		wantAttempts []string
		wantErr      func(Gomega, error)
		wantApplied  []string
		wantRefused  []Refused
	}{
		{name: "in order, all applied", opts: Options{Record: true},
			wantAttempts: abc, wantApplied: abc},
		{name: "the first refusal stops the set", opts: Options{Record: true}, errs: map[string][]error{"b": {invalid}},
			wantAttempts: []string{"a", "b"}, wantErr: func(g Gomega, err error) {
				var refused *RefusedError
				g.Expect(errors.As(err, &refused)).To(BeTrue())
				g.Expect(refused.Key).To(Equal(key("b")))
				g.Expect(refused.Reason).To(Equal("invalid"))
				g.Expect(err.Error()).To(HavePrefix("the API server refuses the change to ConfigMap/ns/b (invalid; objects before it in order were applied"))
			}},
		{name: "refusals recorded, the others go on", opts: Options{Record: true, ContinueOnRefusal: true}, errs: map[string][]error{"b": {invalid}},
			wantAttempts: abc, wantApplied: []string{"a", "c"}, wantRefused: []Refused{{Index: 1, Key: key("b"), Reason: "invalid"}}},
		{name: "a conflict tried once more", opts: Options{Record: true, RetryConflict: true}, errs: map[string][]error{"b": {conflict}},
			wantAttempts: []string{"a", "b", "b", "c"}, wantApplied: abc},
		{name: "a conflict that outlives the retry is a refusal", opts: Options{RetryConflict: true, ContinueOnRefusal: true},
			errs: map[string][]error{"b": {conflict, conflict}}, wantAttempts: []string{"a", "b", "b", "c"},
			wantRefused: []Refused{{Index: 1, Key: key("b"), Reason: "conflict"}}},
		{name: "without the retry a conflict is a refusal at once", opts: Options{ContinueOnRefusal: true}, errs: map[string][]error{"b": {conflict}},
			wantAttempts: abc, wantRefused: []Refused{{Index: 1, Key: key("b"), Reason: "conflict"}}},
		{name: "a transient error stops the set, as it is", opts: Options{ContinueOnRefusal: true}, errs: map[string][]error{"b": {unavailable}},
			wantAttempts: []string{"a", "b"}, wantErr: func(g Gomega, err error) {
				g.Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "%v", err)
			}},
		{name: "a build error is returned as it is", opts: Options{ContinueOnRefusal: true}, buildErr: map[string]error{"b": errBuild},
			wantAttempts: []string{"a"}, wantErr: func(g Gomega, err error) { g.Expect(err).To(BeIdenticalTo(errBuild)) }},
		{name: "skipped children are left out", opts: Options{Record: true, Skip: func(i int) bool { return i == 1 }},
			wantAttempts: []string{"a", "c"}, wantApplied: []string{"a", "c"}},
		{name: "without Record, no maps", opts: Options{}, wantAttempts: abc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := newAPIServer()
			for k, v := range tc.errs {
				s.errs[k] = v
			}
			a := applier.New(s, "tiled-operator", nil)
			var after []string
			tc.opts.AfterApply = func(_ context.Context, current client.Object) error {
				g.Expect(current).To(BeNil(), "nothing was in the cache")
				after = append(after, "x")
				return nil
			}
			rec, err := Apply(context.Background(), a, configMaps{names: abc, buildErr: tc.buildErr}, tc.opts)
			g.Expect(s.attempts).To(Equal(tc.wantAttempts))
			if tc.wantErr != nil {
				g.Expect(err).To(HaveOccurred())
				tc.wantErr(g, err)
				g.Expect(rec).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.opts.Record {
				g.Expect(rec.Applied).To(HaveLen(len(tc.wantApplied)))
				for _, n := range tc.wantApplied {
					g.Expect(rec.Applied).To(HaveKey(key(n)))
				}
				g.Expect(rec.Unsent).To(BeEmpty(), "every child was sent")
			} else {
				g.Expect(rec.Applied).To(BeNil())
				g.Expect(rec.Unsent).To(BeNil())
			}
			g.Expect(after).To(HaveLen(len(abc)-skipped(tc.opts, len(abc))-len(tc.wantRefused)),
				"AfterApply runs once for every child applied, not for a skipped or refused one")
			g.Expect(rec.Refused).To(HaveLen(len(tc.wantRefused)))
			for i, want := range tc.wantRefused {
				got := rec.Refused[i]
				g.Expect(got.Index).To(Equal(want.Index))
				g.Expect(got.Key).To(Equal(want.Key))
				g.Expect(got.Reason).To(Equal(want.Reason))
				g.Expect(got.Err).To(HaveOccurred())
			}
		})
	}
}

func skipped(o Options, n int) int {
	s := 0
	for i := range n {
		if o.Skip != nil && o.Skip(i) {
			s++
		}
	}
	return s
}

// TestApplyRecordsWhatWasNotSent: a child whose intent the cache already shows is not sent, and the
// record keeps it as the cache showed it, with its generation; a child created a moment ago that the
// cache does not show yet is not sent either, and the record says when to look for it again.
func TestApplyRecordsWhatWasNotSent(t *testing.T) {
	g := NewWithT(t)
	s := newAPIServer()
	a := applier.New(s, "tiled-operator", nil)
	set := configMaps{names: []string{"a", "b"}, current: map[string]client.Object{}}
	_, err := Apply(context.Background(), a, set, Options{Record: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.attempts).To(HaveLen(2))

	set.current["a"] = s.cached("a") // b: not in the cache yet
	var seen []client.Object
	rec, err := Apply(context.Background(), a, set, Options{Record: true, AfterApply: func(_ context.Context, c client.Object) error {
		seen = append(seen, c)
		return nil
	}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.attempts).To(HaveLen(2), "nothing sent again")
	g.Expect(rec.Unsent).To(HaveLen(1))
	g.Expect(rec.Unsent[key("a")]).To(BeIdenticalTo(set.current["a"]))
	g.Expect(rec.Applied).To(HaveKeyWithValue(key("a"), int64(1)))
	g.Expect(rec.Applied).To(HaveKeyWithValue(key("b"), int64(2)))
	g.Expect(rec.Recheck).To(BeNumerically(">", 0), "b was created a moment ago and the cache does not show it")
	g.Expect(seen).To(Equal([]client.Object{set.current["a"], nil}), "AfterApply sees each child as the cache showed it")
}

// TestApplyConcurrently: with several workers every child is applied once, the refusals are
// recorded in the set's order whatever order the workers finish in, and an error stops the set.
func TestApplyConcurrently(t *testing.T) {
	g := NewWithT(t)
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("i%02d", i))
	}
	s := newAPIServer()
	for _, n := range []string{"i07", "i03", "i31"} {
		s.errs[n] = []error{invalid}
	}
	a := applier.New(s, "tiled-operator", nil)
	rec, err := Apply(context.Background(), a, configMaps{names: names}, Options{Workers: 4, ContinueOnRefusal: true, Group: "ns/c"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.attempts).To(ConsistOf(names))
	g.Expect(rec.Refused).To(HaveLen(3))
	g.Expect([]int{rec.Refused[0].Index, rec.Refused[1].Index, rec.Refused[2].Index}).To(Equal([]int{3, 7, 31}))
	g.Expect(a.Len()).To(Equal(37), "the applied children are remembered")
	a.ForgetGroup("ns/c")
	g.Expect(a.Len()).To(BeZero(), "under the group given")

	s = newAPIServer()
	s.errs["i00"] = []error{unavailable}
	s.delay = 20 * time.Millisecond
	a = applier.New(s, "tiled-operator", nil)
	_, err = Apply(context.Background(), a, configMaps{names: names}, Options{Workers: 4, ContinueOnRefusal: true})
	g.Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "%v", err)
	g.Expect(len(s.attempts)).To(BeNumerically("<", len(names)), "no child is started after the error is seen")
}
