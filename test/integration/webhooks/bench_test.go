package webhooks_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// BenchmarkAdmission admits the terse instance of webhooks/testdata, which selects five profiles (two with
// expressions), and reports the latency percentiles of single admissions:
//
//   - handler: the mutating handler called directly, profiles read from the manager's cache;
//   - apiserver: a server-side dry-run create through the real kube-apiserver, which calls the
//     mutating and the validating webhook over TLS (the whole request as kubectl sees it).
func BenchmarkAdmission(b *testing.B) {
	s := startWebhooks(b)
	f := setupNamespace(b, s, "bench")
	ctx := context.Background()
	report := func(b *testing.B, d []time.Duration) {
		slices.Sort(d)
		pct := func(p float64) float64 {
			return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds())
		}
		b.ReportMetric(pct(0.50), "p50-µs")
		b.ReportMetric(pct(0.99), "p99-µs")
	}
	b.Run("handler", func(b *testing.B) {
		raw, err := json.Marshal(f.Terse)
		if err != nil {
			b.Fatal(err)
		}
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "bench", Operation: admissionv1.Create, Name: f.Terse.Name, Namespace: f.Terse.Namespace,
			Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "TiledInstance"},
			Object: runtime.RawExtension{Raw: raw},
		}}
		d := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			resp := s.hooks.InstanceDefaulter.Handle(ctx, req)
			d = append(d, time.Since(start))
			if !resp.Allowed || len(resp.Patches) == 0 {
				b.Fatalf("not expanded: %+v", resp.Result)
			}
		}
		report(b, d)
	})
	b.Run("apiserver", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			in := f.Terse.DeepCopy()
			start := time.Now()
			err := env.Client.Create(ctx, in, client.DryRunAll)
			d = append(d, time.Since(start))
			if err != nil || len(in.Provenance) == 0 {
				b.Fatalf("not expanded: %v", err)
			}
		}
		report(b, d)
	})
}
