// Package lib holds the tests of hack/lib/gotool.sh and hack/lib/cache.sh, the shell library that builds the pinned tools
// (versitygw, metrics-server, kube-router, Prometheus, promtool) from the Go module proxy. They run
// the library with bash against a module proxy written here (GOPROXY=file://...) that serves a tiny
// tool, example.com/tiny, and its dependency example.com/dep, with a module cache and a tools cache of
// their own (Go's build cache is shared): no network, a few seconds a build.
package lib

import (
	"archive/zip"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy writes a file module proxy serving example.com/dep v1.0.0, v1.0.1, v1.0.2 (package dep: const
// V = its version) and example.com/tiny v1.0.0 (requires dep v1.0.0) and v1.1.0 (the same, and its
// go.mod replaces dep v1.0.0 by v1.0.2). tiny prints "tiny <main.version> dep <dep.V>", main.version
// being "devel" unless stamped with -X.
func proxy(t *testing.T) string {
	dir := t.TempDir()
	module := func(path, version string, files map[string]string) {
		d := filepath.Join(dir, path, "@v")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		write := func(name, s string) {
			if err := os.WriteFile(filepath.Join(d, name), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.Create(filepath.Join(d, version+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		z := zip.NewWriter(f)
		for name, content := range files {
			w, err := z.Create(path + "@" + version + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte(content)); err != nil {
				t.Fatal(err)
			}
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		write(version+".mod", files["go.mod"])
		write(version+".info", fmt.Sprintf(`{"Version":%q,"Time":"2024-01-01T00:00:00Z"}`, version))
		list, _ := os.ReadFile(filepath.Join(d, "list"))
		write("list", string(list)+version+"\n")
	}
	for _, v := range []string{"v1.0.0", "v1.0.1", "v1.0.2"} {
		module("example.com/dep", v, map[string]string{
			"go.mod": "module example.com/dep\n\ngo 1.21\n",
			"dep.go": "package dep\n\nconst V = \"" + v + "\"\n",
		})
	}
	main := `package main

import (
	"fmt"

	"example.com/dep"
)

var version = "devel"

func main() { fmt.Println("tiny", version, "dep", dep.V) }
`
	gomod := "module example.com/tiny\n\ngo 1.21\n\nrequire example.com/dep v1.0.0\n"
	module("example.com/tiny", "v1.0.0", map[string]string{"go.mod": gomod, "main.go": main})
	module("example.com/tiny", "v1.1.0", map[string]string{
		"go.mod":  gomod + "\n// A fork, as a tool pins one.\nreplace example.com/dep v1.0.0 => example.com/dep v1.0.2\n\nexclude example.com/dep v1.0.1\n",
		"main.go": main,
	})
	return dir
}

type env struct {
	t     *testing.T
	cache string   // TILED_OPERATOR_CACHE
	vars  []string // the environment of every run
}

func newEnv(t *testing.T) *env {
	t.Helper()
	p := proxy(t)
	e := &env{t: t, cache: filepath.Join(t.TempDir(), "cache")}
	// Go's build cache is shared (it is safe to share): the standard library is then not compiled
	// again for every test.
	b, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	gocache := strings.TrimSpace(string(b))
	e.vars = append(os.Environ(),
		"TILED_OPERATOR_CACHE="+e.cache,
		"GOPROXY=file://"+p, "GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GOFLAGS=", "GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"), "GOCACHE="+gocache,
	)
	return e
}

// run runs `gotool_build ARGS...` (or another function of the library, when args[0] is one) with
// bash and returns its stdout, its stderr and whether it succeeded.
func (e *env) run(extra []string, args ...string) (string, string, bool) {
	e.t.Helper()
	fn := "gotool_build"
	if strings.HasPrefix(args[0], "gotool_") || args[0] == "tiled_cache_root" {
		fn, args = args[0], args[1:]
	}
	cmd := exec.Command("bash", append([]string{"-c", `set -euo pipefail; source "$0"; ` + fn + ` "$@"`, "gotool.sh"}, args...)...)
	cmd.Env = append(append([]string{}, e.vars...), extra...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		e.t.Fatal(err)
	}
	return strings.TrimSpace(out.String()), errb.String(), err == nil
}

// build runs gotool_build and requires it to succeed; it returns the path and stderr.
func (e *env) build(args ...string) (string, string) {
	e.t.Helper()
	out, errs, ok := e.run(nil, args...)
	if !ok {
		e.t.Fatalf("gotool_build %s failed:\n%s", strings.Join(args, " "), errs)
	}
	return out, errs
}

func output(t *testing.T, bin string) string {
	t.Helper()
	b, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, b)
	}
	return strings.TrimSpace(string(b))
}

const building = "tiny: building "

func tiny(version string, extra ...string) []string {
	return append([]string{"tiny", "example.com/tiny@" + version, "example.com/tiny",
		"--ldflags", "-X main.version=" + version, "--check", "version", "--expect", "tiny " + version}, extra...)
}

func TestBuildCacheAndRecipe(t *testing.T) {
	e := newEnv(t)

	// A cold build: the keyed folder, a static, trimmed binary that reports the pinned version.
	start := time.Now()
	bin, errs := e.build(tiny("v1.0.0")...)
	t.Logf("cold build: %s", time.Since(start).Round(time.Millisecond))
	key, _, _ := e.run(nil, append([]string{"gotool_key"}, tiny("v1.0.0")...)...)
	if want := filepath.Join(e.cache, "tools", "tiny", key, "tiny"); bin != want || !strings.HasPrefix(key, "v1.0.0-") || len(key) != len("v1.0.0-")+12 {
		t.Fatalf("path %q, key %q; want %q, key v1.0.0-<12 hex>", bin, key, want)
	}
	if path, _, _ := e.run(nil, append([]string{"gotool_path"}, tiny("v1.0.0")...)...); path != bin {
		t.Errorf("gotool_path printed %q, gotool_build %q", path, bin)
	}
	if !strings.Contains(errs, building) {
		t.Errorf("no build message on a cold cache:\n%s", errs)
	}
	if got := output(t, bin); got != "tiny v1.0.0 dep v1.0.0" {
		t.Errorf("the binary printed %q", got)
	}
	info, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath=true", "mod\texample.com/tiny\tv1.0.0"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("go version -m lacks %q:\n%s", want, info)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(e.cache, "tools", "tiny", ".build-*")); len(left) > 0 {
		t.Errorf("build folders left behind: %v", left)
	}

	// Cached: the same path at once, without go or the proxy.
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, errs, ok := e.run([]string{"GOPROXY=off", "PATH=/nonexistent:" + filepath.Dir(mustLookPath(t, "bash"))}, tiny("v1.0.0")...)
	if !ok || out != bin || strings.Contains(errs, building) {
		t.Errorf("a cached build was not reused: ok=%v path %q\n%s", ok, out, errs)
	}
	if st2, _ := os.Stat(bin); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the cached binary was rewritten")
	}

	// Any change of the recipe is a new folder and a new build; options that do not shape the binary
	// are not part of the key.
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a raised dependency", tiny("v1.0.0", "--dep", "example.com/dep@v1.0.1"), "tiny v1.0.0 dep v1.0.1"},
		{"build tags", tiny("v1.0.0", "--tags", "netgo"), "tiny v1.0.0 dep v1.0.0"},
		{"another version, whose go.mod replaces and excludes", tiny("v1.1.0"), "tiny v1.1.0 dep v1.0.2"},
	} {
		b, errs := e.build(c.args...)
		if b == bin || !strings.Contains(errs, building) {
			t.Errorf("%s: path %q (the first build's: %q), built: %v", c.name, b, bin, strings.Contains(errs, building))
		}
		if got := output(t, b); got != c.want {
			t.Errorf("%s: the binary printed %q, want %q", c.name, got, c.want)
		}
	}
	if b, errs := e.build(tiny("v1.0.0", "--nice", "5", "--jobs", "1", "--about", "seconds")...); b != bin || strings.Contains(errs, building) {
		t.Errorf("--nice, --jobs and --about changed the key or rebuilt: %q\n%s", b, errs)
	}
}

func TestVersionCheckRefuses(t *testing.T) {
	e := newEnv(t)
	// No -X: the binary says "devel", not the pinned version.
	args := []string{"tiny", "example.com/tiny@v1.0.0", "example.com/tiny", "--expect", "tiny v1.0.0"}
	out, errs, ok := e.run(nil, args...)
	if ok || out != "" {
		t.Fatalf("a binary that does not report its version was accepted: %q\n%s", out, errs)
	}
	for _, want := range []string{"does not report its pinned version", "tiny devel dep v1.0.0", "lacks 'tiny v1.0.0'", "Nothing was installed"} {
		if !strings.Contains(errs, want) {
			t.Errorf("the error does not say %q:\n%s", want, errs)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(e.cache, "tools", "tiny")); len(entries) != 1 || !strings.HasSuffix(entries[0].Name(), ".lock") {
		t.Errorf("the tool's folder holds more than its lock: %v", entries)
	}
	// A raise the proxy does not serve fails the build with a message saying what to check.
	if _, errs, ok := e.run(nil, tiny("v1.0.0", "--dep", "example.com/dep@v1.0.1", "--dep", "example.com/nothere@v1.0.0")...); ok || !strings.Contains(errs, "building failed") {
		t.Errorf("a dependency the proxy does not serve did not fail the build:\n%s", errs)
	}
	// A bad recipe is a usage error, before anything runs.
	if _, errs, ok := e.run(nil, "tiny", "example.com/tiny", "example.com/tiny", "--expect", "x"); ok || !strings.Contains(errs, "is not MODULE@VERSION") {
		t.Errorf("a pin without @version was accepted:\n%s", errs)
	}
}

func TestConcurrentCallersBuildOnce(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	paths, errs := make([]string, 3), make([]string, 3)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ok bool
			paths[i], errs[i], ok = e.run(nil, tiny("v1.0.0")...)
			if !ok {
				t.Errorf("caller %d failed:\n%s", i, errs[i])
			}
		}()
	}
	wg.Wait()
	all := strings.Join(errs, "")
	if n := strings.Count(all, building); n != 1 {
		t.Errorf("%d builds for 3 concurrent callers, want 1:\n%s", n, all)
	}
	for _, p := range paths {
		if p != paths[0] || p == "" {
			t.Errorf("the callers printed different paths: %q", paths)
		}
	}
}

func TestCacheRoot(t *testing.T) {
	e := newEnv(t)
	home := t.TempDir()
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"TILED_OPERATOR_CACHE=/x/cache", "XDG_CACHE_HOME=/x/xdg", "HOME=" + home}, "/x/cache"},
		{[]string{"TILED_OPERATOR_CACHE=", "XDG_CACHE_HOME=/x/xdg", "HOME=" + home}, "/x/xdg/tiled-operator"},
		{[]string{"TILED_OPERATOR_CACHE=", "XDG_CACHE_HOME=", "HOME=" + home}, home + "/.cache/tiled-operator"},
	} {
		if got, errs, _ := e.run(c.env, "tiled_cache_root"); got != c.want {
			t.Errorf("%v: %q, want %q\n%s", c.env, got, c.want, errs)
		}
	}
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
