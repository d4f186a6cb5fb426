package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// The apiserver's side of the count: kube-apiserver writes an audit event per request
// (test/support/testenv's Metadata-level policy), and the harness tells the operator's requests from
// kube-controller-manager's and its own by their User-Agent (each runs under its own binary name).

// Actors, by User-Agent prefix.
const (
	actorOperator = "operator"                // cmd/manager: "manager/…"
	actorKCM      = "kube-controller-manager" // "kube-controller-manager/…"
	actorOther    = "other"                   // the harness, the apiserver itself, …
)

func actorOf(userAgent string) string {
	switch {
	case strings.HasPrefix(userAgent, "manager/"):
		return actorOperator
	case strings.HasPrefix(userAgent, "kube-controller-manager/"):
		return actorKCM
	}
	return actorOther
}

// auditEvent is what the harness keeps of one request.
type auditEvent struct {
	At       time.Time // when the apiserver received it
	Actor    string
	Verb     string // the apiserver's verb: server-side apply is "patch"
	Resource string // plural, "/subresource" appended
	Object   string // namespace/name ("" for collections)
	Code     int
}

// auditLog reads the audit log as it grows.
type auditLog struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	r       *bufio.Reader
	partial []byte
	started map[string]bool
	events  []auditEvent
}

func openAuditLog(path string) (*auditLog, error) {
	var f *os.File
	var err error
	for i := 0; i < 50; i++ { // the apiserver creates it with its first event
		if f, err = os.Open(path); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	return &auditLog{path: path, f: f, r: bufio.NewReaderSize(f, 1<<20), started: map[string]bool{}}, nil
}

type rawAuditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// sync reads the events written since the last call. A request counts once: a watch at
// ResponseStarted, any other request at ResponseComplete.
func (a *auditLog) sync() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		line, err := a.r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] != '\n' {
			a.partial = append(a.partial, line...)
			return nil
		}
		if len(a.partial) > 0 {
			line = append(a.partial, line...)
			a.partial = nil
		}
		if len(line) > 0 {
			var e rawAuditEvent
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				return fmt.Errorf("reading the audit log: %w", jerr)
			}
			switch e.Stage {
			case "ResponseStarted":
				a.started[e.AuditID] = true
				a.add(e)
			case "ResponseComplete", "Panic":
				if a.started[e.AuditID] {
					delete(a.started, e.AuditID)
				} else {
					a.add(e)
				}
			}
		}
		if err == io.EOF {
			return a.notRotated()
		}
		if err != nil {
			return err
		}
	}
}

// notRotated fails when the apiserver has started a new file at the log's path: the events after
// it would never be read, and every later phase would count none (test/support/testenv turns rotation off).
func (a *auditLog) notRotated() error {
	open, err := a.f.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(a.path)
	if err != nil {
		return fmt.Errorf("the audit log %s: %w", a.path, err)
	}
	if !os.SameFile(open, now) {
		return fmt.Errorf("the audit log %s was rotated: the events after it cannot be counted", a.path)
	}
	return nil
}

func (a *auditLog) add(e rawAuditEvent) {
	ev := auditEvent{At: e.RequestReceivedTimestamp, Actor: actorOf(e.UserAgent), Verb: e.Verb}
	if e.ObjectRef != nil {
		ev.Resource = e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			ev.Resource += "/" + e.ObjectRef.Subresource
		}
		if e.ObjectRef.Name != "" {
			ev.Object = e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
		}
	} else {
		ev.Resource = "(non-resource)"
	}
	if e.ResponseStatus != nil {
		ev.Code = e.ResponseStatus.Code
	}
	a.events = append(a.events, ev)
}

// mark is a position in the log: the events after it belong to a phase.
func (a *auditLog) mark() (int, error) {
	if err := a.sync(); err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.events), nil
}

// since returns the events of actor after the mark.
func (a *auditLog) since(mark int, actor string) ([]auditEvent, error) {
	if err := a.sync(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []auditEvent
	for _, e := range a.events[mark:] {
		if e.Actor == actor {
			out = append(out, e)
		}
	}
	return out, nil
}

func (a *auditLog) close() error { return a.f.Close() }

// auditCounts sums a phase's events.
type auditCounts struct {
	Total, Writes, Watches, Leases, Events, WebhookConfigs int64
	ByKey                                                  map[string]int64
	Last                                                   time.Time
	// Written are the objects the phase wrote, by resource: "resource ns/name" (not their status,
	// Events, the Lease or the webhook configurations).
	Written map[string]bool
	// LastWrite is the apiserver's time of the phase's last write of each resource
	// ("tiledinstances/status", "events", …), the Lease left out.
	LastWrite map[string]time.Time
}

// lastWriteSeconds is LastWrite as seconds after start.
func (c auditCounts) lastWriteSeconds(start time.Time) map[string]float64 {
	out := make(map[string]float64, len(c.LastWrite))
	for res, at := range c.LastWrite {
		out[res] = at.Sub(start).Seconds()
	}
	return out
}

func isWriteVerb(v string) bool {
	switch v {
	case "get", "list", "watch":
		return false
	}
	return true
}

func countAudit(events []auditEvent) auditCounts {
	c := auditCounts{ByKey: map[string]int64{}, Written: map[string]bool{}, LastWrite: map[string]time.Time{}}
	for _, e := range events {
		c.Total++
		c.ByKey[e.Verb+" "+e.Resource]++
		switch {
		case e.Verb == "watch":
			c.Watches++
		case e.Resource == "leases":
			c.Leases++
		}
		if isWriteVerb(e.Verb) {
			c.Writes++
			if e.Resource != "leases" && e.At.After(c.LastWrite[e.Resource]) {
				c.LastWrite[e.Resource] = e.At
			}
			switch e.Resource {
			case "events":
				c.Events++
			case "mutatingwebhookconfigurations", "validatingwebhookconfigurations":
				c.WebhookConfigs++
			case "leases":
			default:
				if !strings.Contains(e.Resource, "/") && e.Object != "" {
					c.Written[e.Resource+" "+e.Object] = true
				}
			}
		}
		if e.At.After(c.Last) && e.Resource != "leases" && e.Verb != "watch" {
			c.Last = e.At
		}
	}
	return c
}

// objectWrites are writes other than the Lease, Events and the webhook configurations.
func (c auditCounts) objectWrites() int64 {
	var n int64
	for k, v := range c.ByKey {
		verb, res, _ := strings.Cut(k, " ")
		if isWriteVerb(verb) && res != "leases" && res != "events" && res != "mutatingwebhookconfigurations" && res != "validatingwebhookconfigurations" {
			n += v
		}
	}
	return n
}

// writtenByResource counts the written objects by resource, as "resource=n", sorted.
func (c auditCounts) writtenByResource() []string {
	counts := map[string]int{}
	for k := range c.Written {
		res, _, _ := strings.Cut(k, " ")
		counts[res]++
	}
	out := make([]string, 0, len(counts))
	for res, n := range counts {
		out = append(out, fmt.Sprintf("%s=%d", res, n))
	}
	sort.Strings(out)
	return out
}

func (c auditCounts) String() string {
	lines := make([]string, 0, len(c.ByKey))
	for k, v := range c.ByKey {
		lines = append(lines, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
