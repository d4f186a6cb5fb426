package packaging

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the generated parts of the documents (docs/gitops-argocd.md's argocd-cm block)")

// argocdDir holds the Argo CD health checks in Argo CD's resource customization layout:
// <group>/<kind>/health.lua, health_test.yaml and testdata/.
const argocdDir = "config/argocd"

// healthTests is Argo CD's health_test.yaml.
type healthTests struct {
	Tests []struct {
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
		InputPath string `json:"inputPath"`
	} `json:"tests"`
}

// healthChecks lists the folders <group>/<kind> of config/argocd that have a health.lua.
func healthChecks(t *testing.T) []string {
	t.Helper()
	scripts, err := filepath.Glob(filepath.Join(root, argocdDir, "*", "*", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, s := range scripts {
		rel, err := filepath.Rel(filepath.Join(root, argocdDir), filepath.Dir(s))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.ToSlash(rel))
	}
	sort.Strings(dirs)
	return dirs
}

// TestArgoCDHealthChecks runs every health.lua of config/argocd on its testdata with gopher-lua, the
// Lua VM Argo CD runs them in, with the libraries Argo CD opens, and compares the returned status and
// message to health_test.yaml. Each kind of the API has a check, and each check covers Healthy,
// Progressing and Degraded (and Suspended for TiledCluster, which can be paused).
func TestArgoCDHealthChecks(t *testing.T) {
	dirs := healthChecks(t)
	want := []string{"tiled.blueskyproject.io/TiledCluster", "tiled.blueskyproject.io/TiledInstance", "tiled.blueskyproject.io/TiledProfile"}
	if strings.Join(dirs, " ") != strings.Join(want, " ") {
		t.Fatalf("config/argocd has health checks for %v, want %v", dirs, want)
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			base := filepath.Join(root, argocdDir, dir)
			script, err := os.ReadFile(filepath.Join(base, "health.lua"))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(base, "health_test.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var tests healthTests
			if err := yaml.UnmarshalStrict(raw, &tests); err != nil {
				t.Fatalf("health_test.yaml: %v", err)
			}
			seen := map[string]bool{}
			used := map[string]bool{}
			for _, tc := range tests.Tests {
				seen[tc.HealthStatus.Status] = true
				used[filepath.Clean(tc.InputPath)] = true
				input, err := os.ReadFile(filepath.Join(base, tc.InputPath))
				if err != nil {
					t.Fatal(err)
				}
				var obj map[string]any
				if err := yaml.Unmarshal(input, &obj); err != nil {
					t.Fatalf("%s: %v", tc.InputPath, err)
				}
				if kind := filepath.Base(dir); obj["kind"] != kind {
					t.Errorf("%s is a %v, want a %s", tc.InputPath, obj["kind"], kind)
				}
				status, message, err := runHealthLua(string(script), obj)
				if err != nil {
					t.Errorf("%s: %v", tc.InputPath, err)
					continue
				}
				if status != tc.HealthStatus.Status || message != tc.HealthStatus.Message {
					t.Errorf("%s: health %q %q, want %q %q", tc.InputPath, status, message, tc.HealthStatus.Status, tc.HealthStatus.Message)
				}
			}
			need := []string{"Healthy", "Progressing", "Degraded"}
			if strings.HasSuffix(dir, "/TiledCluster") {
				need = append(need, "Suspended")
			}
			for _, s := range need {
				if !seen[s] {
					t.Errorf("health_test.yaml has no %s case", s)
				}
			}
			files, _ := filepath.Glob(filepath.Join(base, "testdata", "*.yaml"))
			for _, f := range files {
				if rel, _ := filepath.Rel(base, f); !used[rel] {
					t.Errorf("testdata %s is not used by health_test.yaml", rel)
				}
			}
		})
	}
}

// runHealthLua runs a health script the way Argo CD does: the object as the global obj (JSON
// numbers as Lua numbers, arrays as tables from index 1), base, table, string and math libraries,
// and the result a table with status and message.
func runHealthLua(script string, obj map[string]any) (status, message string, err error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	ret := l.Get(-1)
	tbl, ok := ret.(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", ret.Type())
	}
	s, ok := tbl.RawGetString("status").(lua.LString)
	if !ok {
		return "", "", fmt.Errorf("the script returned no status string")
	}
	switch s {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		return "", "", fmt.Errorf("the script returned status %q, which Argo CD does not know", s)
	}
	m := tbl.RawGetString("message")
	if m.Type() != lua.LTString && m != lua.LNil {
		return "", "", fmt.Errorf("the script returned a message of type %s", m.Type())
	}
	if m == lua.LNil {
		return string(s), "", nil
	}
	return string(s), string(m.(lua.LString)), nil
}

func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case []any:
		t := l.NewTable()
		for _, e := range v {
			t.Append(toLua(l, e))
		}
		return t
	case map[string]any:
		t := l.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(l, e))
		}
		return t
	default:
		panic(fmt.Sprintf("no Lua value for %T", v))
	}
}

const (
	argocdDoc      = "docs/gitops-argocd.md"
	argocdDocBegin = "<!-- BEGIN argocd-cm health checks: generated from config/argocd; `go test ./test/packaging -run TestArgoCDHealthDocumented -update` rewrites it -->\n"
	argocdDocEnd   = "<!-- END argocd-cm health checks -->\n"
)

// TestArgoCDHealthDocumented checks that docs/gitops-argocd.md shows the argocd-cm keys installing
// exactly the scripts of config/argocd (-update rewrites the block).
func TestArgoCDHealthDocumented(t *testing.T) {
	var b strings.Builder
	b.WriteString("```yaml\ndata:\n")
	for _, dir := range healthChecks(t) {
		script, err := os.ReadFile(filepath.Join(root, argocdDir, dir, "health.lua"))
		if err != nil {
			t.Fatal(err)
		}
		group, kind := filepath.Dir(dir), filepath.Base(dir)
		fmt.Fprintf(&b, "  resource.customizations.health.%s_%s: |\n", group, kind)
		for _, line := range strings.Split(strings.TrimRight(string(script), "\n"), "\n") {
			if line == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line + "\n")
		}
	}
	b.WriteString("```\n")
	block := b.String()

	path := filepath.Join(root, argocdDoc)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i := strings.Index(text, argocdDocBegin)
	j := strings.Index(text, argocdDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no block between %q and %q", argocdDoc, argocdDocBegin, argocdDocEnd)
	}
	got := text[i+len(argocdDocBegin) : j]
	if got == block {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(text[:i+len(argocdDocBegin)]+block+text[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s does not show the health checks of %s; run `go test ./test/packaging -run TestArgoCDHealthDocumented -update`", argocdDoc, argocdDir)
}
