//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/promcheck"
)

// Case 14: a real Prometheus (docker.io/local/prometheus, hack/prometheus/prometheus.sh) in
// promNS, configured from what the repository ships for prometheus-operator, translated by
// test/support/promcheck for a server without the operator.
const (
	promNS      = "e2e-monitoring"
	promImage   = "docker.io/local/prometheus:3.16.0"
	promProxy   = "/api/v1/namespaces/" + promNS + "/services/http:prometheus:9090/proxy"
	promEvery   = 5 * time.Second // scrape and evaluation interval
	promFor     = 10 * time.Second
	promRBAC    = "e2e-prometheus"
	faultQuota  = "e2e-prometheus-fault"
	promConfDir = "/etc/prometheus/config"
)

// testPrometheus deploys Prometheus with the operator's ServiceMonitor (config/components/prometheus/
// monitor.yaml, its names final), the ServiceMonitor render.ServiceMonitor makes for each instance of
// the first fleet, the PrometheusRule (every non-zero `for` shortened to 10s: the real durations are
// covered by the promtool unit tests of test/packaging) and the dashboard's expressions as recording
// rules; then checks through Prometheus's HTTP API that every target is up, that every dashboard
// expression and every series an alert reads has data, and that stopping one beamline's database
// fires TiledInstanceNotReady for it within `for` + 2 scrapes + 1 evaluation of the operator
// reporting it not ready, and that the alert resolves once the database is back.
func testPrometheus(t *testing.T) {
	start := time.Now()
	defer func() {
		_, _ = kubectl(nil, "-n", tenantNS, "delete", "resourcequota", faultQuota, "--ignore-not-found")
		_, _ = kubectl(nil, "delete", "namespace", promNS, "--wait=false", "--ignore-not-found")
		_, _ = kubectl(nil, "delete", "clusterrolebinding", promRBAC, promRBAC+"-metrics", "--ignore-not-found")
		_, _ = kubectl(nil, "delete", "clusterrole", promRBAC, "--ignore-not-found")
	}()
	ctx := ctxT(t)

	// What the repository ships.
	comp := filepath.Join(e.repo, "config/components/prometheus")
	operatorMonitor := readYAMLObject(t, filepath.Join(comp, "monitor.yaml"))
	rules, err := promcheck.RuleFile(readYAMLObject(t, filepath.Join(comp, "rules.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	rawDash, err := os.ReadFile(filepath.Join(comp, "dashboards", "tiled-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	dash, err := promcheck.ParseDashboard(rawDash)
	if err != nil {
		t.Fatal(err)
	}
	faulty := instanceName(beamlines[len(beamlines)-1])
	exprs, err := dash.Exprs(map[string]string{
		"namespace": tenantNS, "cluster": clusterName, "instance": faulty,
		// At least four scrapes at 5s, as Grafana's $__rate_interval is.
		"__rate_interval": "1m", "__interval": "5s", "__range": "5m",
	})
	if err != nil {
		t.Fatal(err)
	}

	// The ServiceMonitor the operator renders for each instance of the first fleet, whose profile
	// sets spec.monitoring.serviceMonitor (so its pods run the metrics sidecar and the operator keeps
	// each instance's metrics Secret), with the Inputs the instance controller gives render
	// (ServiceMonitorAvailable: as if the CRD existed; this node has no prometheus-operator).
	var tis v1alpha1.TiledInstanceList
	if err := cl.List(ctx, &tis, client.InNamespace(tenantNS), client.MatchingLabels{v1alpha1.LabelCluster: clusterName}); err != nil {
		t.Fatal(err)
	}
	if len(tis.Items) != len(beamlines) {
		t.Fatalf("%d TiledInstances of %s, want %d", len(tis.Items), clusterName, len(beamlines))
	}
	monitors := []*unstructured.Unstructured{operatorMonitor}
	var urls []string
	for i := range tis.Items {
		ti := &tis.Items[i]
		if !render.Monitored(ti) {
			t.Fatalf("TiledInstance %s/%s: spec.monitoring.serviceMonitor is not true; the first fleet's profile sets it", ti.Namespace, ti.Name)
		}
		sm := render.ServiceMonitor(ti, render.Inputs{ServiceMonitorAvailable: true, ToolsImage: expansion.PostgresImage})
		if sm == nil {
			t.Fatalf("render.ServiceMonitor returns nothing for %s", ti.Name)
		}
		monitors = append(monitors, sm)
		urls = append(urls, fmt.Sprintf("http://%s.%s.svc:%d/api/v1/", fleet.NamesOf(ti).Tiled, ti.Namespace, render.Port))
	}
	scrape, err := promcheck.Translate(monitors, promcheck.Options{Interval: promEvery.String()})
	if err != nil {
		t.Fatal(err)
	}
	secret := corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "scrape-secrets", Namespace: promNS}, Data: map[string][]byte{}}
	for _, s := range scrape.Secrets {
		var src corev1.Secret
		if err := cl.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, &src); err != nil {
			t.Fatalf("the Secret a ServiceMonitor reads: %v", err)
		}
		v, ok := src.Data[s.Key]
		if !ok {
			t.Fatalf("Secret %s/%s has no key %s, which a ServiceMonitor reads", s.Namespace, s.Name, s.Key)
		}
		secret.Data[s.FileKey] = v
	}

	// The rule files: the PrometheusRule with short `for`s, and the dashboard's expressions.
	alertRules, err := rules.WithFor(promFor).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dashRules, err := promcheck.RuleGroups{Groups: []promcheck.RuleGroup{promcheck.ExprRules("tiled-dashboard", exprs)}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	promYAML, err := promcheck.PrometheusConfig(promEvery.String(), promEvery.String(),
		[]string{promConfDir + "/tiled-operator.rules.yaml", promConfDir + "/dashboard.rules.yaml"}, scrape)
	if err != nil {
		t.Fatal(err)
	}
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: promNS},
		Data: map[string]string{
			"prometheus.yml":            string(promYAML),
			"tiled-operator.rules.yaml": string(alertRules),
			"dashboard.rules.yaml":      string(dashRules),
		}}
	t.Logf("prometheus.yml:\n%s", promYAML)

	// Labelled for the manager pods' NetworkPolicy (their metrics port); the first fleet's profile
	// names promNS as its networkPolicy.metricsNamespace (the sidecars' port) and in tiledFrom (the
	// traffic pod's requests to Tiled).
	mustKubectl(t, []byte(namespaceYAML(promNS, metricsNamespaceLabel)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, []byte(fmt.Sprintf(promRBACYAML, promNS, promRBAC)), "apply", "--server-side", "-f", "-")
	for _, obj := range []any{secret, cm} {
		raw, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		mustKubectl(t, raw, "apply", "--server-side", "-f", "-")
	}
	mustKubectl(t, []byte(fmt.Sprintf(promDeployYAML, promNS, promImage)), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", promNS, "rollout", "status", "deployment/prometheus", "--timeout=2m")
	t.Logf("Prometheus ready %.0fs into the case", time.Since(start).Seconds())

	// Some Tiled traffic, so that the request histograms have series of each code the requests get
	// (the probes' are there anyway). Unauthenticated: a 401 is a request too.
	trafficPod(t, urls)

	// Every target up: the two manager pods, and each beamline's Tiled (through its Service and the
	// headless one, which the same selector matches).
	eventually(t, 2*time.Minute, 2*time.Second, "every Prometheus target up", func() (bool, string) {
		return promTargetsUp(t, tis.Items)
	})
	t.Logf("every target up %.0fs into the case", time.Since(start).Seconds())

	// Every rule evaluates without error, every dashboard expression and every series an alert reads
	// has data (rates need two scrapes in their window: retried).
	plan, err := promPlan(t, rules, exprs)
	if err != nil {
		t.Fatal(err)
	}
	// Only the checks that failed are tried again.
	pending, why := plan, []string(nil)
	for attempt := 0; attempt < 12 && len(pending) > 0; attempt++ {
		if attempt > 0 {
			time.Sleep(promEvery)
		}
		pending, why = promFailing(pending)
	}
	for _, w := range why {
		t.Error(w)
	}
	nRules := 2 * len(exprs)
	for _, g := range rules.Groups {
		nRules += len(g.Rules)
	}
	for _, p := range promRulesHealthy(nRules) {
		t.Error(p)
	}
	t.Logf("%d queries each returned a series; %d rules evaluate cleanly", len(plan)-len(pending), nRules)
	if active, err := promAlerts("TiledInstanceNotReady"); err != nil || len(active) > 0 {
		t.Fatalf("TiledInstanceNotReady before the fault: active %v (%v), want none", active, err)
	}
	t.Logf("targets and data checked %.0fs into the case", time.Since(start).Seconds())

	promFault(t, faulty)
	t.Logf("case 14 took %.0fs", time.Since(start).Seconds())
}

const promRBACYAML = `apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[2]s}
rules:
- apiGroups: [""]
  resources: [services, endpoints, pods]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[2]s}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[2]s-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tiled-operator-metrics-reader}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: %[1]s}
`

// promDeployYAML: Prometheus as 65532 under the restricted Pod Security Standard; the ServiceMonitors'
// Secret keys are files of /etc/prometheus/secrets (promcheck.Options.SecretDir's default).
const promDeployYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: prometheus, namespace: %[1]s}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app: prometheus}
  template:
    metadata:
      labels: {app: prometheus}
    spec:
      serviceAccountName: prometheus
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: prometheus
        image: %[2]s
        imagePullPolicy: IfNotPresent
        args:
        - --config.file=/etc/prometheus/config/prometheus.yml
        - --storage.tsdb.path=/prometheus
        - --storage.tsdb.retention.time=1h
        - --web.listen-address=:9090
        ports:
        - {name: http, containerPort: 9090, protocol: TCP}
        readinessProbe:
          httpGet: {path: /-/ready, port: http}
          periodSeconds: 2
        resources:
          requests: {cpu: 50m, memory: 128Mi}
          limits: {memory: 512Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/prometheus/config, readOnly: true}
        - {name: secrets, mountPath: /etc/prometheus/secrets, readOnly: true}
        - {name: data, mountPath: /prometheus}
      volumes:
      - name: config
        configMap: {name: prometheus}
      - name: secrets
        secret: {secretName: scrape-secrets, defaultMode: 0440}
      - name: data
        emptyDir: {}
