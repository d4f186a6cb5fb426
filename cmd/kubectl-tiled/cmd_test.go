package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
)

// The NSLS-II sample of the expansion package: a cluster of 30 beamlines and three profiles.
var (
	fleetDir     = filepath.Join("..", "..", "expansion", "testdata", "fleet")
	fleetCluster = filepath.Join(fleetDir, "cluster.yaml")
	fleetProfile = filepath.Join(fleetDir, "profiles.yaml")
)

func runCmd(stdin string, args ...string) (code int, stdout, stderr string) {
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString(stdin)
	code = run(args, streams)
	return code, out.String(), errOut.String()
}

// engine expands the sample with the expansion package directly and marshals the result.
func engine(t *testing.T) []byte {
	t.Helper()
	var cluster *v1alpha1.TiledCluster
	var profiles []v1alpha1.TiledProfile
	for _, name := range []string{fleetCluster, fleetProfile} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := expansion.DecodeAll(name, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *v1alpha1.TiledCluster:
				cluster = o
			case *v1alpha1.TiledProfile:
				profiles = append(profiles, *o)
			}
		}
	}
	res, err := expansion.Expand(cluster, profiles, expansion.DefaultBuiltins())
	if err != nil {
		t.Fatal(err)
	}
	b, err := expansion.Marshal(res.Objects()...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExpandMatchesEngine(t *testing.T) {
	g := NewWithT(t)
	want := engine(t)
	cases := map[string][]string{
		"files":     {"expand", "-f", fleetCluster, "-f", fleetProfile},
		"directory": {"expand", "-f", fleetDir},
		"comma":     {"expand", "--filename=" + fleetCluster + "," + fleetProfile},
	}
	for name, args := range cases {
		code, out, errOut := runCmd("", args...)
		g.Expect(errOut).To(BeEmpty(), name)
		g.Expect(code).To(Equal(0), name)
		g.Expect(out).To(Equal(string(want)), name)
	}
	g.Expect(strings.Count(string(want), "kind: TiledInstance\n")).To(Equal(30))

	// Standard input.
	profiles, err := os.ReadFile(fleetProfile)
	g.Expect(err).NotTo(HaveOccurred())
	code, out, _ := runCmd(string(profiles), "expand", "-f", fleetCluster, "-f", "-")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(Equal(string(want)))
}

func TestExpandStandalone(t *testing.T) {
	g := NewWithT(t)
	code, out, errOut := runCmd("", "expand", "-f", fleetProfile, "-f", filepath.Join("testdata", "standalone.yaml"))
	g.Expect(errOut).To(BeEmpty())
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("name: demo\n"))
	g.Expect(out).To(ContainSubstring("spec.storage.data.size: instance\n"))
	g.Expect(out).To(ContainSubstring("spec.storage.data.storageClassName: profile/nsls2-defaults@3\n"))
	g.Expect(out).To(ContainSubstring("path: /nsls2/data/demo/proposals\n"))
}

