package kubectltiled_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var (
	env *testenv.Env
	// plugin is the kubectl-tiled binary built from this checkout.
	plugin string

	// The GitOps folder of the plugin's tests, and the NSLS-II sample of the expansion package.
	gitopsBase   = filepath.Join(testenv.RepoRoot(), "cmd", "kubectl-tiled", "testdata", "gitops", "base")
	gitopsBump   = filepath.Join(testenv.RepoRoot(), "cmd", "kubectl-tiled", "testdata", "gitops", "overlays", "bump")
	fleetProfile = filepath.Join(testenv.RepoRoot(), "expansion", "testdata", "fleet", "profiles.yaml")
)

// TestMain builds the plugin, then runs the tests on the real control plane.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubectl-tiled-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plugin = filepath.Join(dir, "kubectl-tiled")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-tiled")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kubectl-tiled: %v\n%s", err, out)
		os.Exit(1)
	}
	code := testenv.Run(m, testenv.Options{}, &env)
	os.RemoveAll(dir)
	os.Exit(code)
}

// runPlugin runs kubectl-tiled with args, without the user's kubeconfig, and returns its exit status
// and output.
func runPlugin(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(plugin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "no-kubeconfig"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// applyAsOperator applies in server-side under the operator's field manager, as its cluster
// controller applies the instances it stamps out.
func applyAsOperator(ctx context.Context, c client.Client, in *v1alpha1.TiledInstance) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(in)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	for _, f := range []string{"creationTimestamp", "generation", "resourceVersion", "uid"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(v1alpha1.FieldOwner), client.ForceOwnership)
}

// TestDiffAgainstTheAPIServer runs diff against a real kube-apiserver holding the live state of
// testdata/diff/live.yaml, with the instances stored as the operator (and its webhook) store them.
func TestDiffAgainstTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "nsls2"
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

	f, err := os.Open(filepath.Join("testdata", "diff", "live.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := expansion.DecodeAll("live.yaml", f)
	f.Close()
	g.Expect(err).NotTo(HaveOccurred())
	var profiles []v1alpha1.TiledProfile
	var cluster *v1alpha1.TiledCluster
	var standalone *v1alpha1.TiledInstance
	for _, o := range objs {
		o.(client.Object).SetNamespace(ns)
		switch o := o.(type) {
		case *v1alpha1.TiledProfile:
			g.Expect(env.Client.Create(ctx, o)).To(Succeed())
			profiles = append(profiles, *o)
		case *v1alpha1.TiledCluster:
			g.Expect(env.Client.Create(ctx, o)).To(Succeed())
			cluster = o
		case *v1alpha1.TiledInstance:
			standalone = o
		}
	}
	res, err := expansion.Expand(cluster, profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	// Applied as the operator applies them: server-side, under its field manager.
	for _, in := range res.Objects() {
		g.Expect(applyAsOperator(ctx, env.Client, in)).To(Succeed(), in.Name)
	}
	expanded, err := expansion.ExpandInstance(standalone, profiles, expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Create(ctx, expanded)).To(Succeed())

	// Exit status as kubectl diff's: 0 no differences, 1 differences, 2 an error.
	for _, tc := range []struct {
		name, file string
		args       []string // instead of -f testdata/diff/<file>
		code       int
		want       []string
		notWant    []string
	}{
		{name: "unchanged GitOps base", args: []string{"-k", gitopsBase}, code: 0, want: []string{
			"TiledInstance nsls2/nsls2-chx (cluster nsls2): no change\n",
			"TiledInstance nsls2/nsls2-csx (cluster nsls2): no change\n",
			`note: skipped Namespace "nsls2"`, `note: skipped Secret "tiled-chx-orcid"`,
		}, notWant: []string{"field(s) changed"}},
		{name: "GitOps overlay", args: []string{"-k", gitopsBump}, code: 1, want: []string{
			"TiledInstance nsls2/nsls2-chx (cluster nsls2): 1 field(s) changed\n",
			`  ~ spec.tiled.image: "ghcr.io/bluesky/tiled:0.2.20" -> "ghcr.io/bluesky/tiled:0.2.21"  (profile/facility@1 -> profile/facility@2)`,
			"TiledInstance nsls2/demo (standalone): 1 field(s) changed\n",
		}},
		{name: "changed profile", file: "changed-profile.yaml", code: 1, want: []string{
			"TiledInstance nsls2/nsls2-chx (cluster nsls2): 2 field(s) changed\n",
			`  ~ spec.tiled.image: "ghcr.io/bluesky/tiled:0.2.20" -> "ghcr.io/bluesky/tiled:0.2.21"  (profile/facility@1 -> profile/facility@2)`,
			`  ~ spec.storage.data.size: "50Gi" -> "100Gi"  (profile/facility@1 -> profile/facility@2)`,
			"(2 more field(s) keep their value but change source)",
			// csx overrides the size: only the image changes.
			"TiledInstance nsls2/nsls2-csx (cluster nsls2): 1 field(s) changed\n",
			"TiledInstance nsls2/demo (standalone): 1 field(s) changed\n",
			`  ~ spec.tiled.image: "ghcr.io/bluesky/tiled:0.2.20" -> "ghcr.io/bluesky/tiled:0.2.21"`,
		}, notWant: []string{`"5Gi" ->`}},
		{name: "changed profile, -o name", args: []string{"-f", filepath.Join("testdata", "diff", "changed-profile.yaml"), "-o", "name"}, code: 1, want: []string{
			"tiledinstance.tiled.blueskyproject.io/nsls2-chx\ntiledinstance.tiled.blueskyproject.io/nsls2-csx\ntiledinstance.tiled.blueskyproject.io/demo\n",
		}, notWant: []string{"field(s) changed"}},
		{name: "changed cluster, -o yaml", args: []string{"-f", filepath.Join("testdata", "diff", "changed-cluster.yaml"), "-o", "yaml"}, code: 1, want: []string{
			"  name: nsls2-iss\n", "spec.monitoring.interval: instance/chx/overrides\n",
			"TiledInstance nsls2/nsls2-csx (cluster nsls2): deleted\n",
		}, notWant: []string{"managedFields", "field(s) changed", "name: nsls2-csx"}},
		{name: "changed cluster", file: "changed-cluster.yaml", code: 1, want: []string{
			"TiledInstance nsls2/nsls2-chx (cluster nsls2): 1 field(s) changed\n",
			`  ~ spec.monitoring.interval: "15s" -> "60s"  (profile/monitoring@1 -> instance/chx/overrides)`,
			"TiledInstance nsls2/nsls2-iss (cluster nsls2): created\n",
			"TiledInstance nsls2/nsls2-csx (cluster nsls2): deleted\n",
		}, notWant: []string{"demo"}},
		{name: "refused by the API server", file: "invalid-profile.yaml", code: 2, want: []string{
			"TiledProfile nsls2/facility: server-side dry run", "spec.priority"}},
		{name: "missing file", file: "nope.yaml", code: 2, want: []string{"does not exist"}},
		{name: "other namespace", args: []string{"-n", "elsewhere", "-f", fleetProfile}, code: 2, want: []string{
			`the namespace from the provided object "nsls2"`}},
		{name: "no files", args: []string{}, code: 2, want: []string{"must specify one of -f and -k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			args := tc.args
			if args == nil {
				args = []string{"-f", filepath.Join("testdata", "diff", tc.file)}
			}
			code, out, errOut := runPlugin(t, append([]string{"diff", "--kubeconfig", env.Kubeconfig, "-n", ns}, args...)...)
			g.Expect(code).To(Equal(tc.code), "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, w := range tc.want {
				g.Expect(out + errOut).To(ContainSubstring(w))
			}
			for _, w := range tc.notWant {
				g.Expect(out).NotTo(ContainSubstring(w))
			}
		})
	}

	// Nothing was stored: the live objects are as they were.
	var live v1alpha1.TiledProfile
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "facility"}, &live)).To(Succeed())
	g.Expect(live.Generation).To(BeEquivalentTo(1))
	g.Expect(live.Spec.Tiled.Image).To(Equal("ghcr.io/bluesky/tiled:0.2.20"))
	var instances v1alpha1.TiledInstanceList
	g.Expect(env.Client.List(ctx, &instances, client.InNamespace(ns))).To(Succeed())
	g.Expect(instances.Items).To(HaveLen(3))
}
