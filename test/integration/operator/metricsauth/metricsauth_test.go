package metricsauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/bluesky/tiled-operator/operator/metricsauth"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{SkipCRDs: true}, &env))
}

// token creates a ServiceAccount in the default namespace and returns a token for it; with
// reader, the ServiceAccount may get /metrics (a ClusterRole like config/rbac's metrics reader).
func token(t *testing.T, name string, reader bool) string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	cs := env.Clientset
	_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	if reader {
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name + "-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// serve returns a server whose /metrics and /other answer "ok" behind the filter, and the counter
// of the requests the filter sent to the API server.
func serve(t *testing.T) (*httptest.Server, *traffic.Counter) {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	counter := traffic.New(nil)
	counter.Instrument(cfg)
	httpClient, err := rest.HTTPClientFor(cfg)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	filter, err := metricsauth.FilterProvider(cfg, httpClient)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var served atomic.Int32
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, counter
}

func get(t *testing.T, srv *httptest.Server, path, authorization string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := srv.Client().Do(req)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	return resp.StatusCode
}

// The API server decides: a token it accepts, of a user its RBAC lets get /metrics, is served;
// no token or one it refuses gets 401; a user without the permission, or a path it does not cover,
// gets 403.
func TestMetricsAccessIsTheAPIServersDecision(t *testing.T) {
	reader, stranger := token(t, "prometheus", true), token(t, "stranger", false)
	srv, _ := serve(t)
	for _, tc := range []struct {
		name, path, authorization string
		want                      int
	}{
		{"an authorized ServiceAccount", "/metrics", "Bearer " + reader, http.StatusOK},
		{"the scheme in lower case", "/metrics", "bearer " + reader, http.StatusOK},
		{"no Authorization header", "/metrics", "", http.StatusUnauthorized},
		{"not a bearer token", "/metrics", "Basic dXNlcjpwYXNz", http.StatusUnauthorized},
		{"an empty token", "/metrics", "Bearer ", http.StatusUnauthorized},
		{"a token the API server refuses", "/metrics", "Bearer not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without the permission", "/metrics", "Bearer " + stranger, http.StatusForbidden},
		{"a path the permission does not cover", "/other", "Bearer " + reader, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(get(t, srv, tc.path, tc.authorization)).To(Equal(tc.want))
		})
	}
}

// Answers are cached: scrapes with the same token send one TokenReview and one
// SubjectAccessReview in all, and a refused token is not reviewed again within its TTL.
func TestReviewsAreCached(t *testing.T) {
	g := NewWithT(t)
	reader := token(t, "scraper", true)
	srv, counter := serve(t)
	for range 5 {
		g.Expect(get(t, srv, "/metrics", "Bearer "+reader)).To(Equal(http.StatusOK))
	}
	snap := counter.Snapshot()
	g.Expect(snap.Total()).To(Equal(int64(2)), "requests to the API server: %v", snap)
	for range 3 {
		g.Expect(get(t, srv, "/metrics", "Bearer bogus")).To(Equal(http.StatusUnauthorized))
	}
	g.Expect(counter.Snapshot().Total()).To(Equal(int64(3)), "a refused token is reviewed once")
}