func TestWhy(t *testing.T) {
	g := NewWithT(t)
	for _, instance := range []string{"chx", "nsls2-chx"} {
		code, out, errOut := runCmd("", "why", "-f", fleetDir, instance, "spec.storage.data.size")
		g.Expect(errOut).To(BeEmpty())
		g.Expect(code).To(Equal(0))
		g.Expect(out).To(Equal("FIELD                    VALUE   SOURCE\n" +
			`spec.storage.data.size   "2Ti"   instance/chx/overrides` + "\n"))
	}
	code, out, _ := runCmd("", "why", "-f", fleetDir, "amx", "spec.storage.readOnlyMounts[name=proposals].nfs")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring(`spec.storage.readOnlyMounts[name=proposals].nfs.path     "/nsls2/data/amx/proposals"   profile/nsls2-defaults@3 (expression)`))
	g.Expect(out).To(ContainSubstring(`spec.storage.readOnlyMounts[name=proposals].nfs.server   "nfs.nsls2.bnl.gov"           profile/nsls2-defaults@3`))
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		stderr []string
		usage  bool
	}{
		{name: "no command", args: nil, stderr: []string{"error: a command is required"}, usage: true},
		{name: "unknown command", args: []string{"explode"}, stderr: []string{"error: unknown command"}},
		{name: "no files", args: []string{"expand"}, stderr: []string{"error: must specify one of -f and -k"}, usage: true},
		{name: "unknown flag", args: []string{"expand", "--bogus"}, stderr: []string{"error: unknown flag: --bogus"}, usage: true},
		{name: "why without arguments", args: []string{"why", "-f", fleetDir}, stderr: []string{"error: expected INSTANCE and FIELD, got 0 argument(s)"}, usage: true},
		{name: "missing file", args: []string{"expand", "-f", "nope.yaml"}, stderr: []string{`error: the path "nope.yaml" does not exist`}},
		{name: "unknown instance", args: []string{"why", "-f", fleetDir, "xyz", "spec"}, stderr: []string{`error: instance "xyz" not found`}},
		{name: "unset field", args: []string{"why", "-f", fleetDir, "chx", "spec.storage.data.nfs"}, stderr: []string{"error: nsls2-chx does not set spec.storage.data.nfs"}},
		{
			name:   "override of a field that does not exist",
			args:   []string{"expand", "-f", filepath.Join("testdata", "typo.yaml"), "-f", fleetProfile},
			stderr: []string{"error: ", "TiledCluster/nsls2: instance/chx/overrides: spec.storage.data.sise: field not declared in the schema"},
		},
		{
			name:   "selector matching nothing",
			args:   []string{"expand", "-f", fleetCluster},
			stderr: []string{`error: TiledCluster nsls2/nsls2: cluster/nsls2: spec.profileSelector: selector "facility=nsls2,!family" matches no TiledProfile in namespace "nsls2"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			code, out, errOut := runCmd("", tc.args...)
			g.Expect(code).To(Equal(1))
			g.Expect(out).To(BeEmpty())
			for _, s := range tc.stderr {
				g.Expect(errOut).To(ContainSubstring(s))
			}
			g.Expect(strings.HasPrefix(errOut, "error: ")).To(BeTrue(), errOut)
			if tc.usage {
				g.Expect(errOut).To(MatchRegexp(`See 'kubectl tiled( \w+)? -h' for help and examples.\n$`))
			}
		})
	}
}

// TestOfflineCommandsContactNoCluster: expand, why and import-helm send no request to the cluster
// of the kubeconfig (their help says so), diff does. The server counts what it receives.
func TestOfflineCommandsContactNoCluster(t *testing.T) {
	cases := map[string]struct {
		args    []string
		offline bool
	}{
		"expand":      {args: []string{"expand", "-f", fleetDir}, offline: true},
		"why":         {args: []string{"why", "-f", fleetDir, "chx", "spec.storage.data.size"}, offline: true},
		"import-helm": {args: []string{"import-helm", filepath.Join("testdata", "helm", "chart-defaults.yaml")}, offline: true},
		"diff":        {args: []string{"diff", "-f", fleetDir}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				http.Error(w, "no cluster here", http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			code, _, stderr := runCmd("", append(tc.args, "--server", srv.URL)...)
			if tc.offline {
				g.Expect(code).To(Equal(0), stderr)
				g.Expect(requests.Load()).To(BeZero())
			} else {
				g.Expect(code).NotTo(Equal(0))
				g.Expect(requests.Load()).To(BeNumerically(">", 0))
			}
		})
	}
}

// expectRefused runs `kubectl tiled COMMAND -n backupNS ARGS` and requires a refusal: exit status 1,
// nothing on stdout, stderr starting with want; a usage error ends with the hint to run -h, any
// other error is want whole.
func expectRefused(g Gomega, command string, args []string, want string, usage bool) {
	code, out, errOut := runCmd("", append([]string{command, "-n", backupNS}, args...)...)
	g.Expect(code).To(Equal(1))
	g.Expect(out).To(BeEmpty())
	g.Expect(errOut).To(HavePrefix(want))
	if usage {
		g.Expect(errOut).To(HaveSuffix("See 'kubectl tiled " + command + " -h' for help and examples.\n"))
	} else {
		g.Expect(errOut).To(Equal(want), "the whole message")
	}
}
