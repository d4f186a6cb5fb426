//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/calendar"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/notify"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// The facility's calendar on the node (issue 46's e2e "done when"; docs/maintenance.md): a fleet
// whose profile declares a maintenance window that opens a minute into the case and exclusions, a
// change of the Tiled pod template that waits for the window and starts when it opens within the
// rollout budget; under approval Manual a change that waits for `kubectl tiled approve`, the
// approver named; a stale approval refused; and a webhook receiver pod that counts every
// notification by its key, across a leader kill too (case 23).
//
// The gated change is a Tiled pod annotation of the profile (tiled.podAnnotations), a change of the
// Tiled pod template from the spec like an image's: the node has one Tiled image per version, and a
// change of version is a Tiled upgrade with its backup and migration (case 9), gated the same way
// (integration-tested) but minutes long on the node's two cores.

const (
	calendarNS      = "e2e-calendar"
	calendarCluster = "cal"
	// calendarAnnotation is the Tiled pod annotation whose value each gated change sets.
	calendarAnnotation = "e2e-calendar"
	// notifyReceiverName names the webhook receiver's pod and Service in a case's namespace.
	notifyReceiverName = "notify-receiver"
	notifyNS           = "e2e-notify"
	// beamRunAfterOpen: the exclusion beam-run starts this long after the window opens, inside it:
	// the open calendar closes then (status.maintenance.nextClose), before the window's end.
	beamRunAfterOpen = 8 * time.Minute
	// gateRead is how long before the window opens a read must have started to count a change it
	// sees as leaked (the read and the operator's wake-up race at the opening itself).
	gateRead = 500 * time.Millisecond
)

var calendarBeamlines = []string{"c1", "c2"}

// notifyReceiverScript serves POSTs on 8080 and prints one line per notification: E2E-NOTIFY, its
// X-Tiled-Notification-Id and its body.
var notifyReceiverScript = fmt.Sprintf(`
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        print("E2E-NOTIFY", self.headers.get(%q), body.decode(), flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
print("E2E-OK listening", flush=True)
http.server.HTTPServer(("", 8080), H).serve_forever()
`, notify.HeaderID)

var notifyLine = regexp.MustCompile(`(?m)^E2E-NOTIFY (\S+) (.*)$`)

// receiverURL is the webhook URL of namespace ns's receiver (its Service).
func receiverURL(ns string) string {
	return "http://" + notifyReceiverName + "." + ns + ".svc:8080/hooks/tiled"
}

