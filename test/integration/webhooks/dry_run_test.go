package webhooks_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

// A server-side dry run of the terse instance prints it expanded, as the engine expands it offline,
// and stores nothing; applying it for real and updating it unchanged keeps its resourceVersion (the
// webhook's patch is empty).
func TestDryRunPrintsExpandedInstance(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	f := setupNamespace(t, s, "dry-run")
	ctx := context.Background()

	out, stderr, err := env.Kubectl(ctx, "apply", "--dry-run=server", "-o", "yaml", "-n", "dry-run",
		"-f", admissiontable.Testdata("terse-instance.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	got := &v1alpha1.TiledInstance{}
	g.Expect(yaml.Unmarshal([]byte(out), got)).To(Succeed())
	want, err := expansion.ExpandInstance(f.Terse, f.Profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Spec).To(Equal(want.Spec))
	g.Expect(got.Provenance).To(Equal(want.Provenance))
	g.Expect(out).To(ContainSubstring("spec.tiled.env[name=BEAMLINE].value: instance (expression)"))
	g.Expect(out).To(ContainSubstring("host: demo.tiled.nsls2.bnl.gov"))

	// Nothing stored.
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: "dry-run", Name: "demo"}, &v1alpha1.TiledInstance{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)

	// Stored for real, then updated unchanged: the webhook's patch is empty, so the API server sees
	// no change and keeps the resourceVersion.
	_, stderr, err = env.Kubectl(ctx, "apply", "--server-side", "-n", "dry-run", "-f", admissiontable.Testdata("terse-instance.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	stored := &v1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "dry-run", Name: "demo"}, stored)).To(Succeed())
	g.Expect(stored.Spec).To(Equal(want.Spec))
	rv := stored.ResourceVersion
	g.Expect(env.Client.Update(ctx, stored)).To(Succeed())
	g.Expect(stored.ResourceVersion).To(Equal(rv))
	_, stderr, err = env.Kubectl(ctx, "apply", "--server-side", "-n", "dry-run", "-f", admissiontable.Testdata("terse-instance.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "dry-run", Name: "demo"}, stored)).To(Succeed())
	g.Expect(stored.ResourceVersion).To(Equal(rv))
}
