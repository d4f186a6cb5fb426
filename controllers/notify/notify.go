package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/calendar"
)

// The kinds of notification (the payload's "kind").
const (
	KindPendingApproval = "PendingApproval"
	KindWindowOpened    = "WindowOpenedWithWorkQueued"
	KindUpgradeStarted  = "UpgradeStarted"
	KindUpgradeFinished = "UpgradeFinished"
	KindUpgradeFailed   = "UpgradeFailed"
	KindBackupFailed    = "BackupFailed"
)

// The headers a delivery carries.
const (
	HeaderID        = "X-Tiled-Notification-Id"
	HeaderSignature = "X-Tiled-Signature"
)

// MaxDelivered is how many delivered keys status.notifications.delivered keeps (the oldest go).
const MaxDelivered = 32

// Timeout is how long one delivery may take.
const Timeout = 5 * time.Second

// Severity orders the severities Info < Warning < Error.
type Severity int

// The severities.
const (
	Info Severity = iota
	Warning
	Error
)

// String is the severity's name (spec.notifications.webhook.minSeverity).
func (s Severity) String() string {
	switch s {
	case Warning:
		return tiledv1alpha1.NotificationSeverityWarning
	case Error:
		return tiledv1alpha1.NotificationSeverityError
	}
	return tiledv1alpha1.NotificationSeverityInfo
}

// ParseSeverity reads minSeverity: empty or unknown is Info.
func ParseSeverity(s string) Severity {
	switch s {
	case tiledv1alpha1.NotificationSeverityWarning:
		return Warning
	case tiledv1alpha1.NotificationSeverityError:
		return Error
	}
	return Info
}

// Notification is one state change to notify.
type Notification struct {
	// Key names the state change; it is the dedupe key and the X-Tiled-Notification-Id header.
	Key      string
	Kind     string
	Severity Severity
	// Text is a one-line human message.
	Text string
	// Details are the state's facts (hash, images, backup...).
	Details map[string]string
}

// Derive returns the notifications status describes, in a stable order. since is when
// notifications were first configured: an upgrade or a backup that ended before it is not
// notified (zero: all are).
func Derive(st *tiledv1alpha1.TiledInstanceStatus, since time.Time) []Notification {
	var out []Notification
	if p := st.PendingRollout; p != nil && p.Approval == tiledv1alpha1.ApprovalRequired && p.ChangeHash != "" {
		d := map[string]string{"changeHash": p.ChangeHash, "change": p.Change, "statefulSet": p.StatefulSet}
		if p.From != "" {
			d["from"], d["to"] = p.From, p.To
		}
		out = append(out, Notification{Key: "approval/" + p.ChangeHash, Kind: KindPendingApproval, Severity: Warning, Details: d,
			Text: fmt.Sprintf("change %s (%s, StatefulSet %s) waits for approval: kubectl tiled approve --hash %s", p.ChangeHash, p.Change, p.StatefulSet, p.ChangeHash)})
	}
	if m, p := st.Maintenance, st.PendingRollout; m != nil && m.Open && m.Reason == calendar.ReasonInWindow && m.NextClose != nil && p != nil {
		// A window of the calendar is open (not a calendar without windows, always open) and a
		// change waits (for its cluster's budget, or an approval). The window's identity: when it
		// closes (status says when an open calendar next closes).
		window := m.NextClose.UTC().Format(time.RFC3339)
		id := p.ChangeHash
		if id == "" {
			id = p.TemplateHash
		}
		out = append(out, Notification{Key: "window/" + window + "/" + id, Kind: KindWindowOpened, Severity: Info,
			Details: map[string]string{"closes": window, "change": p.Change, "statefulSet": p.StatefulSet, "changeHash": p.ChangeHash},
			Text:    fmt.Sprintf("the maintenance window is open (until %s) with a %s change of StatefulSet %s queued", window, p.Change, p.StatefulSet)})
	}
	if u := st.Upgrade; u != nil {
		id := "upgrade/" + strconv.FormatInt(u.StartTime.Unix(), 10)
		d := map[string]string{"from": u.FromImage, "to": u.ToImage, "phase": string(u.Phase)}
		if !u.StartTime.Time.Before(since) {
			out = append(out, Notification{Key: id + "/started", Kind: KindUpgradeStarted, Severity: Info, Details: d,
				Text: fmt.Sprintf("upgrade of Tiled from %s to %s started", u.FromImage, u.ToImage)})
		}
		if u.Phase == tiledv1alpha1.UpgradeFailed && !phaseTime(u).Before(since) {
			fd := map[string]string{"from": u.FromImage, "to": u.ToImage, "message": u.Message}
			out = append(out, Notification{Key: id + "/failed", Kind: KindUpgradeFailed, Severity: Error, Details: fd,
				Text: fmt.Sprintf("upgrade of Tiled from %s to %s failed and was rolled back: %s", u.FromImage, u.ToImage, u.Message)})
		}
	}
	if l := st.LastMigration; l != nil && !l.CompletionTime.Time.Before(since) && (st.Upgrade == nil || !st.Upgrade.StartTime.Equal(&l.StartTime)) {
		id := "upgrade/" + strconv.FormatInt(l.StartTime.Unix(), 10)
		d := map[string]string{"fromVersion": l.FromVersion, "toVersion": l.ToVersion, "result": l.Result}
		if l.Result == "RolledBack" {
			out = append(out, Notification{Key: id + "/failed", Kind: KindUpgradeFailed, Severity: Error, Details: d,
				Text: fmt.Sprintf("upgrade of Tiled from %s to %s failed and was rolled back", l.FromVersion, l.ToVersion)})
		} else {
			out = append(out, Notification{Key: id + "/finished", Kind: KindUpgradeFinished, Severity: Info, Details: d,
				Text: fmt.Sprintf("upgrade of Tiled from %s to %s finished", l.FromVersion, l.ToVersion)})
		}
	}
	if b := st.Backup; b != nil && b.Last != nil && b.Last.Result == "Failed" && !b.Last.CompletionTime.Time.Before(since) {
		l := b.Last
		out = append(out, Notification{Key: "backup/" + l.Job + "/failed", Kind: KindBackupFailed, Severity: Error,
			Details: map[string]string{"backup": l.Name, "job": l.Job, "message": l.Message},
			Text:    fmt.Sprintf("backup %s (Job %s) failed: %s", l.Name, l.Job, l.Message)})
	}
	return out
}

