package traffic

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountsByVerbAndResource(t *testing.T) {
	cases := []struct {
		method, url, contentType string
		want                     Key
	}{
		{"GET", "/api/v1/namespaces/ns/secrets/s1", "", Key{VerbGet, "secrets"}},
		{"GET", "/api/v1/namespaces/ns/secrets", "", Key{VerbList, "secrets"}},
		{"GET", "/api/v1/secrets?watch=true", "", Key{VerbWatch, "secrets"}},
		{"POST", "/apis/apps/v1/namespaces/ns/statefulsets", "application/json", Key{VerbCreate, "statefulsets"}},
		{"PATCH", "/apis/tiled.blueskyproject.io/v1alpha1/namespaces/ns/tiledinstances/a", "application/apply-patch+yaml", Key{VerbApply, "tiledinstances"}},
		{"PATCH", "/apis/tiled.blueskyproject.io/v1alpha1/namespaces/ns/tiledclusters/a/status", "application/apply-patch+yaml", Key{VerbApply, "tiledclusters/status"}},
		{"PATCH", "/api/v1/namespaces/ns/events/e", "application/strategic-merge-patch+json", Key{VerbPatch, "events"}},
		{"PUT", "/api/v1/namespaces/ns/configmaps/c", "application/json", Key{VerbUpdate, "configmaps"}},
		{"DELETE", "/api/v1/namespaces/ns/persistentvolumeclaims/p", "", Key{VerbDelete, "persistentvolumeclaims"}},
	}
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	c := New(reg)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer server.Close()
	client := &http.Client{Transport: roundTripper{next: http.DefaultTransport, counter: c}}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, server.URL+tc.url, strings.NewReader(""))
		g.Expect(err).NotTo(HaveOccurred())
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		resp, err := client.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
	}
	// A non-resource request (discovery, healthz) is not counted.
	resp, err := client.Get(server.URL + "/healthz")
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()

	s := c.Snapshot()
	for _, tc := range cases {
		g.Expect(s).To(HaveKeyWithValue(tc.want, int64(1)), "%s %s", tc.method, tc.url)
	}
	g.Expect(s.Total()).To(Equal(int64(len(cases))))
	g.Expect(s.Reads()).To(Equal(int64(2)))
	g.Expect(s.Writes()).To(Equal(int64(6)))
	g.Expect(testutil.ToFloat64(c.metric.WithLabelValues(VerbApply, "tiledinstances"))).To(Equal(1.0))

	before := c.Snapshot()
	resp, err = client.Get(server.URL + "/api/v1/namespaces/ns/secrets")
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(c.Snapshot().Sub(before)).To(Equal(Snapshot{{VerbList, "secrets"}: 1}))
}