---
apiVersion: v1
kind: Service
metadata: {name: prometheus, namespace: %[1]s}
spec:
  selector: {app: prometheus}
  ports:
  - {name: http, port: 9090, targetPort: http, protocol: TCP}
`

const trafficScript = `
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    for path in ("", "metadata/", "search/"):
        for _ in range(5):
            try:
                urllib.request.urlopen(url + path, timeout=20).read()
            except urllib.error.HTTPError as e:
                pass
print("E2E-OK")
`

// trafficPod makes a few requests to each Tiled from a pod of promNS and waits for it to end. The
// instances' NetworkPolicies admit promNS to Tiled's port through the first fleet's
// networkPolicy.tiledFrom (profileYAML): without it the requests would time out.
func trafficPod(t *testing.T, urls []string) {
	t.Helper()
	runPythonPod(t, pythonPod{name: "traffic", namespace: promNS, image: tiledImg(), script: trafficScript,
		args: urls, specExtra: "  automountServiceAccountToken: false\n"}, clientPodTimeout)
}

// promGet GETs a path of Prometheus's HTTP API through the API server's service proxy and decodes
// its data into v.
func promGet(path string, v any) error {
	out, err := kubectl(nil, "get", "--raw", promProxy+path)
	if err != nil {
		return err
	}
	var resp struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return fmt.Errorf("GET %s: %w: %.300s", path, err, out)
	}
	if resp.Status != "success" {
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, resp.Error)
	}
	return json.Unmarshal(resp.Data, v)
}

// promQuery returns the series of an instant query.
func promQuery(q string) ([]map[string]string, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
		} `json:"result"`
	}
	if err := promGet("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, r := range data.Result {
		out = append(out, r.Metric)
	}
	return out, nil
}

// promTargetsUp says whether every active target is up, with two manager pods among them and,
// for each instance, a target of its Service.
func promTargetsUp(t *testing.T, tis []v1alpha1.TiledInstance) (bool, string) {
	var data struct {
		ActiveTargets []struct {
			Labels     map[string]string `json:"labels"`
			ScrapePool string            `json:"scrapePool"`
			Health     string            `json:"health"`
			LastError  string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := promGet("/api/v1/targets?state=active", &data); err != nil {
		return false, err.Error()
	}
	managers := map[string]bool{}
	services := map[string]bool{}
	var down []string
	for _, tg := range data.ActiveTargets {
		// The first fleet's targets and the operator's: the other fleets' pods come and go with
		// the cases that run beside this one (E2E_PARALLEL).
		if ns := tg.Labels["namespace"]; ns != tenantNS && ns != operatorNS {
			continue
		}
		if tg.Health != "up" {
			down = append(down, fmt.Sprintf("%s %s/%s: %s %s", tg.ScrapePool, tg.Labels["namespace"], tg.Labels["pod"], tg.Health, tg.LastError))
			continue
		}
		if strings.Contains(tg.ScrapePool, "tiled-operator-controller-manager") {
			managers[tg.Labels["pod"]] = true
		}
		services[tg.Labels["namespace"]+"/"+tg.Labels["service"]] = true
	}
	if len(down) > 0 {
		return false, fmt.Sprintf("%d of %d targets not up: %v", len(down), len(data.ActiveTargets), down)
	}
	if len(managers) != 2 {
		return false, fmt.Sprintf("%d manager pods up, want 2: %v", len(managers), sortedKeys(managers))
	}
	for _, ti := range tis {
		if s := ti.Namespace + "/" + fleet.NamesOf(&ti).Tiled; !services[s] {
			return false, fmt.Sprintf("no target of Service %s up: %v", s, sortedKeys(services))
		}
	}
	return true, fmt.Sprintf("%d targets up", len(data.ActiveTargets))
}

// What the first fleet does not have, so that series the dashboard and the alerts read are absent:
// the backup series (no backup schedule until case 10; absent without one, by design), the waiting
// change's (absent while no change waits, by design; its rule is promtool-tested) and Tiled's 5xx
// responses (a healthy Tiled serves none: the selector is checked without its code matcher).
var (
	promOptionalSeries = regexp.MustCompile(`^tiled_operator_instance_(backup_|change_pending_since_)`)
	promCondition      = regexp.MustCompile(`\s*(==|!=|>=|<=|>|<)\s*-?[0-9.]+\s*$`)
	promAbsent         = regexp.MustCompile(`(?s)^\s*absent\((.*)\)\s*$`)
	promFiveXX         = regexp.MustCompile(`,\s*code=~"5\.\."|code=~"5\.\.",\s*`)
)

// promPlan returns the queries that must each return a series (what is wrong with the data when one
// does not: a dashboard expression without a series, a series an alert reads without one).
//
// Dashboard expressions are checked through their recording rules (tiled_dashboard:expr_<i>),
// except that one selecting Tiled's 5xx responses is checked without that matcher (a healthy Tiled
// answers none, and the error ratio is empty without them), one ending in a condition (`== 1`: the stalled table) is checked on its
// left-hand side, and one reading only the backup series is checked only for evaluating cleanly.
// An alert's expression is a condition a healthy fleet does not meet, so it returns nothing; each
// selector it reads must return a series instead (no alert is silent through a wrong metric or label
// name), found with the server's own parser (/api/v1/parse_query), and an absent(E) alert's E must
// return one (its inverted form: the alert is quiet because E holds).
func promPlan(t *testing.T, rules promcheck.RuleGroups, exprs []promcheck.Expr) ([]promCheck, error) {
	var plan []promCheck
	for i, ex := range exprs {
		where := "dashboard " + ex.Where
		sels, err := promSelectors(ex.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		optional := true
		for _, s := range sels {
			optional = optional && promOptionalSeries.MatchString(s.name)
		}
		switch {
		case optional:
			t.Logf("%s: reads only series the first fleet has none of (no backup schedule, no waiting change); checked for evaluating cleanly", where)
		case promFiveXX.MatchString(ex.Expr):
			plan = append(plan, promCheck{where + " (without its 5xx matcher)", promFiveXX.ReplaceAllString(ex.Expr, "")})
		case promCondition.MatchString(ex.Expr):
			plan = append(plan, promCheck{where + " (its left-hand side)", promCondition.ReplaceAllString(ex.Expr, "")})
		default:
			plan = append(plan, promCheck{where, promcheck.RecordingName(i)})
		}
	}
	for _, a := range rules.Alerts() {
		where := "alert " + a.Alert
		if m := promAbsent.FindStringSubmatch(a.Expr); m != nil {
			plan = append(plan, promCheck{where + " (absent's argument)", m[1]})
		}
		sels, err := promSelectors(a.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		for _, s := range sels {
			if promOptionalSeries.MatchString(s.name) {
				t.Logf("%s reads %s, which the first fleet has none of (no backup schedule, no waiting change): not checked for a series", where, s.without("", ""))
				continue
			}
			plan = append(plan, promCheck{where + " reads", s.without("code", "5..")})
		}
	}
	return plan, nil
}

// promCheck is a query that must return at least one series.
type promCheck struct{ where, query string }

// promFailing returns the checks whose query fails or returns no series, each with its reason.
func promFailing(checks []promCheck) ([]promCheck, []string) {
	var failing []promCheck
	var why []string
	for _, c := range checks {
		res, err := promQuery(c.query)
		switch {
		case err != nil:
			failing = append(failing, c)
			why = append(why, fmt.Sprintf("%s: %s: %v", c.where, c.query, err))
		case len(res) == 0:
			failing = append(failing, c)
			why = append(why, fmt.Sprintf("%s: %s returns no series", c.where, c.query))
		}
	}
	return failing, why
}

// promRulesHealthy returns what is wrong with the loaded rules: a rule that did not evaluate
// cleanly, or not as many rules as the two files hold.
func promRulesHealthy(want int) []string {
	var problems []string
	var groups struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := promGet("/api/v1/rules", &groups); err != nil {
		return []string{err.Error()}
	}
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				problems = append(problems, fmt.Sprintf("rule %s/%s: health %q %s", g.Name, r.Name, r.Health, r.LastError))
			}
		}
	}
	if n != want {
		problems = append(problems, fmt.Sprintf("Prometheus has %d rules, want %d", n, want))
	}
	return problems
}

type promSelector struct {
	name     string
	matchers [][3]string // label, op, value
}

// without returns the selector as PromQL, leaving out the matchers of label with value.
func (s promSelector) without(label, value string) string {
	var parts []string
	for _, m := range s.matchers {
		if m[0] == label && m[2] == value {
			continue
		}
		parts = append(parts, m[0]+m[1]+strconv.Quote(m[2]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// promSelectors returns the vector and matrix selectors of expr as the server parses it.
func promSelectors(expr string) ([]promSelector, error) {
	var ast any
	if err := promGet("/api/v1/parse_query?query="+url.QueryEscape(expr), &ast); err != nil {
		return nil, err
	}
	var out []promSelector
	var walk func(v any)
	walk = func(v any) {
		switch n := v.(type) {
		case map[string]any:
			if typ, _ := n["type"].(string); typ == "vectorSelector" || typ == "matrixSelector" {
				if ms, ok := n["matchers"].([]any); ok {
					s := promSelector{}
					for _, m := range ms {
						mm, _ := m.(map[string]any)
						name, _ := mm["name"].(string)
						op, _ := mm["type"].(string)
						value, _ := mm["value"].(string)
						if name == "__name__" && op == "=" {
							s.name = value
						}
						s.matchers = append(s.matchers, [3]string{name, op, value})
					}
					out = append(out, s)
					return
				}
			}
			for _, c := range n {
				walk(c)
			}
		case []any:
			for _, c := range n {
				walk(c)
			}
		}
	}
	walk(ast)
	if len(out) == 0 {
		return nil, fmt.Errorf("no selector found in %q (parse_query's answer changed?)", expr)
	}
	return out, nil
}

// promAlerts returns the first fleet's active (pending or firing) alerts named name, as
// "state namespace/instance tiled_cluster=<cluster>".
func promAlerts(name string) ([]string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := promGet("/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	var out []string
	for _, a := range data.Alerts {
		// The first fleet's: the instances of the cases that run beside this one are not Ready
		// at times (upgrades, restores), as they must be.
		if a.Labels["alertname"] == name && a.Labels["namespace"] == tenantNS {
			out = append(out, a.State+" "+a.Labels["namespace"]+"/"+a.Labels["instance"]+" tiled_cluster="+a.Labels["tiled_cluster"])
		}
	}
	slices.Sort(out)
	return out, nil
}

// promFault stops the database of instance and waits for TiledInstanceNotReady to fire for it,
// then brings the database back and waits for the alert to resolve and the fleet to be Ready.
//
// The database is stopped without the operator undoing it: a ResourceQuota in the tenant namespace
// allows one pod fewer than run there, and the PostgreSQL pod is deleted, so its StatefulSet cannot
// make it again. The operator owns the StatefulSet, not quotas; scaling the StatefulSet to 0 would
// be applied back at its next reconcile, and deleting the pod repeatedly races the StatefulSet
// controller. Deleting the quota brings the pod back (the StatefulSet is annotated once to wake its
// controller, which otherwise backs off up to minutes after failed creations).
func promFault(t *testing.T, instance string) {
	ctx := ctxT(t)
	var ti v1alpha1.TiledInstance
	if err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: instance}, &ti); err != nil {
		t.Fatal(err)
	}
	pg := fleet.NamesOf(&ti).Postgres
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(tenantNS)); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running++
		}
	}
	mustKubectl(t, []byte(fmt.Sprintf(`apiVersion: v1
