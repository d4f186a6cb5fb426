package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestAuditLogRotated: when the apiserver starts a new file at the log's path, the reader fails
// rather than counting no request for every later phase.
func TestAuditLogRotated(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	event := `{"auditID":"1","stage":"ResponseComplete","verb":"get","userAgent":"x","requestReceivedTimestamp":"2026-12-01T00:00:00Z"}` + "\n"
	g.Expect(os.WriteFile(path, []byte(event), 0o600)).To(Succeed())
	a, err := openAuditLog(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer a.close()
	mark, err := a.mark()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mark).To(Equal(1), "the event before the mark is read")

	g.Expect(os.Rename(path, path+".1")).To(Succeed())
	g.Expect(os.WriteFile(path, []byte(event), 0o600)).To(Succeed())
	_, err = a.mark()
	g.Expect(err).To(MatchError(ContainSubstring("was rotated")))
}

// TestLastWriteByResource: a phase's last write of each resource, in seconds after its start; reads,
// watches and the Lease leave no mark, and a resource's later write replaces its earlier one.
func TestLastWriteByResource(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	c := countAudit([]auditEvent{
		{At: at(100), Verb: "patch", Resource: "tiledinstances", Object: "ns/a"},
		{At: at(900), Verb: "patch", Resource: "statefulsets", Object: "ns/a"},
		{At: at(400), Verb: "patch", Resource: "tiledinstances", Object: "ns/b"},
		{At: at(1500), Verb: "patch", Resource: "tiledinstances/status", Object: "ns/a"},
		{At: at(2000), Verb: "get", Resource: "statefulsets", Object: "ns/a"},
		{At: at(2100), Verb: "watch", Resource: "pods"},
		{At: at(2200), Verb: "update", Resource: "leases", Object: "system/lock"},
		{At: at(1700), Verb: "create", Resource: "events", Object: "ns/e"},
	})
	g.Expect(c.lastWriteSeconds(start)).To(Equal(map[string]float64{
		"tiledinstances": 0.4, "statefulsets": 0.9, "tiledinstances/status": 1.5, "events": 1.7,
	}))
	g.Expect(c.Last).To(Equal(at(2000)), "the end of the phase is its last request but watches and the Lease")
}

// TestPhaseAuditCountsTheOperatorOnce: a phase's figure (startup_requests, restart_requests, …)
// counts each of the operator's requests after the mark once — a watch at ResponseStarted, not again
// at ResponseComplete — and nothing of kube-controller-manager's or the harness's. Requests that name
// no resource (discovery: GET /api, /apis) are the operator's too and are counted, under
// "(non-resource)", although the operator's own count (operator/traffic) leaves them out: the four
// of the committed restart detail were the REST mapper's discovery before ed1ca77.
func TestPhaseAuditCountsTheOperatorOnce(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	event := func(id, stage, verb, ua, resource string) string {
		ref := ""
		if resource != "" {
			ref = `,"objectRef":{"resource":"` + resource + `","namespace":"system","name":"x"}`
		}
		return `{"auditID":"` + id + `","stage":"` + stage + `","verb":"` + verb + `","userAgent":"` + ua + `"` + ref +
			`,"requestReceivedTimestamp":"2026-12-01T00:00:00Z"}` + "\n"
	}
	const operator, kcm, harness = "manager/v0.0.0 (linux/amd64)", "kube-controller-manager/v1.37.2", "bench/v0.0.0"
	before := event("0", "ResponseComplete", "get", operator, "leases")
	g.Expect(os.WriteFile(path, []byte(before), 0o600)).To(Succeed())
	a, err := openAuditLog(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer a.close()
	mark, err := a.mark()
	g.Expect(err).NotTo(HaveOccurred())

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	g.Expect(err).NotTo(HaveOccurred())
	for _, e := range []string{
		event("1", "ResponseStarted", "watch", operator, "secrets"),
		event("2", "ResponseComplete", "get", operator, ""), // discovery
		event("3", "ResponseComplete", "update", operator, "leases"),
		event("4", "ResponseComplete", "create", kcm, "pods"),
		event("5", "ResponseComplete", "list", harness, "tiledinstances"),
		event("1", "ResponseComplete", "watch", operator, "secrets"), // the same watch, ended
	} {
		_, err := f.WriteString(e)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(f.Close()).To(Succeed())

	c, err := phaseAudit(a, mark)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Total).To(Equal(int64(3)))
	g.Expect(c.ByKey).To(Equal(map[string]int64{"watch secrets": 1, "get (non-resource)": 1, "update leases": 1}))
	g.Expect(c.objectWrites()).To(BeZero(), "the Lease is not an object write")
}
