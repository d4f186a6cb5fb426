// Package promcheck turns what config/components/prometheus ships, and the ServiceMonitors the
// operator renders, into what a plain Prometheus server (no prometheus-operator) reads:
//
//   - RuleFile: a PrometheusRule's spec as a rule file (it already is one);
//   - Dashboard: the Grafana dashboard's expressions, template variables substituted, as recording
//     rules (and their absent() alerts) that promtool and a real server evaluate;
//   - ScrapeConfigs: ServiceMonitors as scrape_configs with kubernetes_sd_configs and the
//     relabelings prometheus-operator generates, Secrets read from mounted files.
//
// test/packaging checks the first two with promtool on synthetic series; the e2e case 14
// (test/e2e/prometheus_test.go) loads all three into a real Prometheus on the node.
package promcheck
