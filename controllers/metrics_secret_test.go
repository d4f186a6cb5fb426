package controllers

import (
	"context"
	"math/rand"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// TestMetricsSecretData: the metrics Secret's token is taken from the Secret as the cache holds it,
// else from what was last applied for the same instance (the cache may lag behind an apply), and
// generated only when neither has one; an instance without a ServiceMonitor generates nothing and
// keeps an existing metrics Secret's data as it is. The token never enters the instance's own Secret.
func TestMetricsSecretData(t *testing.T) {
	const uid = "uid-1"
	instance := func(monitor bool) *tiledv1alpha1.TiledInstance {
		return &tiledv1alpha1.TiledInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: "beamlines", Name: "csx", UID: uid},
			Spec: tiledv1alpha1.TiledInstanceSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Auth:       &tiledv1alpha1.AuthSpec{SingleUserAPIKey: &tiledv1alpha1.SingleUserAPIKey{}},
				Monitoring: &tiledv1alpha1.MonitoringSpec{ServiceMonitor: ptr.To(monitor)},
			}},
		}
	}
	metricsSecret := func(token string) client.Object {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "beamlines", Name: names.For("beamlines", "csx").MetricsSecret},
			Data:       map[string][]byte{render.SecretKeyMetricsToken: []byte(token)},
		}
	}
	cases := []struct {
		name       string
		monitor    bool
		objects    []client.Object
		remembered *instanceSecrets
		want       string // "" = nil data; "new" = a generated token
	}{
		{name: "no ServiceMonitor, no Secret: no data", monitor: false},
		{name: "no ServiceMonitor, the Secret exists: kept as it is (Secrets are not pruned)", monitor: false,
			objects: []client.Object{metricsSecret("earlier0token")}, want: "earlier0token"},
		{name: "first time: generated", monitor: true, want: "new"},
		{name: "the Secret exists: its token kept", monitor: true, objects: []client.Object{metricsSecret("existing0token")}, want: "existing0token"},
		{name: "the cache lags: the token last applied", monitor: true,
			remembered: &instanceSecrets{uid: uid, metrics: map[string][]byte{render.SecretKeyMetricsToken: []byte("applied0token")}}, want: "applied0token"},
		{name: "remembered for another instance of the name: generated", monitor: true,
			remembered: &instanceSecrets{uid: "uid-0", metrics: map[string][]byte{render.SecretKeyMetricsToken: []byte("other0token")}}, want: "new"},
		{name: "the Secret wins over memory", monitor: true, objects: []client.Object{metricsSecret("existing0token")},
			remembered: &instanceSecrets{uid: uid, metrics: map[string][]byte{render.SecretKeyMetricsToken: []byte("applied0token")}}, want: "existing0token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
			g.Expect(tiledv1alpha1.AddToScheme(scheme)).To(Succeed())
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()
			r := &TiledInstanceReconciler{Client: c, Random: rand.New(rand.NewSource(1))}
			if tc.remembered != nil {
				r.memories.secrets.store(types.NamespacedName{Namespace: "beamlines", Name: "csx"}, *tc.remembered)
			}
			ti := instance(tc.monitor)
			cur := &instanceState{c: c, api: c, ti: ti}

			data, err := r.metricsSecretData(context.Background(), cur, ti)
			g.Expect(err).NotTo(HaveOccurred())
			switch tc.want {
			case "":
				g.Expect(data).To(BeNil())
			case "new":
				g.Expect(data).To(HaveLen(1))
				g.Expect(string(data[render.SecretKeyMetricsToken])).To(MatchRegexp(`^[A-Za-z0-9]{48}$`))
				again, err := r.metricsSecretData(context.Background(), cur, ti)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(again[render.SecretKeyMetricsToken]).NotTo(Equal(data[render.SecretKeyMetricsToken]),
					"without a Secret or a memory of one, each call generates: the apply's memory is what keeps it")
			default:
				g.Expect(data).To(Equal(map[string][]byte{render.SecretKeyMetricsToken: []byte(tc.want)}))
			}

			main, err := r.secretData(context.Background(), cur, ti)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(main).NotTo(HaveKey(render.SecretKeyMetricsToken))
			g.Expect(main).To(HaveKey(render.SecretKeyAPIKey))
		})
	}
}
