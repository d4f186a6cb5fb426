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
	{"apis", 0}, {"names", 0}, {"config", 0}, {"applyconfiguration", 0},
	{"profiles", 1},
	{"render", 2},
	{"expansion", 3},
	{"controllers", 4}, {"webhooks", 4},
	{"operator", 5},
	{"cmd", 6}, {"hack", 6}, {"test", 6},
}

// apart are packages of one rank that must not import each other (kubebuilder's layout: the
// controllers and the webhooks stand side by side).
var apart = [][2]string{{"controllers", "webhooks"}, {"webhooks", "controllers"}}

// rankOf returns the rank of a package (its path within the module) and the prefix that placed it.
func rankOf(rel string) (rank int, prefix string, ok bool) {
	for _, l := range layers {
		if (rel == l.prefix || strings.HasPrefix(rel, l.prefix+"/")) && len(l.prefix) > len(prefix) {
			rank, prefix, ok = l.rank, l.prefix, true
		}
	}
	return rank, prefix, ok
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
		from, fromLayer, ok := rankOf(pkg)
		g.Expect(ok).To(BeTrue(), "package %s is on no layer: add it to layers (and to docs/design.md's package map)", pkg)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			to, toLayer, ok := rankOf(dep)
			g.Expect(ok).To(BeTrue(), "package %s is on no layer", dep)
			checked++
			if to > from {
				violations = append(violations, pkg+" imports "+dep+" (a higher layer)")
			}
			for _, a := range apart {
				if fromLayer == a[0] && toLayer == a[1] {
					violations = append(violations, pkg+" imports "+dep+" ("+a[0]+" and "+a[1]+" stand apart)")
				}
			}
		}
	}
	g.Expect(checked).To(BeNumerically(">", 50), "the import graph was read")
	g.Expect(violations).To(BeEmpty())
}
