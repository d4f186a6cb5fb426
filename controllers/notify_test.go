package controllers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/notify"
)

// notifications: nothing without a webhook; a pending approval delivered once and recorded (the
// next reconcile, on the status written, sends nothing); a failure recorded with one Event per
// streak and retried only after the backoff; a missing Secret is a failure naming it.
func TestNotificationsDelivery(t *testing.T) {
	var calls, failing atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if failing.Load() != 0 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hooks"}, Data: map[string][]byte{"key": []byte("k")}}
	pending := func() *tiledv1alpha1.TiledInstanceStatus {
		return &tiledv1alpha1.TiledInstanceStatus{PendingRollout: &tiledv1alpha1.PendingRollout{StatefulSet: "chx", Change: "Spec", ChangeHash: "abc", Approval: tiledv1alpha1.ApprovalRequired}}
	}
	hook := &tiledv1alpha1.TiledInstanceSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{Notifications: &tiledv1alpha1.NotificationsSpec{
		Webhook: &tiledv1alpha1.NotificationWebhook{URL: srv.URL + "/x?token=SECRET", SecretRef: &tiledv1alpha1.NotificationSecretRef{Name: "hooks"}}}}}
	setup := func(objs ...client.Object) (*TiledInstanceReconciler, *events.FakeRecorder, *tiledv1alpha1.TiledInstance) {
		rec := events.NewFakeRecorder(10)
		r := &TiledInstanceReconciler{APIReader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), Recorder: rec}
		ti := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "chx", UID: "u1", ResourceVersion: "1"}}
		return r, rec, ti
	}
	ctx := context.Background()

	t.Run("no webhook: nothing sent, no status", func(t *testing.T) {
		g := NewWithT(t)
		r, _, ti := setup(secret)
		st := pending()
		st.Notifications = &tiledv1alpha1.NotificationStatus{}
		before := calls.Load()
		g.Expect(r.notifications(ctx, ti, &tiledv1alpha1.TiledInstanceSpec{}, st)).To(BeZero())
		g.Expect(st.Notifications).To(BeNil())
		g.Expect(calls.Load()).To(Equal(before))
	})

	t.Run("delivered once, recorded", func(t *testing.T) {
		g := NewWithT(t)
		r, rec, ti := setup(secret)
		failing.Store(0)
		before := calls.Load()
		st := pending()
		g.Expect(r.notifications(ctx, ti, hook, st)).To(BeZero())
		g.Expect(calls.Load()).To(Equal(before + 1))
		g.Expect(st.Notifications.Delivered).To(ConsistOf(HaveField("Key", "approval/abc")))
		g.Expect(st.Notifications.Since).NotTo(BeNil())
		// The status written; the next reconcile (the cache shows it) sends nothing.
		ti.Status, ti.ResourceVersion = *st.DeepCopy(), "2"
		st2 := ti.Status.DeepCopy()
		g.Expect(r.notifications(ctx, ti, hook, st2)).To(BeZero())
		g.Expect(calls.Load()).To(Equal(before+1), "sent again")
		// A reconcile on a cache that lags behind the write: the memory says it was sent.
		ti.Status, ti.ResourceVersion = *pending(), "1"
		st3 := ti.Status.DeepCopy()
		g.Expect(r.notifications(ctx, ti, hook, st3)).To(BeZero())
		g.Expect(calls.Load()).To(Equal(before+1), "sent again on a lagging cache")
		g.Expect(rec.Events).To(BeEmpty())
	})

	t.Run("a failure: recorded, one Event per streak, retried after the backoff", func(t *testing.T) {
		g := NewWithT(t)
		r, rec, ti := setup(secret)
		failing.Store(1)
		before := calls.Load()
		st := pending()
		g.Expect(r.notifications(ctx, ti, hook, st)).To(Equal(notify.Backoff(1)))
		n := st.Notifications
		g.Expect(n.Failures).To(Equal(int32(1)))
		g.Expect(n.LastError).To(ContainSubstring("502"))
		g.Expect(n.LastError).NotTo(ContainSubstring("SECRET"))
		g.Expect(rec.Events).To(Receive(ContainSubstring(ReasonNotificationFailed)))
		// Within the backoff: not sent.
		ti.Status, ti.ResourceVersion = *st.DeepCopy(), "2"
		st2 := ti.Status.DeepCopy()
		wait := r.notifications(ctx, ti, hook, st2)
		g.Expect(wait).To(BeNumerically(">", 9*time.Second))
		g.Expect(wait).To(BeNumerically("<=", 11*time.Second))
		g.Expect(calls.Load()).To(Equal(before + 1))
		// After it: sent, failing again: no second Event, a longer backoff.
		past := metav1.NewTime(time.Now().Add(-time.Minute))
		ti.Status.Notifications.LastErrorTime = &past
		st3 := ti.Status.DeepCopy()
		g.Expect(r.notifications(ctx, ti, hook, st3)).To(Equal(notify.Backoff(2)))
		g.Expect(calls.Load()).To(Equal(before + 2))
		g.Expect(st3.Notifications.Failures).To(Equal(int32(2)))
		g.Expect(rec.Events).NotTo(Receive())
		// The receiver answers: delivered, failures reset, the last error kept.
		failing.Store(0)
		ti.Status, ti.ResourceVersion = *st3.DeepCopy(), "3"
		ti.Status.Notifications.LastErrorTime = &past
		st4 := ti.Status.DeepCopy()
		g.Expect(r.notifications(ctx, ti, hook, st4)).To(BeZero())
		g.Expect(st4.Notifications.Failures).To(BeZero())
		g.Expect(st4.Notifications.LastError).To(ContainSubstring("502"))
		g.Expect(st4.Notifications.Delivered).To(HaveLen(1))
	})

	t.Run("the Secret missing: a failure naming it, nothing sent", func(t *testing.T) {
		g := NewWithT(t)
		r, _, ti := setup()
		before := calls.Load()
		st := pending()
		g.Expect(r.notifications(ctx, ti, hook, st)).To(Equal(notify.Backoff(1)))
		g.Expect(st.Notifications.LastError).To(ContainSubstring("the Secret hooks (spec.notifications.webhook.secretRef) does not exist"))
		g.Expect(calls.Load()).To(Equal(before))
	})

	t.Run("minSeverity Error: a pending approval (Warning) is not sent", func(t *testing.T) {
		g := NewWithT(t)
		r, _, ti := setup(secret)
		h := hook.DeepCopy()
		h.Notifications.Webhook.MinSeverity = tiledv1alpha1.NotificationSeverityError
		before := calls.Load()
		st := pending()
		g.Expect(r.notifications(ctx, ti, h, st)).To(BeZero())
		g.Expect(calls.Load()).To(Equal(before))
		g.Expect(st.Notifications.Delivered).To(BeEmpty())
	})
}
