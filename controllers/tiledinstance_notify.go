package controllers

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/notify"
)

// Notifications (spec.notifications, docs/maintenance.md "Notifications"): the state changes the
// status about to be written describes (notify.Derive) that status.notifications.delivered does
// not name are POSTed to the webhook, in the reconcile, one after the other with a short timeout
// (notify.Timeout), before the status write that records them: a reconcile sends only what a
// state change brought, rarely, and the reconcile that writes the record is the one that sent, so
// that a new leader or a restarted operator, reading the status, does not send again. A crash
// between the POST and the write sends once more (at least once; the receiver deduplicates on the
// X-Tiled-Notification-Id header). A failure stops the round: it is recorded (failures, lastError)
// and retried after notify.Backoff, with a NotificationFailed Event at the first failure of a
// streak. Without spec.notifications, nothing here runs and status.notifications is absent.

// ReasonNotificationFailed: the Event of the first failed delivery of a streak.
const ReasonNotificationFailed = "NotificationFailed"

// defaultNotifyClient sends notifications when the reconciler has no NotifyClient.
var defaultNotifyClient = &http.Client{Timeout: notify.Timeout}

// notifications delivers what status (about to be written over ti) newly describes to spec's
// webhook and records it in status.notifications. It returns when to look again (a retry), 0 when
// nothing waits.
func (r *TiledInstanceReconciler) notifications(ctx context.Context, ti *tiledv1alpha1.TiledInstance, spec *tiledv1alpha1.TiledInstanceSpec, status *tiledv1alpha1.TiledInstanceStatus) time.Duration {
	var hook *tiledv1alpha1.NotificationWebhook
	if spec.Notifications != nil {
		hook = spec.Notifications.Webhook
	}
	if hook == nil {
		status.Notifications = nil
		return 0
	}
	key := types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}
	prev := status.Notifications
	if w, ok := r.memories.notifications.load(key); ok {
		prev = w.of(&r.memories, ti, prev)
	}
	now := metav1.Now().Rfc3339Copy()
	ns := &tiledv1alpha1.NotificationStatus{Since: &now}
	if prev != nil {
		ns = prev.DeepCopy()
		if ns.Since == nil {
			ns.Since = &now
		}
	}
	status.Notifications = ns
	todo := notify.Undelivered(notify.Derive(status, ns.Since.Time), ns.Delivered, notify.ParseSeverity(hook.MinSeverity))
	if len(todo) == 0 {
		ns.Failures = 0
		r.rememberNotifications(ti, prev, ns)
		return 0
	}
	if ns.Failures > 0 && ns.LastErrorTime != nil {
		if wait := time.Until(ns.LastErrorTime.Add(notify.Backoff(ns.Failures))); wait > 0 {
			r.rememberNotifications(ti, prev, ns)
			return wait + time.Second/10
		}
	}
	hmacKey, err := r.notificationKey(ctx, ti.Namespace, hook.SecretRef)
	for _, n := range todo {
		if err == nil {
			var body []byte
			if body, err = notify.Body(n, ti.Namespace, ti.Name, now.Time); err == nil {
				c := r.NotifyClient
				if c == nil {
					c = defaultNotifyClient
				}
				err = notify.Deliver(ctx, c, hook.URL, n.Key, hmacKey, body)
			}
		}
		if err != nil {
			ns.Failures++
			msg := fmt.Sprintf("notification %s: %v", n.Key, err)
			if len(msg) > 1024 {
				msg = msg[:1024]
			}
			ns.LastError, ns.LastErrorTime = msg, &now
			log.FromContext(ctx).Info("notification not delivered", "instance", key.String(), "key", n.Key, "failures", ns.Failures, "error", msg)
			if ns.Failures == 1 {
				r.Recorder.Eventf(ti, nil, corev1.EventTypeWarning, ReasonNotificationFailed, "Notify", "%s", eventNote(
					msg+"; retried with backoff (status.notifications)"))
			}
			r.rememberNotifications(ti, prev, ns)
			return notify.Backoff(ns.Failures)
		}
		ns.Failures = 0
		ns.Delivered = notify.Record(ns.Delivered, n.Key, now)
	}
	r.rememberNotifications(ti, prev, ns)
	return 0
}

// rememberNotifications remembers status.notifications ns, about to be written over ti, when it
// differs from prev (what the cache or the memory held): until the cache shows the write, a
// reconcile reads it, so that a notification is not sent again on a cache that lags.
func (r *TiledInstanceReconciler) rememberNotifications(ti *tiledv1alpha1.TiledInstance, prev, ns *tiledv1alpha1.NotificationStatus) {
	if prev != nil && prev.Failures == ns.Failures && len(prev.Delivered) == len(ns.Delivered) && prev.LastError == ns.LastError {
		return
	}
	r.memories.notifications.store(types.NamespacedName{Namespace: ti.Namespace, Name: ti.Name}, over(ti, ns.DeepCopy()))
}

// notificationKey reads the HMAC key of spec.notifications.webhook.secretRef past the cache (the
// cache holds only the operator's own Secrets); nil without a ref. The error names the Secret and
// the key, never the data.
func (r *TiledInstanceReconciler) notificationKey(ctx context.Context, namespace string, ref *tiledv1alpha1.NotificationSecretRef) ([]byte, error) {
	if ref == nil {
		return nil, nil
	}
	k := ref.Key
	if k == "" {
		k = "key"
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the Secret %s (spec.notifications.webhook.secretRef) does not exist", ref.Name)
		}
		return nil, fmt.Errorf("reading the Secret %s (spec.notifications.webhook.secretRef): %w", ref.Name, err)
	}
	if len(secret.Data[k]) == 0 {
		return nil, fmt.Errorf("the Secret %s has no key %q (spec.notifications.webhook.secretRef.key)", ref.Name, k)
	}
	return secret.Data[k], nil
}