func phaseTime(u *tiledv1alpha1.UpgradeStatus) time.Time {
	if u.PhaseTime != nil {
		return u.PhaseTime.Time
	}
	return u.StartTime.Time
}

// Undelivered are the notifications of all whose severity is at least least and whose key
// delivered does not hold.
func Undelivered(all []Notification, delivered []tiledv1alpha1.DeliveredNotification, least Severity) []Notification {
	var out []Notification
	for _, n := range all {
		if n.Severity < least || slices.ContainsFunc(delivered, func(d tiledv1alpha1.DeliveredNotification) bool { return d.Key == n.Key }) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// Record adds key, delivered at now, to delivered, keeping the newest MaxDelivered.
func Record(delivered []tiledv1alpha1.DeliveredNotification, key string, now metav1.Time) []tiledv1alpha1.DeliveredNotification {
	out := append(slices.Clone(delivered), tiledv1alpha1.DeliveredNotification{Key: key, Time: now})
	if len(out) > MaxDelivered {
		out = out[len(out)-MaxDelivered:]
	}
	return out
}

// Backoff is how long to wait after failures failed deliveries in a row: 10s, 20s, 40s... at most
// 10 minutes (0 for none).
func Backoff(failures int32) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := 10 * time.Second
	for i := int32(1); i < failures && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}

// Redact is the URL as scheme://host: its path, query and user may carry a token.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "<invalid URL>"
	}
	return u.Scheme + "://" + u.Host
}

// Sign is the X-Tiled-Signature of body under key: sha256=<hex HMAC-SHA256>.
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Payload is the JSON body POSTed.
type Payload struct {
	// Text makes the body a Slack or Teams incoming-webhook message.
	Text      string            `json:"text"`
	Severity  string            `json:"severity"`
	Kind      string            `json:"kind"`
	Key       string            `json:"key"`
	Instance  string            `json:"instance"`
	Namespace string            `json:"namespace"`
	Time      string            `json:"time"`
	Details   map[string]string `json:"details,omitempty"`
}

// Body is the JSON body of n for instance namespace/name at now.
func Body(n Notification, namespace, name string, now time.Time) ([]byte, error) {
	return json.Marshal(Payload{
		Text:     fmt.Sprintf("[%s] TiledInstance %s/%s: %s", n.Severity, namespace, name, n.Text),
		Severity: n.Severity.String(), Kind: n.Kind, Key: n.Key, Instance: name, Namespace: namespace,
		Time: now.UTC().Format(time.RFC3339), Details: n.Details,
	})
}

// Deliver POSTs body (the notification key) to rawURL with client, signed with key when it is not
// empty. A status outside 2xx is an error. Errors name the URL redacted.
func Deliver(ctx context.Context, client *http.Client, rawURL, id string, key, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: invalid request", Redact(rawURL))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, id)
	if len(key) > 0 {
		req.Header.Set(HeaderSignature, Sign(key, body))
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error names the whole URL
		}
		return fmt.Errorf("POST %s: %s", Redact(rawURL), strings.ReplaceAll(err.Error(), rawURL, Redact(rawURL)))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := strings.TrimSpace(string(snippet))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("POST %s: %s %s", Redact(rawURL), resp.Status, msg)
	}
	return nil
}
