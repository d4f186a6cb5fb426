package kubectltiled_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestExpandRefusesWhatTheAPIServerRefuses creates objects with bad metadata, or a value that is no
// quantity, on a real kube-apiserver, and expands the same files offline: expand refuses each,
// naming the object and the field, with the API server's own words (metadata) or the field and the
// value the server names (a quantity: offline, the layer that sets it comes first).
func TestExpandRefusesWhatTheAPIServerRefuses(t *testing.T) {
	ctx := context.Background()
	const ns = "refusals"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	const head = "apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledInstance\n"
	for _, tc := range []struct {
		name, doc string
		// same is the part of the server's refusal that expand prints too; "" for all of the field's
		// error (what follows "is invalid: ").
		same string
	}{
		{name: "label value of 64 characters", doc: head + "metadata: {name: demo, labels: {team: " + strings.Repeat("a", 64) + "}}\nspec: {}\n"},
		{name: "label key with a space", doc: head + "metadata: {name: demo, labels: {\"bad key\": x}}\nspec: {}\n"},
		{name: "annotation key Bad Key!", doc: head + "metadata: {name: demo, annotations: {\"Bad Key!\": v}}\nspec: {}\n"},
		{name: "memory that is not a quantity", doc: head + "metadata: {name: demo}\nspec: {tiled: {resources: {requests: {memory: 12 Gi}}}}\n",
			same: `spec.tiled.resources.requests.memory: Invalid value: "12 Gi"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			u := &unstructured.Unstructured{}
			g.Expect(yaml.Unmarshal([]byte(tc.doc), &u.Object)).To(Succeed())
			u.SetNamespace(ns)
			err := env.Client.Create(ctx, u)
			g.Expect(err).To(HaveOccurred(), "the API server admitted it")
			_, server, found := strings.Cut(err.Error(), "is invalid: ")
			g.Expect(found).To(BeTrue(), err.Error())
			want := tc.same
			if want == "" {
				want = server
			}
			g.Expect(server).To(ContainSubstring(want))

			file := filepath.Join(t.TempDir(), "bad.yaml")
			g.Expect(os.WriteFile(file, []byte(tc.doc), 0o600)).To(Succeed())
			code, out, stderr := runPlugin(t, "expand", "-n", ns, "-f", file)
			g.Expect(code).To(Equal(1))
			g.Expect(out).To(BeEmpty())
			g.Expect(stderr).To(ContainSubstring("TiledInstance/demo: "), "the object")
			g.Expect(stderr).To(ContainSubstring(want), "the server said: %s", server)
		})
	}
}
