package controllers_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// responseRecorder counts the responses a client received, and those that came compressed (the
// transport asked for gzip and decoded it: Uncompressed, or a Content-Encoding left in place).
type responseRecorder struct {
	mu         sync.Mutex
	total      int
	compressed []string
}

// wrap is a rest.Config's WrapTransport: every transport the manager builds reports to r.
func (r *responseRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) { return r.record(req, next) })
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *responseRecorder) record(req *http.Request, next http.RoundTripper) (*http.Response, error) {
	resp, err := next.RoundTrip(req)
	if resp != nil {
		r.mu.Lock()
		r.total++
		if resp.Uncompressed || resp.Header.Get("Content-Encoding") != "" {
			r.compressed = append(r.compressed, req.Method+" "+req.URL.RequestURI())
		}
		r.mu.Unlock()
	}
	return resp, err
}

// The operator asks the API server for no compression (as kube-controller-manager does): its
// informers' initial lists and every watch event it receives during a stamp-out come plain.
func TestOperatorRequestsNoCompression(t *testing.T) {
	g := NewWithT(t)
	rec := &responseRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = rec.wrap

	stampOutWith(t, g, cfg, "compression")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	g.Expect(rec.total).To(BeNumerically(">", 20), "the recorder saw the operator's requests")
	g.Expect(rec.compressed).To(BeEmpty(), "responses the API server compressed for the operator")
}

// stampOutWith starts the operator on cfg, watching a new namespace (named from prefix), and stamps
// out a TiledCluster of three beamlines there with the fleet's profiles; it returns when the
// instances are stamped out.
func stampOutWith(t *testing.T, g Gomega, cfg *rest.Config, prefix string) {
	t.Helper()
	ctx := ctxT(t)
	ns, err := fleet.NewNamespace(ctx, env.Client, prefix)
	g.Expect(err).NotTo(HaveOccurred())
	startOperatorWith(t, cfg, ns)

	names, err := fleet.Beamlines(3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleet.Create(ctx, env.Client, fleet.ProfileObjects(fleet.Profiles(ns))...)).To(Succeed())
	g.Expect(env.Client.Create(ctx, fleet.Cluster(ns, "nsls2", names))).To(Succeed())
	err = fleet.Poll(ctx, 200*time.Millisecond, time.Minute, "stamp-out", func(ctx context.Context) (bool, error) {
		return fleet.StampedOut(ctx, env.Client, ns, "nsls2", len(names))
	})
	if err != nil {
		// What the stamp-out came to: the instances, their generations and conditions.
		var tis tiledv1alpha1.TiledInstanceList
		_ = env.Client.List(ctx, &tis, client.InNamespace(ns))
		for _, ti := range tis.Items {
			t.Logf("instance %s: generation %d, observed %d, conditions %v", ti.Name, ti.Generation, ti.Status.ObservedGeneration, ti.Status.Conditions)
		}
		var c tiledv1alpha1.TiledCluster
		_ = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nsls2"}, &c)
		t.Logf("cluster: generation %d, status %+v", c.Generation, c.Status)
		buf := make([]byte, 64<<20)
		buf = buf[:runtime.Stack(buf, true)]
		_ = os.WriteFile(filepath.Join(os.TempDir(), "stampout-goroutines.txt"), buf, 0o644)
		t.Logf("goroutines written to %s", filepath.Join(os.TempDir(), "stampout-goroutines.txt"))
	}
	g.Expect(err).To(Succeed())
}
