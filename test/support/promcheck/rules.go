package promcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// RuleGroups is a Prometheus rule file.
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting or a recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RuleFile returns the spec of a PrometheusRule (monitoring.coreos.com/v1) as a rule file: the
// spec is one. It fails on a field a plain rule file does not have.
func RuleFile(rule *unstructured.Unstructured) (RuleGroups, error) {
	var g RuleGroups
	if rule.GetKind() != "PrometheusRule" {
		return g, fmt.Errorf("%s %s is not a PrometheusRule", rule.GetKind(), rule.GetName())
	}
	spec, ok := rule.Object["spec"]
	if !ok {
		return g, fmt.Errorf("PrometheusRule %s has no spec", rule.GetName())
	}
	raw, err := yaml.Marshal(spec)
	if err != nil {
		return g, err
	}
	if err := yaml.UnmarshalStrict(raw, &g); err != nil {
		return g, fmt.Errorf("the spec of PrometheusRule %s is not a rule file: %w", rule.GetName(), err)
	}
	return g, nil
}

// Marshal returns the rule file as YAML.
func (g RuleGroups) Marshal() ([]byte, error) { return yaml.Marshal(g) }

// WithFor returns a copy whose alerts with a non-zero `for` wait d instead (an e2e cannot wait an
// hour; promtool's unit tests cover the real durations).
func (g RuleGroups) WithFor(d time.Duration) RuleGroups {
	out := RuleGroups{}
	for _, grp := range g.Groups {
		c := grp
		c.Rules = append([]Rule(nil), grp.Rules...)
		for i, r := range c.Rules {
			if r.Alert != "" && r.For != "" && r.For != "0m" && r.For != "0s" && r.For != "0" {
				c.Rules[i].For = d.String()
			}
		}
		out.Groups = append(out.Groups, c)
	}
	return out
}

// Alerts returns the alerting rules of every group, in order.
func (g RuleGroups) Alerts() []Rule {
	var out []Rule
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// DashboardVar matches a Grafana template variable in an expression: ${name}, ${name:format} or $name.
var DashboardVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// Substitute replaces the template variables of expr with values; it fails on a variable values
// does not have.
func Substitute(expr string, values map[string]string) (string, error) {
	var missing []string
	out := DashboardVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := DashboardVar.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("expression %q uses %v, which have no value", expr, missing)
	}
	return out, nil
}

// Target is one query of a dashboard panel.
type Target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource map[string]any `json:"datasource"`
}

// Panel is a dashboard panel (rows nest theirs).
type Panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	Targets    []Target       `json:"targets"`
	Panels     []Panel        `json:"panels"`
}

// Variable is a template variable of a dashboard.
type Variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// DashboardDoc is the part of a Grafana dashboard these checks read.
type DashboardDoc struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// ParseDashboard decodes a Grafana dashboard's JSON.
func ParseDashboard(raw []byte) (DashboardDoc, error) {
	var d DashboardDoc
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&d); err != nil {
		return d, fmt.Errorf("the dashboard is not valid JSON: %w", err)
	}
	return d, nil
}

// Expr is one expression of a dashboard, its variables substituted; Where names it for a person.
type Expr struct {
	Where string
	Expr  string
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// Exprs returns every panel target's expression and, for every query variable
// label_values(selector, label), count by (label) (selector), with the variables substituted.
func (d DashboardDoc) Exprs(values map[string]string) ([]Expr, error) {
	var out []Expr
	var errs []error
	var walk func(ps []Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			for _, tg := range p.Targets {
				e, err := Substitute(tg.Expr, values)
				if err != nil {
					errs = append(errs, fmt.Errorf("panel %d %q target %s: %w", p.ID, p.Title, tg.RefID, err))
					continue
				}
				out = append(out, Expr{fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), e})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			errs = append(errs, fmt.Errorf("variable $%s: query %q is not label_values(selector, label)", v.Name, s))
			continue
		}
		sel, err := Substitute(m[1], values)
		if err != nil {
			errs = append(errs, fmt.Errorf("variable $%s: %w", v.Name, err))
			continue
		}
		out = append(out, Expr{"variable $" + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], sel)})
	}
	return out, errors.Join(errs...)
}

// RecordingName is the series the recording rule of the i-th expression of ExprRules writes.
func RecordingName(i int) string { return fmt.Sprintf("tiled_dashboard:expr_%d", i) }

// ExprRules returns a rule group with, for each expression, a recording rule (RecordingName) and
// an alert DashboardExpressionEmpty{expression="<i>"} on its absence: an empty expression fires.
func ExprRules(name string, exprs []Expr) RuleGroup {
	g := RuleGroup{Name: name}
	for i, e := range exprs {
		rec := RecordingName(i)
		g.Rules = append(g.Rules,
			Rule{Record: rec, Expr: e.Expr},
			Rule{Alert: "DashboardExpressionEmpty", Expr: "absent(" + rec + ")", Labels: map[string]string{"expression": fmt.Sprint(i)}})
	}
	return g
}
