package promcheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const component = "../../../config/components/prometheus"

func readObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	obj, err := ReadObject(file)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// golden compares got with testdata/name, or writes it there under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test with -update to write it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from what the code produces (go test -update rewrites it; check the diff):\n%s", file, got)
	}
}

func TestTranslateGolden(t *testing.T) {
	cases := map[string]string{
		"operator":       filepath.Join(component, "monitor.yaml"),
		"tiled-apikey":   "testdata/tiled-apikey.in.yaml",
		"sidecar-bearer": "testdata/sidecar-bearer.in.yaml",
		"any-namespace":  "testdata/any-namespace.in.yaml",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			sc, err := Translate([]*unstructured.Unstructured{readObject(t, in)}, Options{})
			g.Expect(err).NotTo(HaveOccurred())
			out, err := yaml.Marshal(map[string]any{"scrape_configs": sc.Configs, "secrets": sc.Secrets})
			g.Expect(err).NotTo(HaveOccurred())
			golden(t, name+".golden.yaml", out)
		})
	}
}

func TestTranslateOptions(t *testing.T) {
	g := NewWithT(t)
	sm := readObject(t, "testdata/tiled-apikey.in.yaml")
	sc, err := Translate([]*unstructured.Unstructured{sm, readObject(t, filepath.Join(component, "monitor.yaml"))},
		Options{Role: "endpoints", SecretDir: "/s", Interval: "5s"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sc.Configs).To(HaveLen(2))
	for _, c := range sc.Configs {
		g.Expect(c).To(HaveKeyWithValue("scrape_interval", "5s"))
		g.Expect(c["kubernetes_sd_configs"]).To(ConsistOf(HaveKeyWithValue("role", "endpoints")))
		g.Expect(c["relabel_configs"]).To(ContainElement(HaveKeyWithValue("source_labels", []string{"__meta_kubernetes_endpoint_port_name"})))
	}
	g.Expect(sc.Configs[0]["authorization"]).To(Equal(map[string]any{"type": "Apikey", "credentials_file": "/s/beamlines_tc-csx_api-key"}))
	g.Expect(sc.Secrets).To(Equal([]MountedSecret{{Namespace: "beamlines", Name: "tc-csx", Key: "api-key", FileKey: "beamlines_tc-csx_api-key", File: "/s/beamlines_tc-csx_api-key"}}))

	cfg, err := PrometheusConfig("5s", "5s", []string{"/etc/prometheus/rules/a.yaml"}, sc)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg)).To(ContainSubstring("evaluation_interval: 5s"))
	g.Expect(string(cfg)).To(ContainSubstring("job_name: serviceMonitor/tiled-operator-system/tiled-operator-controller-manager-metrics-monitor/0"))
}

func TestTranslateRefuses(t *testing.T) {
	base := func() *unstructured.Unstructured { return readObject(t, "testdata/tiled-apikey.in.yaml") }
	cases := []struct {
		name   string
		mutate func(u *unstructured.Unstructured)
		opts   Options
		want   string
	}{
		{"matchExpressions", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"key": "a", "operator": "Exists"}}, "spec", "selector", "matchExpressions")
		}, Options{}, "matchExpressions"},
		{"relabelings", func(u *unstructured.Unstructured) {
			eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
			eps[0].(map[string]any)["relabelings"] = []any{}
			_ = unstructured.SetNestedSlice(u.Object, eps, "spec", "endpoints")
		}, Options{}, "relabelings"},
		{"no port", func(u *unstructured.Unstructured) {
			eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
			delete(eps[0].(map[string]any), "port")
			_ = unstructured.SetNestedSlice(u.Object, eps, "spec", "endpoints")
		}, Options{}, "no port name"},
		{"no namespace", func(u *unstructured.Unstructured) { u.SetNamespace("") }, Options{}, "no namespace"},
		{"not a ServiceMonitor", func(u *unstructured.Unstructured) { u.SetKind("PodMonitor") }, Options{}, "not a monitoring.coreos.com/v1 ServiceMonitor"},
		{"role", func(*unstructured.Unstructured) {}, Options{Role: "pod"}, "role"},
		{"token and authorization", func(u *unstructured.Unstructured) {
			eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
			eps[0].(map[string]any)["bearerTokenFile"] = "/t"
			_ = unstructured.SetNestedSlice(u.Object, eps, "spec", "endpoints")
		}, Options{}, "both"},
	}
	t.Run("twice", func(t *testing.T) {
		g := NewWithT(t)
		_, err := Translate([]*unstructured.Unstructured{base(), base()}, Options{})
		g.Expect(err).To(MatchError(ContainSubstring("two ServiceMonitors")))
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			u := base()
			c.mutate(u)
			_, err := Translate([]*unstructured.Unstructured{u}, c.opts)
			g.Expect(err).To(MatchError(ContainSubstring(c.want)))
		})
	}
}

