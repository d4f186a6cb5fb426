// Package notify derives an instance's notifications from its status and delivers them to a
// generic webhook (spec.notifications.webhook, docs/maintenance.md "Notifications").
//
// A notification is a state change a person should hear of: a change waiting for approval, a
// maintenance window opened with work queued, an upgrade started, finished or failed, a backup
// failed. Derive reads them from a status alone (pure): each has a severity and a stable key that
// names the state change (the approval of one change hash, one upgrade's start, one backup Job),
// so that a state that lasts over many reconciles is one notification. The controller sends the
// ones whose key status.notifications.delivered does not hold, records the keys it delivered in
// the status it writes, and so sends each once, also after a restart or a change of leader (a
// crash between the POST and the status write sends it once more: delivery is at least once, and
// the receiver can deduplicate on the X-Tiled-Notification-Id header, the key).
//
// Deliver POSTs one notification: a JSON body whose "text" field makes it a Slack or Teams
// incoming-webhook message, signed with HMAC-SHA256 when a key is given (X-Tiled-Signature:
// sha256=<hex>), with a short timeout. Errors name the URL as scheme://host only (Redact): a
// webhook's path or query may carry its token. Backoff says how long to wait after n failures.
package notify
