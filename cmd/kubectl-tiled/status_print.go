package main

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// ANSI colours of the text.
const (
	colorRed    = "\x1b[31m"
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorBold   = "\x1b[1m"
	colorReset  = "\x1b[0m"
)

// statusPrinter prints a status document as text, with ages measured against now.
type statusPrinter struct {
	w     io.Writer
	now   time.Time
	color bool
}

// cell is a table cell, or a value of a header line, with its colour ("" for none).
type cell struct {
	text, color string
}

func plain(s string) cell { return cell{text: s} }

func (p *statusPrinter) paint(c cell) string {
	if !p.color || c.color == "" || c.text == "" {
		return c.text
	}
	return c.color + c.text + colorReset
}

// heading prints a section's title (bold in colour), after a blank line.
func (p *statusPrinter) heading(title string) {
	fmt.Fprintf(p.w, "\n%s\n", p.paint(cell{title, colorBold}))
}

// line prints a header line: a key in a column of 18, then the cells, separated by spaces.
func (p *statusPrinter) line(key string, cells ...cell) {
	var parts []string
	for _, c := range cells {
		if c.text != "" {
			parts = append(parts, p.paint(c))
		}
	}
	if key != "" {
		key += ":"
	}
	fmt.Fprintf(p.w, "%-18s%s\n", key, strings.Join(parts, " "))
}

// table prints rows in columns three spaces apart, measured on the text without colour.
func (p *statusPrinter) table(rows [][]cell) {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c.text))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			b.WriteString(p.paint(c))
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.text)+3))
			}
		}
		fmt.Fprintln(p.w, strings.TrimRight(b.String(), " "))
	}
}

func (p *statusPrinter) age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(p.now.Sub(t.Time))
}

// at is a time and its age: 2026-12-03T07:30:04Z (2h ago).
func (p *statusPrinter) at(t metav1.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), p.age(t))
}

// until is a time to come and how far off it is: 2026-12-08T13:00:00Z (in 5h); a time already
// past (the status not yet updated) is given as at gives it.
func (p *statusPrinter) until(t metav1.Time) string {
	if t.IsZero() || !t.After(p.now) {
		return p.at(t)
	}
	return fmt.Sprintf("%s (in %s)", t.UTC().Format(time.RFC3339), duration.HumanDuration(t.Sub(p.now)))
}

func (p *statusPrinter) print(doc *StatusDocument) {
	switch doc.Scope {
	case ScopeNamespace:
		p.printNamespace(doc)
	case ScopeCluster:
		p.printCluster(doc)
	case ScopeInstance:
		p.printInstance(doc)
	}
	if len(doc.Unreadable) > 0 {
		fmt.Fprintln(p.w)
		for _, n := range doc.Unreadable {
			fmt.Fprintf(p.w, "%s %s\n", p.paint(cell{"Note:", colorYellow}), n)
		}
	}
}

// readyCell is a Ready condition's status, coloured: green True, red False, yellow otherwise.
func readyCell(status string) cell {
	switch status {
	case "True":
		return cell{"True", colorGreen}
	case "False":
		return cell{"False", colorRed}
	case "":
		return cell{"Unknown", colorYellow}
	}
	return cell{status, colorYellow}
}

// conditionLine prints a condition of the header: its status, reason and message.
func (p *statusPrinter) conditionLine(conds []ConditionSummary, typ string) {
	var c *ConditionSummary
	for i := range conds {
		if conds[i].Type == typ {
			c = &conds[i]
		}
	}
	if c == nil {
		if typ == "Ready" {
			p.line(typ, cell{"Unknown", colorYellow}, plain("(not reported yet)"))
		} else {
			p.line(typ, plain("False"))
		}
		return
	}
	st := plain(c.Status)
	switch {
	case typ == "Ready":
		st = readyCell(c.Status)
	case typ == "Stalled" && c.Status == "True":
		st.color = colorYellow
	}
	reason := ""
	if c.Status == "True" || typ == "Ready" {
		reason = c.Reason
		if c.Message != "" {
			reason += ": " + firstLine(c.Message)
		}
	}
	p.line(typ, st, plain(reason))
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if first, _, found := strings.Cut(s, "\n"); found {
		return first + " ..."
	}
	return s
}