func TestSubstitute(t *testing.T) {
	values := map[string]string{"namespace": "ns", "__rate_interval": "1m"}
	cases := []struct{ in, want, err string }{
		{`up{namespace=~"$namespace"}`, `up{namespace=~"ns"}`, ""},
		{`rate(x[${__rate_interval}])`, `rate(x[1m])`, ""},
		{`x{namespace=~"${namespace:regex}"}`, `x{namespace=~"ns"}`, ""},
		{`x{instance=~"$instance"}`, "", "instance"},
		{`no variables`, `no variables`, ""},
	}
	for _, c := range cases {
		g := NewWithT(t)
		got, err := Substitute(c.in, values)
		if c.err != "" {
			g.Expect(err).To(MatchError(ContainSubstring(c.err)), c.in)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), c.in)
		g.Expect(got).To(Equal(c.want), c.in)
	}
}

func TestRulesAndDashboardGolden(t *testing.T) {
	g := NewWithT(t)
	rules, err := RuleFile(readObject(t, filepath.Join(component, "rules.yaml")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rules.Alerts()).NotTo(BeEmpty())

	short := rules.WithFor(10 * time.Second)
	for i, a := range short.Alerts() {
		orig := rules.Alerts()[i]
		if orig.For == "0m" {
			g.Expect(a.For).To(Equal("0m"), a.Alert)
		} else {
			g.Expect(a.For).To(Equal("10s"), a.Alert)
		}
	}
	// The original is not changed.
	g.Expect(rules.Alerts()[0].For).NotTo(Equal("10s"))

	raw, err := os.ReadFile(filepath.Join(component, "dashboards", "tiled-fleet.json"))
	g.Expect(err).NotTo(HaveOccurred())
	dash, err := ParseDashboard(raw)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = dash.Exprs(map[string]string{})
	g.Expect(err).To(MatchError(ContainSubstring("which have no value")))
	exprs, err := dash.Exprs(map[string]string{
		"namespace": "beamlines", "cluster": "nsls2", "instance": "csx",
		"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
	})
	g.Expect(err).NotTo(HaveOccurred())
	for _, e := range exprs {
		g.Expect(e.Expr).NotTo(ContainSubstring("$"), e.Where)
	}
	out, err := RuleGroups{Groups: []RuleGroup{ExprRules("dashboard", exprs)}}.Marshal()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(string(out), "record: tiled_dashboard:expr_")).To(Equal(len(exprs)))
	golden(t, "dashboard.rules.golden.yaml", out)
}

func TestRuleFileRefuses(t *testing.T) {
	g := NewWithT(t)
	u := readObject(t, filepath.Join(component, "rules.yaml"))
	u.SetKind("ConfigMap")
	_, err := RuleFile(u)
	g.Expect(err).To(MatchError(ContainSubstring("not a PrometheusRule")))
	u = readObject(t, filepath.Join(component, "rules.yaml"))
	_ = unstructured.SetNestedField(u.Object, "x", "spec", "extra")
	_, err = RuleFile(u)
	g.Expect(err).To(MatchError(ContainSubstring("not a rule file")))
}
