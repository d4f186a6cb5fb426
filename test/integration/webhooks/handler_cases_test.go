package webhooks_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

// The handler cases (test/support/admissiontable), created through the API server with the
// webhooks installed, are refused with the handler's message (or the API server's own, APIWant);
// the fixtures themselves pass.
func TestBadObjectsRefusedByTheAPIServer(t *testing.T) {
	s := startWebhooks(t)
	setupNamespace(t, s, admissiontable.Namespace)
	for _, tc := range admissiontable.HandlerCases() {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			u := &unstructured.Unstructured{}
			g.Expect(yaml.Unmarshal([]byte(tc.Object), &u.Object)).To(Succeed())
			u.SetNamespace(admissiontable.Namespace)
			err := env.Client.Create(context.Background(), u, client.DryRunAll, client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred())
			want := tc.Want
			if tc.APIWant != nil {
				want = tc.APIWant
			}
			for _, w := range want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
	t.Run("valid objects pass", func(t *testing.T) {
		g := NewWithT(t)
		f := loadBase(t, admissiontable.Namespace)
		for _, obj := range []client.Object{f.Terse, f.Cluster, &f.Profiles[0]} {
			obj.SetName("valid")
			g.Expect(env.Client.Create(context.Background(), obj, client.DryRunAll)).To(Succeed())
		}
	})
}
