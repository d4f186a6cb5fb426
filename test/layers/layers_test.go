package layers

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

const module = "github.com/bluesky/tiled-operator"

// layers rank the module's packages (by path prefix, the longest prefix wins): a package may import
// packages of its own rank or lower, never higher. docs/design.md's package map draws the same.
var layers = []struct {
	prefix string
	rank   int
}{
	{"apis", 0}, {"names", 0}, {"tiledversion", 0}, {"calendar", 0}, {"config", 0}, {"applyconfiguration", 0},
	{"profiles", 1},
	{"render", 2},
	{"expansion", 3},
	// The controllers' parts under the reconcilers: the one writer and the pure deciders, then the
	// child-set engine and the desired state, both built on the writer's prepared intents.
	{"controllers/applier", 4}, {"controllers/rollout", 4}, {"controllers/podstatus", 4}, {"controllers/upgrade", 4}, {"controllers/backup", 4},
	{"controllers/additions", 4},
	// The memory helpers the writer, the desired state and the caches share (no imports of their own).
	{"controllers/intern", 4}, {"controllers/dedupe", 4},
	{"controllers/childset", 5}, {"controllers/desired", 5},
	{"controllers", 6}, {"webhooks", 6},
	{"operator", 7},
	{"cmd", 8}, {"hack", 8}, {"test", 8},
}

// apart are packages (and the packages under them) that must not import each other although their
// ranks would allow it: the controllers and the webhooks stand side by side (kubebuilder's layout);
// the child-set engine applies and prunes whatever set it is given, and the desired state computes
// what is wanted without knowing how it is applied.
var apart = [][2]string{
	{"controllers", "webhooks"}, {"webhooks", "controllers"},
	{"controllers/childset", "controllers/desired"}, {"controllers/desired", "controllers/childset"},
}

// within says whether the package rel is prefix or under it.
func within(rel, prefix string) bool { return rel == prefix || strings.HasPrefix(rel, prefix+"/") }

// rankOf returns the rank of a package (its path within the module).
func rankOf(rel string) (rank int, ok bool) {
	prefix := ""
	for _, l := range layers {
		if within(rel, l.prefix) && len(l.prefix) > len(prefix) {
			rank, prefix, ok = l.rank, l.prefix, true
		}
	}
	return rank, ok
}

// TestImportsFollowTheLayers: no package of the module imports one on a higher layer, or one it
// must stand apart from. It reads the import graph with `go list` (the non-test imports).
func TestImportsFollowTheLayers(t *testing.T) {
	g := NewWithT(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "go list ./...")
	var violations []string
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		from, ok := rankOf(pkg)
		g.Expect(ok).To(BeTrue(), "package %s is on no layer: add it to layers (and to docs/design.md's package map)", pkg)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			to, ok := rankOf(dep)
			g.Expect(ok).To(BeTrue(), "package %s is on no layer", dep)
			checked++
			if to > from {
				violations = append(violations, pkg+" imports "+dep+" (a higher layer)")
			}
			for _, a := range apart {
				if within(pkg, a[0]) && within(dep, a[1]) {
					violations = append(violations, pkg+" imports "+dep+" ("+a[0]+" and "+a[1]+" stand apart)")
				}
			}
		}
	}
	g.Expect(checked).To(BeNumerically(">", 50), "the import graph was read")
	g.Expect(violations).To(BeEmpty())
}

// pure are the packages that compute without reading or writing the cluster: the engine and what
// it is built on, and the controllers' pure deciders. Their tests need no control plane.
var pure = []string{"profiles", "names", "render", "expansion", "controllers/rollout", "controllers/podstatus", "controllers/upgrade", "controllers/backup", "controllers/additions", "tiledversion", "calendar"}

// TestPureCoreTakesNoClient: the pure packages depend on no package of controller-runtime, even
// through another; the desired state (controllers/desired), computed apart from any client, imports
// none of controller-runtime's or client-go's packages itself (it reaches controller-runtime only
// through the applier's prepared intents, which it holds but never sends).
func TestPureCoreTakesNoClient(t *testing.T) {
	g := NewWithT(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	list := func(format string, pkgs ...string) map[string][]string {
		args := []string{"list", "-f", format}
		for _, p := range pkgs {
			args = append(args, "./"+p)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		g.Expect(err).NotTo(HaveOccurred(), "go list %v", pkgs)
		deps := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			deps[strings.TrimPrefix(fields[0], module+"/")] = fields[1:]
		}
		return deps
	}
	var violations []string
	for pkg, deps := range list(`{{.ImportPath}} {{join .Deps " "}}`, pure...) {
		for _, d := range deps {
			if strings.HasPrefix(d, "sigs.k8s.io/controller-runtime") {
				violations = append(violations, pkg+" depends on "+d)
			}
		}
	}
	desired := list(`{{.ImportPath}} {{join .Imports " "}}`, "controllers/desired")
	g.Expect(desired).To(HaveKey("controllers/desired"))
	for _, d := range desired["controllers/desired"] {
		if strings.HasPrefix(d, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(d, "k8s.io/client-go") {
			violations = append(violations, "controllers/desired imports "+d)
		}
	}
	g.Expect(violations).To(BeEmpty())
}
