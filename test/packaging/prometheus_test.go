package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/test/support/promcheck"
)

// The alerts and the dashboard of config/components/prometheus are checked with the real promtool,
// which hack/test.sh builds (hack/prometheus/promtool.sh) and passes in PROMTOOL. Like
// KUBEBUILDER_ASSETS, a missing promtool is a failure, never a skip.
const (
	promComponent = "config/components/prometheus"
	dashboardFile = promComponent + "/dashboards/tiled-fleet.json"
	// rulesFileName is the plain rule file generated from the PrometheusRule's spec; the promtool
	// unit tests in config/components/prometheus/tests name it in rule_files.
	rulesFileName = "tiled-operator.rules.yaml"
	runbookPrefix = "https://github.com/bluesky/tiled-operator/blob/main/docs/observability.md#"
)

func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		t.Fatal("PROMTOOL is not set: run the tests with hack/test.sh (make test), or with PROMTOOL=$(hack/prometheus/promtool.sh)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("PROMTOOL=%s: %v", p, err)
	}
	return p
}

// runPromtool runs promtool in dir and fails the test with its output when it fails.
func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// prometheusRule returns the PrometheusRule config/prometheus renders (the Component as shipped).
func prometheusRule(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	objs, err := decodeAll(kustomize(t, "config/prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	rules := only(objs, "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("config/prometheus renders %d PrometheusRules, want 1", len(rules))
	}
	if r := rules[0]; r.GetAPIVersion() != "monitoring.coreos.com/v1" || r.GetNamespace() != namespace {
		t.Fatalf("PrometheusRule %s is %s in %q, want monitoring.coreos.com/v1 in %q", r.GetName(), r.GetAPIVersion(), r.GetNamespace(), namespace)
	}
	return rules[0]
}

// writeRulesFile writes the PrometheusRule's spec, which is a Prometheus rule file, into dir
// (promcheck.RuleFile, which the e2e case 14 loads into a real Prometheus too).
func writeRulesFile(t *testing.T, dir string, rule *unstructured.Unstructured) promcheck.RuleGroups {
	t.Helper()
	g, err := promcheck.RuleFile(rule)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rulesFileName), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

// The alerts the runbooks of docs/observability.md describe.
var wantAlerts = []string{
	"TiledInstanceNotReady", "TiledUpgradeStuck", "TiledInstanceStalled", "TiledMigrationFailed", "TiledCatalogLost", "TiledChangePending", "TiledBackupOverdue",
	"TiledHigh5xxRate", "TiledOperatorDown", "TiledOperatorReconcileErrors",
}

// TestPrometheusRules checks the PrometheusRule of config/components/prometheus: promtool check
// rules (lint fatal) on its spec as a plain rule file, promtool test rules with the unit tests of
// config/components/prometheus/tests (each alert fires and does not fire, at the boundary of its
// `for`), and that each alert has a severity, a summary, a description and a runbook_url whose
// anchor is a heading of the observability documentation.
func TestPrometheusRules(t *testing.T) {
	tool := promtool(t)
	dir := t.TempDir()
	groups := writeRulesFile(t, dir, prometheusRule(t))
	runPromtool(t, dir, "check", "rules", "--lint=all", "--lint-fatal", rulesFileName)

	tests, err := filepath.Glob(filepath.Join(root, promComponent, "tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool unit tests in %s/tests (%v)", promComponent, err)
	}
	var names []string
	fired, quiet := map[string]bool{}, map[string]bool{}
	for _, f := range tests {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ut struct {
			RuleFiles []string `json:"rule_files"`
			Tests     []struct {
				AlertRuleTest []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(raw, &ut); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Equal(ut.RuleFiles, []string{rulesFileName}) {
			t.Errorf("%s: rule_files %v, want [%s] (generated from the PrometheusRule)", filepath.Base(f), ut.RuleFiles, rulesFileName)
		}
		for _, tc := range ut.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(f))
	}
	cmd := exec.Command(tool, append([]string{"test", "rules"}, names...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}

	docs := observabilityDocs(t)
	var alerts []string
	for _, g := range groups.Groups {
		if g.Name != "tiled-operator.rules" {
			t.Errorf("rule group %q, want tiled-operator.rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !slices.Contains(alerts, r.Alert) {
				alerts = append(alerts, r.Alert)
			}
			if r.For == "" {
				t.Errorf("%s has no explicit `for`", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s has no annotation %s", r.Alert, a)
				}
			}
			anchor := strings.ToLower(r.Alert)
			if u := r.Annotations["runbook_url"]; u != runbookPrefix+anchor {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, u, runbookPrefix+anchor)
			}
			if !regexp.MustCompile(`(?m)^#+ ` + r.Alert + `\s*$`).MatchString(docs) {
				t.Errorf("%s: no heading %q (anchor #%s) in docs/observability.md", r.Alert, r.Alert, anchor)
			}
			if !fired[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: the promtool unit tests must both expect it (fired %v) and expect it not to fire (%v)", r.Alert, fired[r.Alert], quiet[r.Alert])
			}
		}
	}
	if !slices.Equal(alerts, wantAlerts) {
		t.Errorf("alerts %v, want %v", alerts, wantAlerts)
	}
}

// observabilityDocs returns docs/observability.md, the page the runbook anchors point into.
func observabilityDocs(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs/observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// dashboardValues are the values the test gives the dashboard's template variables: the synthetic
// series of dashboardSeries have them.
var dashboardValues = map[string]string{
	"namespace": "beamlines", "cluster": "nsls2", "instance": "csx",
	"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
}

// dashboardSeries are synthetic series for every metric the dashboard reads, with the labels
// Prometheus stores them with (the operator's through its ServiceMonitor with honorLabels, Tiled's
// through the instance's ServiceMonitor), as promtool input_series at 1m intervals.
var dashboardSeries = []struct{ series, values string }{
	{`tiled_operator_instance_info{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx",version="0.2.20",image="ghcr.io/bluesky/tiled:v0.2.20",database_mode="managed"}`, "1x30"},
	{`tiled_operator_instance_ready{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx"}`, "1x30"},
	{`tiled_operator_instance_ready_replicas{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx"}`, "2x30"},
	{`tiled_operator_instance_stalled{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx",reason="ProfileConflict"}`, "1x30"},
	{`tiled_operator_instance_migration_failed{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx"}`, "0x30"},
	{`tiled_operator_instance_catalog_lost{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx"}`, "1x30"},
	{`tiled_operator_instance_backup_last_success_timestamp_seconds{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx"}`, "0x30"},
	{`tiled_operator_instance_backup_interval_seconds{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",instance="csx"}`, "86400x30"},
	{`tiled_operator_cluster_instances{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",state="ready"}`, "2x30"},
	{`tiled_operator_cluster_instances{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",state="unready"}`, "1x30"},
	{`tiled_operator_cluster_instances{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",state="held"}`, "0x30"},
	{`tiled_operator_cluster_instances{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",state="rollout_pending"}`, "0x30"},
	{`tiled_operator_cluster_instances{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2",state="stalled"}`, "1x30"},
	{`tiled_operator_cluster_ready{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2"}`, "0x30"},
	{`tiled_operator_cluster_rollout_in_progress{job="tiled-operator-controller-manager-metrics-service",namespace="beamlines",tiled_cluster="nsls2"}`, "1x30"},
	{`tiled_operator_expansions_total{job="tiled-operator-controller-manager-metrics-service",namespace="tiled-operator-system",result="ok"}`, "0+1x30"},
	{`controller_runtime_reconcile_errors_total{job="tiled-operator-controller-manager-metrics-service",namespace="tiled-operator-system",controller="tiledinstance"}`, "0+1x30"},
	{`tiled_request_duration_seconds_count{namespace="beamlines",service="csx",job="csx",pod="csx-0",endpoint="http",exported_endpoint="data",method="GET",code="200"}`, "0+60x30"},
	{`tiled_request_duration_seconds_count{namespace="beamlines",service="csx",job="csx",pod="csx-0",endpoint="http",exported_endpoint="data",method="GET",code="500"}`, "0+3x30"},
	{`tiled_request_duration_seconds_bucket{namespace="beamlines",service="csx",job="csx",pod="csx-0",endpoint="http",exported_endpoint="data",method="GET",code="200",le="0.1"}`, "0+50x30"},
	{`tiled_request_duration_seconds_bucket{namespace="beamlines",service="csx",job="csx",pod="csx-0",endpoint="http",exported_endpoint="data",method="GET",code="200",le="1"}`, "0+58x30"},
	{`tiled_request_duration_seconds_bucket{namespace="beamlines",service="csx",job="csx",pod="csx-0",endpoint="http",exported_endpoint="data",method="GET",code="200",le="+Inf"}`, "0+60x30"},
}

// TestGrafanaDashboard checks the dashboard shipped in the Component: valid JSON, unique panel ids,
// a datasource variable that every panel and target uses, and every target's expression (and every
// template variable's query) parses and returns at least one sample: each becomes a recording rule
// of a generated rule file (promtool check rules), and promtool test rules evaluates them on
// synthetic series, an alert on absent() of each recording failing the test for an empty one.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	dash, err := promcheck.ParseDashboard(raw)
	if err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("the dashboard needs a uid and a title")
	}

	// The ConfigMap that ships it.
	objs, err := decodeAll(kustomize(t, "config/prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped bool
	for _, cm := range only(objs, "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			continue
		}
		data, _, _ := unstructured.NestedString(cm.Object, "data", "tiled-fleet.json")
		if data != string(raw) {
			t.Errorf("ConfigMap %s does not carry %s as it is", cm.GetName(), dashboardFile)
		}
		shipped = true
	}
	if !shipped {
		t.Errorf("config/prometheus renders no ConfigMap labelled grafana_dashboard: \"1\"")
	}

	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Fatalf("the dashboard has no template variable datasource of type datasource")
	}
	for _, v := range []string{"namespace", "cluster", "instance"} {
		if vars[v] != "query" {
			t.Errorf("the dashboard has no query variable $%s", v)
		}
	}
	usesVar := func(ds map[string]any) bool { return ds != nil && ds["uid"] == "${datasource}" }

	ids := map[int]string{}
	var walk func(ps []promcheck.Panel)
	walk = func(ps []promcheck.Panel) {
		for _, p := range ps {
			if prev, ok := ids[p.ID]; ok || p.ID == 0 {
				t.Errorf("panel %q has id %d, already %q's (or 0)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if !usesVar(p.Datasource) {
				t.Errorf("panel %d %q: datasource %v, want the variable ${datasource}", p.ID, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q has no targets", p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				if !usesVar(tg.Datasource) {
					t.Errorf("panel %d %q target %s: datasource %v, want ${datasource}", p.ID, p.Title, tg.RefID, tg.Datasource)
				}
			}
		}
	}
	walk(dash.Panels)
	// Every target's expression and every query variable's, the variables substituted
	// (promcheck, which the e2e case 14 loads into a real Prometheus too).
	exprs, err := dash.Exprs(dashboardValues)
	if err != nil {
		t.Error(err)
	}

	// One recording rule per expression, and an alert on its absence.
	group := promcheck.ExprRules("dashboard", exprs)
	var where []string
	for i, e := range exprs {
		where = append(where, fmt.Sprintf("  %d: %s: %s", i, e.Where, e.Expr))
	}
	// A control: an expression returning nothing must make the alert fire, or the check proves nothing.
	group.Rules = append(group.Rules,
		promcheck.Rule{Record: "tiled_dashboard:control", Expr: `tiled_operator_instance_ready{instance="no-such-instance"}`},
		promcheck.Rule{Alert: "DashboardControlEmpty", Expr: "absent(tiled_dashboard:control)"})
	dir := t.TempDir()
	writeYAML(t, filepath.Join(dir, "dashboard.rules.yaml"), promcheck.RuleGroups{Groups: []promcheck.RuleGroup{group}})
	runPromtool(t, dir, "check", "rules", "dashboard.rules.yaml")

	var series []any
	for _, s := range dashboardSeries {
		series = append(series, map[string]any{"series": s.series, "values": s.values})
	}
	writeYAML(t, filepath.Join(dir, "dashboard_test.yaml"), map[string]any{
		"rule_files":          []string{"dashboard.rules.yaml"},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":     "1m",
			"input_series": series,
			"alert_rule_test": []any{
				map[string]any{"eval_time": "20m", "alertname": "DashboardExpressionEmpty", "exp_alerts": []any{}},
				map[string]any{"eval_time": "20m", "alertname": "DashboardControlEmpty", "exp_alerts": []any{map[string]any{"exp_labels": map[string]any{}}}},
			},
		}},
	})
	cmd := exec.Command(promtool(t), "test", "rules", "dashboard_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("an expression of the dashboard returns no sample on the synthetic series (the alert's label expression is its number):\n%s\n%s", strings.Join(where, "\n"), out)
	}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}