func (p *statusPrinter) printNamespace(doc *StatusDocument) {
	fmt.Fprintf(p.w, "%-18s%s\n", "Namespace:", doc.Namespace)
	if len(doc.Clusters) == 0 {
		fmt.Fprintf(p.w, "\nNo TiledClusters in namespace %s.\n", doc.Namespace)
	} else {
		fmt.Fprintln(p.w)
		rows := [][]cell{{plain("CLUSTER"), plain("READY"), plain("INSTANCES"), plain("UPDATED"), plain("PENDING"), plain("HELD"), plain("PAUSED"), plain("STATUS")}}
		for _, c := range doc.Clusters {
			rows = append(rows, []cell{plain(c.Name), readyCell(c.Ready),
				countCell(c.ReadyInstances, c.Instances), plain(fmt.Sprint(c.UpdatedInstances)),
				warnIf(fmt.Sprint(c.PendingInstances), c.PendingInstances > 0), warnIf(fmt.Sprint(c.HeldInstances), c.HeldInstances > 0),
				warnIf(yesNo(c.Paused), c.Paused), clusterStatusCell(&c)})
		}
		p.table(rows)
	}
	if len(doc.Instances) > 0 {
		fmt.Fprintln(p.w)
		rows := [][]cell{{plain("STANDALONE INSTANCE"), plain("READY"), plain("VERSION"), plain("DATABASE"), plain("UPGRADE"), plain("STATUS")}}
		for _, in := range doc.Instances {
			rows = append(rows, []cell{plain(in.Name), replicasCell(&in), plain(dash(in.Version)), databaseCell(in.Database),
				upgradeCell(in.Upgrade), instanceStatusCell(&in)})
		}
		p.table(rows)
	}
	p.lostCatalogs(doc.Instances)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string { return cmp.Or(s, "-") }

func warnIf(s string, warn bool) cell {
	if warn {
		return cell{s, colorYellow}
	}
	return plain(s)
}

// countCell is "ready/total", red when none is ready, yellow when some are not.
func countCell(ready, total int32) cell {
	c := plain(fmt.Sprintf("%d/%d", ready, total))
	switch {
	case total > 0 && ready == 0:
		c.color = colorRed
	case ready < total:
		c.color = colorYellow
	}
	return c
}

func replicasCell(in *InstanceSummary) cell {
	if in.Replicas == 0 {
		return plain(fmt.Sprintf("%d (autoscaled)", in.ReadyReplicas))
	}
	return countCell(in.ReadyReplicas, in.Replicas)
}

// clusterStatusCell is the Ready reason of a cluster, or Stalled with its reason.
func clusterStatusCell(c *ClusterSummary) cell {
	if c.Stalled {
		return cell{"Stalled: " + stalledReason(c.Conditions), colorYellow}
	}
	return statusReason(c.Ready, c.ReadyReason)
}

func instanceStatusCell(in *InstanceSummary) cell {
	if in.Stalled {
		return cell{"Stalled: " + stalledReason(in.Conditions), colorYellow}
	}
	return statusReason(in.Ready, in.ReadyReason)
}

func statusReason(ready, reason string) cell {
	c := readyCell(ready)
	c.text = cmp.Or(reason, c.text)
	return c
}

func stalledReason(conds []ConditionSummary) string {
	for _, c := range conds {
		if c.Type == "Stalled" {
			return cmp.Or(c.Reason, "-")
		}
	}
	return "-"
}

func databaseCell(db *DatabaseSummary) cell {
	if db == nil || db.Mode == "" {
		return plain("-")
	}
	if db.Ready {
		return plain(db.Mode + "/ready")
	}
	return cell{db.Mode + "/not ready", colorRed}
}

func upgradeCell(u *v1alpha1.UpgradeStatus) cell {
	switch {
	case u == nil:
		return plain("-")
	case u.Phase == v1alpha1.UpgradeFailed:
		return cell{string(u.Phase), colorRed}
	}
	return cell{string(u.Phase), colorYellow}
}

// backupCell is the last whole backup and its age, and whether the last one failed.
func (p *statusPrinter) backupCell(in *InstanceSummary) cell {
	failed := in.LastBackup != nil && in.LastBackup.Result != "Succeeded"
	s := in.LastSuccessful
	if s == nil && in.LastBackup != nil && !failed {
		s = in.LastBackup
	}
	var c cell
	switch {
	case s != nil:
		c = plain(fmt.Sprintf("%s (%s)", dash(s.Name), p.age(s.CompletionTime)))
	case !in.backupTarget && in.LastBackup == nil:
		return plain("no target")
	default:
		c = plain("none")
	}
	if failed {
		c.text += ", last failed"
		c.color = colorRed
	}
	return c
}

// maintenanceCell is whether the instance's maintenance calendar lets disruptive changes start now.
func maintenanceCell(m *v1alpha1.MaintenanceStatus) cell {
	if m.Open {
		return cell{"open:", colorGreen}
	}
	return cell{"closed:", colorYellow}
}

// maintenanceText says why the calendar is open or closed, and when that changes next.
func (p *statusPrinter) maintenanceText(m *v1alpha1.MaintenanceStatus) string {
	text := m.Message
	if text == "" {
		text = m.Reason
	}
	switch {
	case m.Open && m.NextClose != nil:
		text += "; closes at " + p.until(*m.NextClose)
	case !m.Open && m.NextOpen != nil:
		text += "; opens at " + p.until(*m.NextOpen)
	case !m.Open:
		text += "; does not open within a year"
	}
	return strings.TrimPrefix(text, "; ")
}

func rolloutCell(in *InstanceSummary) cell {
	var parts []string
	if in.Held {
		parts = append(parts, "held")
	}
	if in.PendingRollout != nil {
		parts = append(parts, "pending")
	}
	if len(parts) == 0 {
		return plain("-")
	}
	return cell{strings.Join(parts, ","), colorYellow}
}

func (p *statusPrinter) printCluster(doc *StatusDocument) {
	c := doc.Cluster
	p.line("Cluster", plain(c.Name), plain("(namespace "+doc.Namespace+")"))
	if c.Profiles != "" {
		p.line("Profiles", plain(c.Profiles))
	}
	p.conditionLine(c.Conditions, "Ready")
	p.conditionLine(c.Conditions, "Stalled")
	p.conditionLine(c.Conditions, "Reconciling")
	if c.ObservedGeneration != c.Generation {
		p.line("Observed", cell{fmt.Sprintf("generation %d of %d: the status below is not yet of the current spec", c.ObservedGeneration, c.Generation), colorYellow})
	}
	p.line("Rollout", plain(fmt.Sprintf("%d of %d instances updated, %d ready,", c.UpdatedInstances, c.Instances, c.ReadyInstances)),
		warnIf(fmt.Sprintf("%d pending,", c.PendingInstances), c.PendingInstances > 0),
		warnIf(fmt.Sprintf("%d held;", c.HeldInstances), c.HeldInstances > 0),
		plain("maxUnavailable "+c.MaxUnavailable))
	paused := plain("no")
	if c.Paused {
		paused = cell{"yes: the operator writes nothing for this cluster (spec.paused)", colorYellow}
	}
	p.line("Paused", paused)
	for i, h := range c.Held {
		key := ""
		if i == 0 {
			key = "Held"
		}
		fields := strings.Join(h.Fields, ", ")
		if more := int(h.FieldCount) - len(h.Fields); more > 0 {
			fields += fmt.Sprintf(" (+%d more)", more)
		}
		since := ""
		if h.Since != nil {
			since = "since " + p.age(*h.Since) + ": "
		}
		p.line(key, cell{h.Name, colorYellow}, plain(since+cmp.Or(fields, "-")))
	}

	p.heading("Instances")
	if len(doc.Instances) == 0 {
		fmt.Fprintln(p.w, "No TiledInstances yet.")
	} else {
		rows := [][]cell{{plain("NAME"), plain("READY"), plain("VERSION"), plain("DATABASE"), plain("REVISION"),
			plain("LAST BACKUP"), plain("UPGRADE"), plain("ROLLOUT"), plain("STATUS")}}
		for i := range doc.Instances {
			in := &doc.Instances[i]
			rev := "-"
			if in.Database != nil {
				rev = dash(in.Database.CatalogRevision)
			}
			rows = append(rows, []cell{plain(in.Name), replicasCell(in), plain(dash(in.Version)), databaseCell(in.Database), plain(rev),
				p.backupCell(in), upgradeCell(in.Upgrade), rolloutCell(in), instanceStatusCell(in)})
		}
		p.table(rows)
	}
	p.lostCatalogs(doc.Instances)
	p.pendingAdditions(doc.Instances)
	p.printEvents(doc)
}

func (p *statusPrinter) printEvents(doc *StatusDocument) {
	p.heading("Warning events (newest first)")
	if len(doc.Events) == 0 {
		if unreadable(doc, "events") {
			fmt.Fprintln(p.w, "Not readable: see the note below.")
		} else {
			fmt.Fprintln(p.w, "None.")
		}
		return
	}
	rows := [][]cell{{plain("AGE"), plain("OBJECT"), plain("REASON"), plain("MESSAGE")}}
	for _, e := range doc.Events {
		age := p.age(e.LastSeen)
		if e.Count > 1 {
			age += fmt.Sprintf(" (x%d)", e.Count)
		}
		rows = append(rows, []cell{plain(age), plain(e.Object), {e.Reason, colorYellow}, plain(firstLine(e.Message))})
	}
	p.table(rows)
}

func unreadable(doc *StatusDocument, what string) bool {
	for _, n := range doc.Unreadable {
		if strings.HasPrefix(n, what+" ") {
			return true
		}
	}
	return false
}

func (p *statusPrinter) printInstance(doc *StatusDocument) {
	in := doc.Instance
	where := "namespace " + doc.Namespace
	if in.Cluster != "" {
		where += ", cluster " + in.Cluster
	} else {
		where += ", standalone"
	}
	p.line("Instance", plain(in.Name), plain("("+where+")"))
	p.conditionLine(in.Conditions, "Ready")
	p.conditionLine(in.Conditions, "Stalled")
	p.conditionLine(in.Conditions, "Reconciling")
	if in.Observed != in.Generation {
		p.line("Observed", cell{fmt.Sprintf("generation %d of %d: the status below is not yet of the current spec", in.Observed, in.Generation), colorYellow})
	}
	p.line("Image", plain(dash(in.Image)))
	p.line("Version", plain(dash(in.Version)))
	if in.Replicas == 0 {
		p.line("Replicas", plain(fmt.Sprintf("%d ready (autoscaled)", in.ReadyReplicas)))
	} else {
		rc := countCell(in.ReadyReplicas, in.Replicas)
		rc.text = fmt.Sprintf("%d of %d ready", in.ReadyReplicas, in.Replicas)
		p.line("Replicas", rc)
	}
	if in.URL != "" {
		p.line("URL", plain(in.URL))
	}
	if db := in.Database; db != nil && db.Mode != "" {
		state := databaseCell(db)
		state.text = db.Mode + ", " + strings.TrimPrefix(state.text, db.Mode+"/") + ";"
		p.line("Database", state, plain(fmt.Sprintf("catalog revision %s, auth revision %s", dash(db.CatalogRevision), dash(db.AuthRevision))))
	} else {
		p.line("Database", plain("not reported yet"))
	}
	if in.CatalogLost != nil {
		head, rest := p.catalogLost(in)
		p.line("Catalog lost", head...)
		for _, r := range rest {
			p.line("", r)
		}
	}
	p.backupLines(in)
	if m := in.LastMigration; m != nil {
		res := plain(m.Result)
		if m.Result != "Succeeded" {
			res.color = colorRed
		}
		text := fmt.Sprintf("%s -> %s (catalog %s -> %s) at %s", dash(m.FromVersion), dash(m.ToVersion), dash(m.FromRevision), dash(m.ToRevision), p.at(m.CompletionTime))
		if m.Backup != "" {
			text += ", backup " + m.Backup
		}
		p.line("Last migration", res, plain(text))
	} else {
		p.line("Last migration", plain("none"))
	}
	if r := in.InPlaceRestore; r != nil {
		res := plain(string(r.Phase))
		switch r.Phase {
		case v1alpha1.InPlaceRestoreSucceeded:
		case v1alpha1.InPlaceRestoreFailed, v1alpha1.InPlaceRestoreRefused:
			res.color = colorRed
		default:
			res.color = colorYellow
		}
		text := fmt.Sprintf("backup %s, request %s by %s, started %s", r.Backup, r.Request, cmp.Or(r.RequestedBy, "an unnamed requester"), p.at(r.StartTime))
		if r.PreRestoreBackup != "" {
			text += ", the databases before it are " + r.PreRestoreBackup
		}
		p.line("Restore in place", res, plain(text))
		if r.Message != "" {
			p.line("", cell{firstLine(r.Message), colorRed})
		}
	}
	if u := in.Upgrade; u != nil {
		text := fmt.Sprintf("%s -> %s, started %s", dash(cmp.Or(u.FromVersion, u.FromImage)), dash(cmp.Or(u.ToVersion, u.ToImage)), p.at(u.StartTime))
		if u.PhaseTime != nil {
			text += ", phase since " + p.age(*u.PhaseTime)
		}
		p.line("Upgrade", upgradeCell(u), plain(text))
		if u.Message != "" {
			p.line("", cell{firstLine(u.Message), colorRed})
		}
	} else {
		p.line("Upgrade", plain("none"))
	}
	if r := in.PendingRollout; r != nil {
		change := r.Change
		if change == "" {
			change = "Render"
		}
		text := change + " change of StatefulSet " + r.StatefulSet
		if r.Since != nil {
			text += ", since " + p.at(*r.Since)
		}
		n := max(int(r.DifferCount), len(r.Differs))
		text += fmt.Sprintf(", %d path(s) differ", n)
		if len(r.Differs) > 0 {
			text += ":"
		}
		waits := "waiting for the cluster's rollout:"
		switch {
		case r.Approval == v1alpha1.ApprovalRequired:
			waits = "waiting for approval:"
		case r.Window != "":
			waits = "waiting for the maintenance calendar:"
		}
		p.line("Pending rollout", cell{waits, colorYellow}, plain(text))
		for _, d := range r.Differs {
			p.line("", plain("  "+d))
		}
		if more := n - len(r.Differs); more > 0 && len(r.Differs) > 0 {
			p.line("", plain(fmt.Sprintf("  (+%d more)", more)))
		}
		for _, a := range pendingAdds(r) {
			p.line("", a)
		}
		if r.Change == "Upgrade" && r.From != "" {
			p.line("", plain("upgrade: from "+r.From+" to "+r.To+" (with its migration)"))
		}
		if r.Window != "" {
			p.line("", plain("waits: "+r.Window))
		}
		switch r.Approval {
		case v1alpha1.ApprovalRequired:
			p.line("", cell{"approval needed: kubectl tiled approve " + in.Name + " --hash " + r.ChangeHash, colorYellow})
		case v1alpha1.ApprovalApproved:
			p.line("", plain("approved: change "+r.ChangeHash))
		}
	} else {
		p.line("Pending rollout", plain("none"))
	}
	if in.Held {
		p.line("Held", cell{"yes: the cluster holds back a change of this instance (spec.instances[].hold)", colorYellow})
	}
	if m := in.Maintenance; m != nil {
		text := p.maintenanceText(m)
		if r := in.PendingRollout; r != nil && r.Approval == v1alpha1.ApprovalRequired {
			text += "; approval needed"
		}
		p.line("Maintenance", maintenanceCell(m), plain(text))
	}
	if a := in.LastApproval; a != nil {
		by := a.ApprovedBy
		if by == "" {
			by = "(not stamped)"
		}
		text := "change " + a.ChangeHash + " by " + by
		if a.Time != nil {
			text += " at " + p.at(*a.Time)
		}
		if a.ThroughWindow {
			text += ", through the window"
		}
		p.line("Last approval", plain(text))
	}
	if a := in.RefusedApproval; a != nil {
		p.line("Refused approval", cell{a.Message, colorRed})
	}
	if n := in.Notifications; n != nil && n.Failures > 0 {
		p.line("Notifications", cell{fmt.Sprintf("failing (%d in a row, retried with backoff): %s", n.Failures, n.LastError), colorRed})
	}

	p.heading("Conditions")
	if len(in.Conditions) == 0 {
		fmt.Fprintln(p.w, "None reported yet.")
	} else {
		rows := [][]cell{{plain("TYPE"), plain("STATUS"), plain("REASON"), plain("AGE"), plain("MESSAGE")}}
		for _, c := range in.Conditions {
			st := plain(c.Status)
			switch {
			case c.Type == "Ready" || c.Type == "DatabaseReady" || c.Type == "StreamingCacheReady" || c.Type == "IngressEnabled":
				st = readyCell(c.Status)
			case c.Status == "True" && (c.Type == "Stalled" || c.Type == "RolloutPending" || c.Type == "ExternalEdits"):
				st.color = colorYellow
			}
			age := "-"
			if c.LastTransitionTime != nil {
				age = p.age(*c.LastTransitionTime)
			}
			rows = append(rows, []cell{plain(c.Type), st, plain(dash(c.Reason)), plain(age), plain(firstLine(c.Message))})
		}
		p.table(rows)
	}

	p.heading("Pods")
	switch {
	case len(doc.Pods) > 0:
		rows := [][]cell{{plain("NAME"), plain("COMPONENT"), plain("READY"), plain("STATUS"), plain("RESTARTS"), plain("AGE")}}
		for _, pod := range doc.Pods {
			st := plain(pod.Status)
			if pod.Status != "Running" && pod.Status != "Succeeded" && pod.Status != "Completed" {
				st.color = colorRed
			}
			restarts := warnIf(fmt.Sprint(pod.Restarts), pod.Restarts > 0)
			rows = append(rows, []cell{plain(pod.Name), plain(dash(pod.Component)), plain(pod.Ready), st, restarts, plain(p.age(pod.Created))})
		}
		p.table(rows)
	case unreadable(doc, "pods"):
		fmt.Fprintln(p.w, "Not readable: see the note below.")
	default:
		fmt.Fprintln(p.w, "None.")
	}
	p.printEvents(doc)
}

// backupLines prints the last backup, and the last whole one when the last failed.
func (p *statusPrinter) backupLines(in *InstanceSummary) {
	record := func(key string, r *v1alpha1.BackupRecord) {
		if r.Result == "Succeeded" {
			p.line(key, plain("Succeeded"), plain(fmt.Sprintf("%s at %s, %s in %ds", dash(r.Name), p.at(r.CompletionTime), humanBytes(r.Bytes), r.Seconds)))
			return
		}
		p.line(key, cell{cmp.Or(r.Result, "Failed"), colorRed}, plain(fmt.Sprintf("at %s, job %s: %s", p.at(r.CompletionTime), r.Job, firstLine(cmp.Or(r.Message, "no message")))))
	}
	switch {
	case in.LastBackup != nil:
		record("Last backup", in.LastBackup)
		if in.LastBackup.Result != "Succeeded" {
			if in.LastSuccessful != nil {
				record("Last successful", in.LastSuccessful)
			} else {
				p.line("Last successful", cell{"none", colorRed})
			}
		}
	case !in.backupTarget:
		p.line("Last backup", plain("none: no backup target (spec.backup sets neither claim nor s3)"))
	default:
		p.line("Last backup", plain("none yet"))
	}
}

// catalogLost says an instance's lost catalog (status.catalogLost): the phase, how it was found,
// the revision lost, then what restores it and the command that accepts the loss.
func (p *statusPrinter) catalogLost(in *InstanceSummary) (head []cell, rest []cell) {
	l := in.CatalogLost
	phase := cell{string(l.Phase), colorYellow}
	if l.Phase == v1alpha1.CatalogLostStalled || l.Message != "" {
		phase.color = colorRed
	}
	phase.text += ","
	head = []cell{phase, plain(fmt.Sprintf("found %s: %s; catalog revision %s lost", p.at(l.Time), lostHow(l), dash(l.Revision)))}
	switch {
	case l.Backup == "":
		rest = append(rest, cell{"restore: no whole backup to restore it from", colorRed})
	case l.Phase == v1alpha1.CatalogLostRestoring:
		rest = append(rest, plain("restore: "+l.Backup+", the newest whole backup, is being restored (spec.backup.onCatalogLost: RestoreLatest)"))
	case l.Phase == v1alpha1.CatalogLostRestored:
		at := "an unknown time"
		if l.RestoreCompletionTime != nil {
			at = p.at(*l.RestoreCompletionTime)
		}
		rest = append(rest, plain("restore: "+l.Backup+" restored at "+at+"; waiting for a Tiled pod to report the catalog"))
	default:
		rest = append(rest, plain("restore: "+l.Backup+", the newest whole backup (set spec.backup.onCatalogLost: RestoreLatest to restore it)"))
	}
	if l.Message != "" {
		rest = append(rest, cell{"failed:  " + firstLine(l.Message), colorRed})
	}
	switch {
	case in.AcceptCatalogLoss != "":
		rest = append(rest, plain("accept:  "+in.AcceptCatalogLoss+" (starts Tiled with an empty catalog)"))
	case l.Phase == v1alpha1.CatalogLostStalled:
		rest = append(rest, plain("accept:  once the new claim exists, annotate the instance "+v1alpha1.AnnotationAcceptCatalogLoss+"=<its UID>"))
	}
	return head, rest
}

// lostHow says how the loss was found.
func lostHow(l *v1alpha1.CatalogLost) string {
	switch l.Reason {
	case "ClaimReplaced":
		return fmt.Sprintf("database claim %s replaced (UID %s, was %s)", l.Claim, dash(l.NewClaimUID), dash(l.OldClaimUID))
	case "ClaimDeleted":
		s := fmt.Sprintf("database claim %s (UID %s) deleted", l.Claim, dash(l.OldClaimUID))
		if l.NewClaimUID != "" {
			s += fmt.Sprintf(", made again empty (UID %s)", l.NewClaimUID)
		}
		return s
	}
	if l.Claim != "" {
		return fmt.Sprintf("the migrate step found the catalog database empty on claim %s", l.Claim)
	}
	return "the migrate step found the (external) catalog database empty"
}

// lostCatalogs prints, under the instances of a cluster or a namespace, each lost catalog.
func (p *statusPrinter) lostCatalogs(instances []InstanceSummary) {
	first := true
	for i := range instances {
		in := &instances[i]
		if in.CatalogLost == nil {
			continue
		}
		if first {
			p.heading("Lost catalogs")
			first = false
		}
		head, rest := p.catalogLost(in)
		parts := []string{p.paint(cell{in.Name + ":", colorBold})}
		for _, c := range head {
			parts = append(parts, p.paint(c))
		}
		fmt.Fprintln(p.w, strings.Join(parts, " "))
		for _, r := range rest {
			fmt.Fprintf(p.w, "  %s\n", p.paint(r))
		}
	}
}

// pendingAdds are the lines that say what a pending render change adds: the images none of the
// instance's StatefulSets runs yet and the objects it does not have.
func pendingAdds(r *v1alpha1.PendingRollout) []cell {
	var out []cell
	if len(r.AddedImages) > 0 {
		out = append(out, cell{"adds images:  " + strings.Join(r.AddedImages, ", "), colorYellow})
	}
	if len(r.AddedObjects) > 0 {
		out = append(out, cell{"adds objects: " + strings.Join(r.AddedObjects, ", "), colorYellow})
	}
	return out
}

// pendingAdditions prints, under a cluster's instances, what their pending render changes add.
func (p *statusPrinter) pendingAdditions(instances []InstanceSummary) {
	first := true
	for i := range instances {
		in := &instances[i]
		if in.PendingRollout == nil || len(in.PendingRollout.AddedImages) == 0 && len(in.PendingRollout.AddedObjects) == 0 {
			continue
		}
		if first {
			p.heading("Pending rollouts add (images to have pulled or mirrored, objects to allow, before they roll)")
			first = false
		}
		fmt.Fprintln(p.w, p.paint(cell{in.Name + ":", colorBold}))
		for _, a := range pendingAdds(in.PendingRollout) {
			fmt.Fprintf(p.w, "  %s\n", p.paint(a))
		}
	}
}