kind: ResourceQuota
metadata: {name: %s, namespace: %s}
spec:
  hard: {pods: "%d"}
`, faultQuota, tenantNS, running-1)), "apply", "--server-side", "-f", "-")
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		// Not fatal (it also runs deferred, after a failure): each step is tried.
		for _, args := range [][]string{
			{"-n", tenantNS, "delete", "resourcequota", faultQuota, "--ignore-not-found", "--wait=true"},
			{"-n", tenantNS, "annotate", "statefulset", pg, "e2e.tiled.blueskyproject.io/wake=" + strconv.FormatInt(time.Now().Unix(), 10), "--overwrite"},
			{"-n", tenantNS, "annotate", "statefulset", pg, "e2e.tiled.blueskyproject.io/wake-"},
		} {
			if out, err := kubectl(nil, args...); err != nil {
				t.Errorf("restoring the database of %s: %v\n%s", instance, err, out)
			}
		}
	}
	defer restore()
	// Admission reads the quota's status: wait for the quota controller to fill it in.
	eventually(t, time.Minute, time.Second, "ResourceQuota "+faultQuota+" counted", func() (bool, string) {
		out, err := kubectl(nil, "-n", tenantNS, "get", "resourcequota", faultQuota, "-o", "jsonpath={.status.used.pods}")
		return err == nil && out != "", out
	})
	mustKubectl(t, nil, "-n", tenantNS, "delete", "pod", pg+"-0", "--wait=false")
	t.Logf("deleted pod %s/%s-0 under a quota of %d pods (%d ran)", tenantNS, pg, running-1, running)

	// The operator reports the instance not ready: its Ready condition False (the collector's
	// tiled_operator_instance_ready follows the status).
	var notReadyAt time.Time
	eventually(t, 2*time.Minute, time.Second, instance+" not Ready", func() (bool, string) {
		var cur v1alpha1.TiledInstance
		if err := cl.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: instance}, &cur); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, controllers.ConditionReady)
		if c == nil || c.Status == metav1.ConditionTrue {
			return false, fmt.Sprintf("Ready %+v", c)
		}
		notReadyAt = c.LastTransitionTime.Time
		return true, ""
	})
	want := fmt.Sprintf("firing %s/%s tiled_cluster=%s", tenantNS, instance, clusterName)
	eventually(t, 2*time.Minute, time.Second, "TiledInstanceNotReady firing for "+instance, func() (bool, string) {
		active, err := promAlerts("TiledInstanceNotReady")
		return err == nil && slices.Contains(active, want), fmt.Sprint(active, err)
	})
	// lastTransitionTime has whole seconds: up to 1s more than the truth.
	secs := time.Since(notReadyAt).Seconds()
	bound := promFor + 2*promEvery + promEvery + 2*time.Second // for, 2 scrapes, 1 evaluation, polling
	t.Logf("TiledInstanceNotReady fired for %s %.1fs after the operator reported it not ready (bound %s: for %s + 2 scrapes + 1 evaluation at %s, 2s polling)",
		instance, secs, bound, promFor, promEvery)
	if secs > bound.Seconds()+1 {
		t.Errorf("TiledInstanceNotReady fired %.1fs after %s was reported not ready, more than %s", secs, instance, bound)
	}
	if active, err := promAlerts("TiledInstanceNotReady"); err != nil || len(active) != 1 {
		t.Errorf("TiledInstanceNotReady: active %v (%v), want only %s", active, err, want)
	}

	restore()
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tiledinstance/"+instance, "--timeout=4m")
	eventually(t, time.Minute, time.Second, "TiledInstanceNotReady resolved", func() (bool, string) {
		active, err := promAlerts("TiledInstanceNotReady")
		return err == nil && len(active) == 0, fmt.Sprint(active, err)
	})
	mustKubectl(t, nil, "-n", tenantNS, "wait", "--for=condition=Ready", "tc/"+clusterName, "--timeout=4m")
	t.Logf("database of %s back, the alert resolved, %s Ready", instance, clusterName)
}

// readYAMLObject reads a file holding one Kubernetes object.
func readYAMLObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	obj, err := promcheck.ReadObject(file)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}