// startNotifyReceiver starts the webhook receiver pod of namespace ns and its Service, and waits
// until it listens.
func startNotifyReceiver(t *testing.T, ns string) {
	t.Helper()
	mustKubectl(t, []byte(fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {e2e-notify: %[1]s}
  ports: [{name: http, port: 8080, targetPort: 8080}]
`, notifyReceiverName, ns)), "apply", "--server-side", "-f", "-")
	startPythonPod(t, pythonPod{name: notifyReceiverName, namespace: ns, image: tiledImg(), script: notifyReceiverScript,
		labels: "e2e-notify: " + notifyReceiverName, specExtra: "  automountServiceAccountToken: false\n"})
	eventually(t, clientPodTimeout, time.Second, "the notification receiver in "+ns+" listens", func() (bool, string) {
		logs, err := kubectl(nil, "-n", ns, "logs", notifyReceiverName, "-c", "client")
		return err == nil && strings.Contains(logs, "E2E-OK listening"), logs + fmt.Sprint(err)
	})
}

// calendarProfileYAML is a profile of namespace ns (label facility) with streaming off, the Tiled
// pod annotation at rev, notifications to the namespace's receiver, and spec.maintenance as given
// (YAML under it, indented four spaces; empty: none).
func calendarProfileYAML(ns, name, facility, rev, maintenance string) string {
	p := streamingOff(profileYAMLIn(ns, name, facility, tiledImg()))
	// The calendar cases run beside the long cases on the node's two cores, and what they prove
	// is gating, not throughput: their pods ask for even less CPU than the profile's, so that the
	// other cases' pods stay schedulable (bad input's pods stayed Pending, "Insufficient cpu", in the
	// rehearsal of 691282e).
	p = strings.ReplaceAll(p, "requests: {cpu: 10m,", "requests: {cpu: 5m,")
	p = strings.Replace(p, "    imagePullPolicy: IfNotPresent\n",
		fmt.Sprintf("    imagePullPolicy: IfNotPresent\n    podAnnotations: {%s: %q}\n", calendarAnnotation, rev), 1)
	p += fmt.Sprintf("  notifications:\n    webhook: {url: %q}\n", receiverURL(ns))
	if maintenance != "" {
		p += "  maintenance:\n" + maintenance
	}
	return p
}

// tiledTemplateRevs returns, by instance, the calendar annotation of its Tiled StatefulSet's pod
// template: which gated change the StatefulSet carries.
func tiledTemplateRevs(t *testing.T, ns string, instances []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range instances {
		var sts appsv1.StatefulSet
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: fleet.NamesOf(getInstanceIn(t, ns, name)).Tiled}, &sts); err != nil {
			t.Fatal(err)
		}
		out[name] = sts.Spec.Template.Annotations[calendarAnnotation]
	}
	return out
}

// rolledToRev says whether each instance's Tiled StatefulSet carries rev and has rolled it to every
// replica, Ready.
func rolledToRev(t *testing.T, ns string, instances []string, rev string) (bool, string) {
	for _, name := range instances {
		var sts appsv1.StatefulSet
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: fleet.NamesOf(getInstanceIn(t, ns, name)).Tiled}, &sts); err != nil {
			return false, err.Error()
		}
		st := sts.Status
		if sts.Spec.Template.Annotations[calendarAnnotation] != rev || st.ObservedGeneration != sts.Generation ||
			st.UpdateRevision != st.CurrentRevision || st.UpdatedReplicas != *sts.Spec.Replicas || st.ReadyReplicas != *sts.Spec.Replicas {
			return false, fmt.Sprintf("%s: template %q (want %q), status %+v", name, sts.Spec.Template.Annotations[calendarAnnotation], rev, st)
		}
	}
	return true, ""
}

// leakedRevs counts the instances whose Tiled StatefulSet carries a revision other than want: a
// gated change applied before its window or approval.
func leakedRevs(t *testing.T, ns string, instances []string, want, when string) int {
	t.Helper()
	n := 0
	for name, rev := range tiledTemplateRevs(t, ns, instances) {
		if rev != want {
			t.Errorf("%s: its Tiled StatefulSet carries change %q %s (want %q): a gated change leaked", name, rev, when, want)
			n++
		}
	}
	return n
}

// waitPending waits until each instance's spec carries rev and its change waits as check says,
// and returns each instance's pending change.
func waitPending(t *testing.T, ns string, instances []string, rev string, timeout time.Duration, what string,
	check func(ti *v1alpha1.TiledInstance) string) map[string]*v1alpha1.PendingRollout {
	t.Helper()
	out := map[string]*v1alpha1.PendingRollout{}
	eventually(t, timeout, 500*time.Millisecond, what, func() (bool, string) {
		for _, name := range instances {
			ti := getInstanceIn(t, ns, name)
			if ti.Spec.Tiled == nil || ti.Spec.Tiled.PodAnnotations[calendarAnnotation] != rev {
				return false, name + ": the cluster has not applied the change to its spec yet"
			}
			pr := ti.Status.PendingRollout
			if pr == nil || ti.Status.ObservedGeneration != ti.Generation {
				return false, fmt.Sprintf("%s: generation %d observed %d, pendingRollout %+v", name, ti.Generation, ti.Status.ObservedGeneration, pr)
			}
			if why := check(ti); why != "" {
				return false, name + ": " + why
			}
			out[name] = pr
		}
		return true, ""
	})
	return out
}

// pendingReason is "" when ti's RolloutPending condition has reason, else what it has.
func pendingReason(ti *v1alpha1.TiledInstance, reason string) string {
	if c := condition(ti, controllers.ConditionRolloutPending); c == nil || c.Reason != reason {
		return fmt.Sprintf("RolloutPending %+v, want reason %s", c, reason)
	}
	return ""
}

// waitDelivered waits until each instance records the notification key(ti) as delivered.
func waitDelivered(t *testing.T, ns string, instances []string, key func(name string) string) {
	t.Helper()
	eventually(t, 2*time.Minute, 500*time.Millisecond, "notifications recorded as delivered", func() (bool, string) {
		for _, name := range instances {
			ti := getInstanceIn(t, ns, name)
			if !deliveredKeys(ti)[key(name)] {
				return false, fmt.Sprintf("%s: %s not in status.notifications %+v", name, key(name), ti.Status.Notifications)
			}
		}
		return true, ""
	})
}

func deliveredKeys(ti *v1alpha1.TiledInstance) map[string]bool {
	out := map[string]bool{}
	if n := ti.Status.Notifications; n != nil {
		for _, d := range n.Delivered {
			out[d.Key] = true
		}
	}
	return out
}

// notificationTally waits, up to two minutes, until the receiver of namespace ns has received every
// expected key (by instance: namespace/name keys) and every key an instance of ns records as
// delivered, then counts the keys received more than once and those expected or recorded but never
// received. Each POST's body must name the key of its header.
func notificationTally(t *testing.T, ns string, expected map[string][]string) (dup, missed int) {
	t.Helper()
	var got map[string]int
	var want map[string]bool
	deadline := time.Now().Add(2 * time.Minute)
	for {
		want = map[string]bool{}
		var list v1alpha1.TiledInstanceList
		if err := cl.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			for k := range deliveredKeys(&list.Items[i]) {
				want[list.Items[i].Name+" "+k] = true
			}
		}
		for name, keys := range expected {
			for _, k := range keys {
				want[name+" "+k] = true
			}
		}
		got = notificationsReceived(t, ns)
		all := true
		for k := range want {
			all = all && got[k] > 0
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, k := range sortedKeys(got) {
		if got[k] > 1 {
			t.Errorf("notification %s received %d times (goal once)", k, got[k])
			dup++
		}
		if !want[k] {
			t.Logf("notification %s received, neither expected nor recorded as delivered (sent once)", k)
		}
	}
	for _, k := range sortedKeys(want) {
		if got[k] == 0 {
			t.Errorf("notification %s never received (expected, or recorded in status.notifications.delivered)", k)
			missed++
		}
	}
	t.Logf("notifications received in %s: %v", ns, got)
	return dup, missed
}

// notificationsReceived reads the receiver's log: how many POSTs arrived for each "instance key".
func notificationsReceived(t *testing.T, ns string) map[string]int {
	t.Helper()
	logs, err := kubectl(nil, "-n", ns, "logs", notifyReceiverName, "-c", "client")
	if err != nil {
		t.Fatalf("the receiver's log: %v", err)
	}
	got := map[string]int{}
	for _, m := range notifyLine.FindAllStringSubmatch(logs, -1) {
		var p notify.Payload
		if err := json.Unmarshal([]byte(m[2]), &p); err != nil || p.Key != m[1] || p.Namespace != ns {
			t.Errorf("a notification whose body does not match its header %s (%v): %s", m[1], err, m[2])
			continue
		}
		got[p.Instance+" "+p.Key]++
	}
	return got
}

// addCalendarFigures adds a case's counts to the suite's figures (cases 22 and 23 both count).
func addCalendarFigures(dup, missed, leaked int) {
	figMu.Lock()
	defer figMu.Unlock()
	add := func(p **int, v int) {
		if *p == nil {
			*p = new(int)
		}
		**p += v
	}
	add(&fig.NotificationsDuplicated, dup)
	add(&fig.NotificationsMissed, missed)
	add(&fig.GatedChangesLeaked, leaked)
}

// firstLeft is when the first of pods (name/uid) was seen terminating or gone at or after from.
func (w *upgradeWatch) firstLeft(pods map[string]bool, from time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, tr := range w.log {
		if !tr.at.Before(from) && pods[tr.pod] && (tr.gone || tr.state.terminating) {
			return tr.at, true
		}
	}
	return time.Time{}, false
}

// approverName is the user the API server authenticates the suite's kubeconfig as.
func approverName(t *testing.T) string {
	t.Helper()
	u := strings.TrimSpace(mustKubectl(t, nil, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"))
	if u == "" {
		t.Fatal("kubectl auth whoami names no user")
	}
	return u
}

// caseNamespace makes a case's own (restricted) namespace, deleted when the case ends unless it
// failed (kept for inspection).
func caseNamespace(t *testing.T, ns string) {
	t.Helper()
	mustKubectl(t, []byte(namespaceYAML(ns)), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("namespace %s is kept for inspection", ns)
			return
		}
		_, _ = kubectl(nil, "delete", "namespace", ns, "--wait=false")
	})
}

// newNamespaceForCase is caseNamespace with volumes free PersistentVolumes and its default
// ServiceAccount made.
func newNamespaceForCase(t *testing.T, ns string, volumes int) {
	t.Helper()
	caseNamespace(t, ns)
	requireFreeVolumes(t, volumes)
	waitDefaultServiceAccount(t, ns)
}

func testMaintenanceCalendar(t *testing.T) {
	ns := calendarNS
	newNamespaceForCase(t, ns, 2*len(calendarBeamlines))
	startNotifyReceiver(t, ns)
	profile := func(rev, maintenance string) []byte {
		return []byte(calendarProfileYAML(ns, "calendar-defaults", ns, rev, maintenance))
	}
	mustKubectl(t, profile("1", ""), "apply", "--server-side", "-f", "-")
	tc := upgradeClusterSpec{ns: ns, name: calendarCluster, facility: ns, beamlines: calendarBeamlines}
	mustKubectl(t, []byte(tc.yaml()), "apply", "--server-side", "-f", "-")
	mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tc/"+calendarCluster, "--timeout="+stuckWait.String())
	var instances []string
	for _, b := range calendarBeamlines {
		instances = append(instances, upgInstance(calendarCluster, b))
	}
	leaked := 0
	expected := map[string][]string{}

	// 1. The calendar: a daily window (UTC) that opens at the next minute boundary at least a minute
	// from now, for 10 minutes; an exclusion long past, and the beam run starting inside the window.
	open := time.Now().UTC().Add(time.Minute).Truncate(time.Minute).Add(time.Minute)
	beamRun := open.Add(beamRunAfterOpen)
	maintenance := fmt.Sprintf(`    windows:
    - {schedule: "%d %d * * *", duration: 10m, timeZone: UTC}
    exclusions:
    - {name: run-past, start: %q, end: %q}
    - {name: beam-run, start: %q, end: %q}
`, open.Minute(), open.Hour(), open.Add(-3*time.Hour).Format(time.RFC3339), open.Add(-2*time.Hour).Format(time.RFC3339),
		beamRun.Format(time.RFC3339), beamRun.Add(3*time.Hour).Format(time.RFC3339))
	mustKubectl(t, profile("1", maintenance), "apply", "--server-side", "-f", "-")
	eventually(t, time.Until(open)-20*time.Second, 500*time.Millisecond, "every instance reports the calendar closed until the window", func() (bool, string) {
		for _, name := range instances {
			m := getInstanceIn(t, ns, name).Status.Maintenance
			if m == nil || m.Open || m.Reason != calendar.ReasonOutsideWindows || m.NextOpen == nil || !m.NextOpen.Time.Equal(open) {
				return false, fmt.Sprintf("%s: status.maintenance %+v, want closed (%s) until %s", name, m, calendar.ReasonOutsideWindows, open)
			}
		}
		return true, ""
	})

	// The change: it waits, the status naming when the window opens; no Tiled pod is replaced.
	w := watchUpgrade(t, ns)
	defer w.stop(t)
	podsBefore := tiledPodUIDs(t, ns)
	mustKubectl(t, profile("2", maintenance), "apply", "--server-side", "-f", "-")
	opensAt := "opens at " + open.Format(time.RFC3339)
	pending := waitPending(t, ns, instances, "2", time.Until(open)-2*time.Second, "the change waits for the window, before it opens",
		func(ti *v1alpha1.TiledInstance) string {
			pr := ti.Status.PendingRollout
			if !strings.Contains(pr.Window, opensAt) || pr.Change != "Spec" {
				return fmt.Sprintf("pendingRollout %+v, want a Spec change whose window says %q", pr, opensAt)
			}
			return pendingReason(ti, controllers.ReasonWaitingForMaintenance)
		})
	for name, pr := range pending {
		t.Logf("%s: %s change pending: %s (%v)", name, pr.Change, pr.Window, pr.Differs)
	}
	// Until the window opens (the one wait the case cannot avoid), nothing of the change is applied.
	leakedAt := map[string]bool{}
	for time.Now().Before(open.Add(-gateRead)) {
		read := time.Now()
		for name, rev := range tiledTemplateRevs(t, ns, instances) {
			if rev != "1" && read.Before(open.Add(-gateRead)) && !leakedAt[name] {
				t.Errorf("%s: its Tiled StatefulSet carries the change %s before the window opens", name, time.Until(open))
				leakedAt[name] = true
			}
		}
		if got := tiledPodUIDs(t, ns); fmt.Sprint(got) != fmt.Sprint(podsBefore) && read.Before(open.Add(-gateRead)) {
			t.Errorf("Tiled pods replaced before the window opened: %v, before %v", got, podsBefore)
			break
		}
		time.Sleep(time.Second)
	}
	leaked += len(leakedAt)

	// The window opens: the change starts, one beamline at a time.
	old := map[string]bool{}
	for name, uid := range podsBefore {
		old[name+"/"+string(uid)] = true
	}
	var firstAt time.Time
	eventually(t, 3*time.Minute, 250*time.Millisecond, "a Tiled pod replaced once the window opened", func() (bool, string) {
		at, ok := w.firstLeft(old, open.Add(-time.Minute))
		firstAt = at
		return ok, fmt.Sprintf("no Tiled pod of %v terminating yet", podsBefore)
	})
	delay := firstAt.Sub(open).Seconds()
	for name := range pending {
		if n, _ := instanceEvents(t, ns, name, controllers.ReasonWaitingForMaintenance); n == 0 {
			t.Errorf("%s: no %s Event while its change waited for the window", name, controllers.ReasonWaitingForMaintenance)
		}
	}
	if delay < -gateRead.Seconds() {
		t.Errorf("the first Tiled pod was replaced %.1fs before the window opened", -delay)
		leaked++
	}
	eventually(t, stuckWait, time.Second, "every beamline rolled to the change inside the window", func() (bool, string) {
		return rolledToRev(t, ns, instances, "2")
	})
	mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tc/"+calendarCluster, "--timeout="+stuckWait.String())
	converged := time.Now()
	if n, at, which := w.maxWithoutReady(instances, open, converged); n > 1 {
		t.Errorf("%d instances without a Ready Tiled pod at %s (%v): the cluster's budget is 1", n, at.Format(time.RFC3339Nano), which)
	}
	// Open inside the window; the beam run, inside it, is when it closes next.
	for _, name := range instances {
		ti := getInstanceIn(t, ns, name)
		m := ti.Status.Maintenance
		if m == nil || !m.Open || m.Reason != calendar.ReasonInWindow || m.NextClose == nil || !m.NextClose.Time.Equal(beamRun) {
			t.Errorf("%s: status.maintenance %+v, want open (%s) until the exclusion beam-run at %s", name, m, calendar.ReasonInWindow, beamRun)
		}
		if ti.Status.PendingRollout != nil {
			t.Errorf("%s: still a pending rollout %+v", name, ti.Status.PendingRollout)
		}
	}
	t.Logf("window opened %s; first Tiled pod of the change replaced %.1fs later; the fleet rolled %.1fs after the opening",
		open.Format(time.RFC3339), delay, converged.Sub(open).Seconds())

	// 2. Approval Manual, no windows (always open): a change waits for `kubectl tiled approve`.
	manual := "    approval: Manual\n"
	mustKubectl(t, profile("2", manual), "apply", "--server-side", "-f", "-")
	eventually(t, time.Minute, 500*time.Millisecond, "the calendar open without windows", func() (bool, string) {
		for _, name := range instances {
			if m := getInstanceIn(t, ns, name).Status.Maintenance; m == nil || !m.Open || m.Reason != calendar.ReasonNoWindows {
				return false, fmt.Sprintf("%s: status.maintenance %+v", name, m)
			}
		}
		return true, ""
	})
	approvalRequired := func(ti *v1alpha1.TiledInstance) string {
		pr := ti.Status.PendingRollout
		if pr.Approval != v1alpha1.ApprovalRequired || pr.ChangeHash == "" || pr.Window != "" {
			return fmt.Sprintf("pendingRollout %+v, want approval %s, a hash, no window", pr, v1alpha1.ApprovalRequired)
		}
		return pendingReason(ti, controllers.ReasonWaitingForApproval)
	}
	hashes := func(p map[string]*v1alpha1.PendingRollout) map[string]string {
		out := map[string]string{}
		for name, pr := range p {
			out[name] = pr.ChangeHash
			expected[name] = append(expected[name], "approval/"+pr.ChangeHash)
		}
		return out
	}
	podsBefore = tiledPodUIDs(t, ns)
	mustKubectl(t, profile("3", manual), "apply", "--server-side", "-f", "-")
	h3 := hashes(waitPending(t, ns, instances, "3", 2*time.Minute, "the change waits for approval", approvalRequired))
	waitDelivered(t, ns, instances, func(name string) string { return "approval/" + h3[name] })
	leaked += leakedRevs(t, ns, instances, "2", "while waiting for approval")
	if got := tiledPodUIDs(t, ns); fmt.Sprint(got) != fmt.Sprint(podsBefore) {
		t.Errorf("Tiled pods replaced while the change waited for approval: %v, before %v", got, podsBefore)
	}
	approver := approverName(t)
	approvedAt := time.Now()
	out, err := kubectlTiled(t, "approve", calendarCluster, "-n", ns, "--all-pending")
	if err != nil {
		t.Fatalf("kubectl tiled approve %s --all-pending: %v\n%s", calendarCluster, err, out)
	}
	for name, h := range h3 {
		if !strings.Contains(out, "Approved change "+h+" of TiledInstance "+ns+"/"+name) {
			t.Errorf("kubectl tiled approve does not say it approved %s of %s:\n%s", h, name, out)
		}
	}
	eventually(t, stuckWait, time.Second, "the approved change rolled", func() (bool, string) {
		return rolledToRev(t, ns, instances, "3")
	})
	mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tc/"+calendarCluster, "--timeout="+stuckWait.String())
	if n, at, which := w.maxWithoutReady(instances, approvedAt, time.Now()); n > 1 {
		t.Errorf("%d instances without a Ready Tiled pod at %s (%v) after the approval: the cluster's budget is 1", n, at.Format(time.RFC3339Nano), which)
	}
	eventually(t, time.Minute, time.Second, "the approvals recorded, the approver named", func() (bool, string) {
		for name, h := range h3 {
			l := getInstanceIn(t, ns, name).Status.LastApproval
			if l == nil || l.ChangeHash != h || l.ApprovedBy != approver || l.Time == nil {
				return false, fmt.Sprintf("%s: status.lastApproval %+v, want %s by %s", name, l, h, approver)
			}
			_, notes := instanceEvents(t, ns, name, controllers.ReasonApproved)
			if !strings.Contains(strings.Join(notes, "\n"), approver+" approved change "+h) {
				return false, fmt.Sprintf("%s: Approved Events %q name not %s approving %s", name, notes, approver, h)
			}
		}
		return true, ""
	})

	// 3. A stale approval: change 4 is reviewed (its hash read), the profile is edited again
	// (change 5) before the approval reaches the operator.
	mustKubectl(t, profile("4", manual), "apply", "--server-side", "-f", "-")
	h4 := hashes(waitPending(t, ns, instances, "4", 2*time.Minute, "change 4 waits for approval", approvalRequired))
	waitDelivered(t, ns, instances, func(name string) string { return "approval/" + h4[name] })
	mustKubectl(t, profile("5", manual), "apply", "--server-side", "-f", "-")
	h5 := hashes(waitPending(t, ns, instances, "5", 2*time.Minute, "change 5 waits for approval", func(ti *v1alpha1.TiledInstance) string {
		if why := approvalRequired(ti); why != "" {
			return why
		}
		if h := ti.Status.PendingRollout.ChangeHash; h == h4[ti.Name] {
			return "the pending hash is still change 4's, " + h
		}
		return ""
	}))
	waitDelivered(t, ns, instances, func(name string) string { return "approval/" + h5[name] })
	stale := instances[0]
	if out, err := kubectlTiled(t, "approve", stale, "-n", ns, "--hash", h4[stale]); err == nil || !strings.Contains(out, "is stale") {
		t.Errorf("kubectl tiled approve --hash %s (change 4, no longer pending) was not refused as stale: %v\n%s", h4[stale], err, out)
	} else {
		t.Logf("kubectl tiled approve of the stale hash: %s", strings.TrimSpace(out))
	}
	// The same approval sent as the label (a person who approved with kubectl label, or whose
	// command read the instance before the edit): the operator refuses it.
	mustKubectl(t, nil, "-n", ns, "label", "tiledinstance", stale, v1alpha1.LabelApprove+"="+h4[stale], "--overwrite")
	eventually(t, time.Minute, time.Second, "the stale approval refused", func() (bool, string) {
		ti := getInstanceIn(t, ns, stale)
		r := ti.Status.RefusedApproval
		if r == nil || r.ChangeHash != h4[stale] || r.ApprovedBy != approver || !strings.Contains(r.Message, "the pending change is "+h5[stale]) {
			return false, fmt.Sprintf("status.refusedApproval %+v", r)
		}
		if pr := ti.Status.PendingRollout; pr == nil || pr.ChangeHash != h5[stale] || pr.Approval != v1alpha1.ApprovalRequired {
			return false, fmt.Sprintf("pendingRollout %+v, want %s still waiting for approval", pr, h5[stale])
		}
		_, notes := instanceEvents(t, ns, stale, controllers.ReasonApprovalRefused)
		return strings.Contains(strings.Join(notes, "\n"), approver+": the approval of change "+h4[stale]),
			fmt.Sprintf("ApprovalRefused Events %q", notes)
	})
	leaked += leakedRevs(t, ns, instances, "3", "after a stale approval")

	// Every notification once: the receiver's count by key.
	dup, missed := notificationTally(t, ns, expected)
	t.Logf("calendar: window_start_delay %.1fs; notifications duplicated %d, missed %d; gated changes leaked %d", delay, dup, missed, leaked)
	addCalendarFigures(dup, missed, leaked)
	figMu.Lock()
	fig.WindowStartDelaySeconds = delay
	figMu.Unlock()
}

// notifyInstanceYAML is a standalone TiledInstance of the notifications case, its Tiled pod
// annotation at rev ("" leaves the profile's).
func notifyInstanceYAML(name, rev string) string {
	extra := ""
	if rev != "" {
		extra = fmt.Sprintf("  tiled: {podAnnotations: {%s: %q}}\n", calendarAnnotation, rev)
	}
	return standaloneYAMLIn(notifyNS, name, notifyNS, extra)
}

// testNotificationsLeaderKill: two standalone instances under approval Manual, with notifications
// to a receiver pod. n1's change waits for approval and is notified; the leader is killed; n2's
// change arrives while no leader runs, and the new leader notifies it; the new leader's reconcile of
// n1 (seen by a stale approval it refuses) sends nothing again. Each notification arrives once.
func testNotificationsLeaderKill(t *testing.T) {
	ns := notifyNS
	newNamespaceForCase(t, ns, 4)
	startNotifyReceiver(t, ns)
	mustKubectl(t, []byte(calendarProfileYAML(ns, "notify-defaults", ns, "1", "    approval: Manual\n")), "apply", "--server-side", "-f", "-")
	instances := []string{"n1", "n2"}
	for _, name := range instances {
		mustKubectl(t, []byte(notifyInstanceYAML(name, "")), "apply", "--server-side", "-f", "-")
	}
	for _, name := range instances {
		mustKubectl(t, nil, "-n", ns, "wait", "--for=condition=Ready", "tiledinstance/"+name, "--timeout="+stuckWait.String())
	}
	required := func(ti *v1alpha1.TiledInstance) string {
		if pr := ti.Status.PendingRollout; pr.Approval != v1alpha1.ApprovalRequired || pr.ChangeHash == "" {
			return fmt.Sprintf("pendingRollout %+v, want approval %s", pr, v1alpha1.ApprovalRequired)
		}
		return ""
	}
	expected := map[string][]string{}
	key := func(p map[string]*v1alpha1.PendingRollout, name string) string {
		return "approval/" + p[name].ChangeHash
	}

	mustKubectl(t, []byte(notifyInstanceYAML("n1", "2")), "apply", "--server-side", "-f", "-")
	p1 := waitPending(t, ns, []string{"n1"}, "2", 2*time.Minute, "n1's change waits for approval", required)
	expected["n1"] = []string{key(p1, "n1")}
	waitDelivered(t, ns, []string{"n1"}, func(string) string { return key(p1, "n1") })

	// The leader killed, n2's change arrives while no replica leads.
	old := leaderPod(t)
	mustKubectl(t, nil, "-n", operatorNS, "delete", "pod", old, "--grace-period=0", "--force")
	// The admission webhooks (failure policy Fail) may miss the killed replica's endpoint once.
	eventually(t, time.Minute, time.Second, "n2's change admitted", func() (bool, string) {
		out, err := kubectl([]byte(notifyInstanceYAML("n2", "2")), "apply", "--server-side", "-f", "-")
		return err == nil, out + fmt.Sprint(err)
	})
	waitNewLeader(t, old, 2*time.Minute, 500*time.Millisecond)
	p2 := waitPending(t, ns, []string{"n2"}, "2", 2*time.Minute, "n2's change waits for approval under the new leader", required)
	expected["n2"] = []string{key(p2, "n2")}
	waitDelivered(t, ns, []string{"n2"}, func(string) string { return key(p2, "n2") })
	// The new leader reconciles n1, its change still pending: a stale approval it refuses shows
	// the reconcile, and that reconcile would have sent n1's notification again.
	mustKubectl(t, nil, "-n", ns, "label", "tiledinstance", "n1", v1alpha1.LabelApprove+"=00000000000000000000", "--overwrite")
	eventually(t, time.Minute, time.Second, "the new leader reconciled n1 (a stale approval refused)", func() (bool, string) {
		ti := getInstanceIn(t, ns, "n1")
		r := ti.Status.RefusedApproval
		return r != nil && r.ChangeHash == "00000000000000000000", fmt.Sprintf("status.refusedApproval %+v", r)
	})
	leaked := leakedRevs(t, ns, instances, "1", "waiting for approval across the leader kill")
	dup, missed := notificationTally(t, ns, expected)
	mustKubectl(t, nil, "-n", operatorNS, "rollout", "status", "deploy/"+operatorDep, "--timeout=3m")
	t.Logf("notifications across the leader kill: duplicated %d, missed %d; gated changes leaked %d", dup, missed, leaked)
	addCalendarFigures(dup, missed, leaked)
}
