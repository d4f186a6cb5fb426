package controllers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/controllers/notify"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// notifyReceiver is a webhook receiver that answers 500 while failing, and records the POSTs it
// accepted (and how many it refused).
type notifyReceiver struct {
	mu       sync.Mutex
	failing  bool
	refused  int
	accepted []notifyPost
}

type notifyPost struct {
	id, signature string
	body          []byte
	payload       notify.Payload
}

func (r *notifyReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing {
		r.refused++
		http.Error(w, "receiver down", http.StatusInternalServerError)
		return
	}
	p := notifyPost{id: req.Header.Get(notify.HeaderID), signature: req.Header.Get(notify.HeaderSignature), body: body}
	_ = json.Unmarshal(body, &p.payload)
	r.accepted = append(r.accepted, p)
}

func (r *notifyReceiver) posts() ([]notifyPost, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notifyPost(nil), r.accepted...), r.refused
}

func (r *notifyReceiver) setFailing(f bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = f
}

// TestNotificationsWebhook (docs/maintenance.md "Notifications"): a fleet of a (approval Manual, a
// webhook with an HMAC key) and b (approval Manual, no webhook). A profile change waits for
// approval on both. a's receiver first answers 500: the error is in a's status.notifications
// (the URL redacted) with a NotificationFailed Event, and the delivery is retried; once the
// receiver answers 200, exactly one "pending approval" POST arrives, signed with the key, and its
// key is recorded. A restarted operator sends nothing again. b sends nothing and has no
// status.notifications.
func TestNotificationsWebhook(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "notify")
	recv := &notifyReceiver{failing: true}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	hmacKey := []byte("beamline-hmac-key")
	createAll(t, g, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hooks"}, Data: map[string][]byte{"hmac": hmacKey}})
	op := startOperator(t, ns)
	manual := &tiledv1alpha1.MaintenanceSpec{Approval: tiledv1alpha1.ApprovalManual}
	smallFleet(t, g, ns,
		tiledv1alpha1.ClusterInstance{Name: "a", Overrides: &tiledv1alpha1.InstanceTemplate{Maintenance: manual,
			Notifications: &tiledv1alpha1.NotificationsSpec{Webhook: &tiledv1alpha1.NotificationWebhook{
				URL: srv.URL + "/hooks/T0/SECRET-TOKEN?token=SECRET-TOKEN", SecretRef: &tiledv1alpha1.NotificationSecretRef{Name: "hooks", Key: "hmac"}}}}},
		tiledv1alpha1.ClusterInstance{Name: "b", Overrides: &tiledv1alpha1.InstanceTemplate{Maintenance: manual}})
	waitForStampOut(t, g, op, ns, "fleet", 2)
	for _, i := range []string{"fleet-a", "fleet-b"} {
		n := fleet.NamesOf(getInstance(t, g, ns, i))
		markReady(t, g, ns, n.Postgres)
		markReady(t, g, ns, n.Tiled)
	}
	g.Eventually(func() int32 { return getCluster(t, g, ns).Status.ReadyInstances }, time.Minute, 250*time.Millisecond).Should(Equal(int32(2)))
	waitQuiet(t, op)
	posts, refused := recv.posts()
	g.Expect(posts).To(BeEmpty(), "nothing to notify before the change")
	g.Expect(refused).To(BeZero())

	// The profile changes the Tiled pod template: both wait for approval.
	g.Eventually(func() error {
		p := &tiledv1alpha1.TiledProfile{}
		if err := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "defaults"}, p); err != nil {
			return err
		}
		p.Spec.Tiled.PodAnnotations["team"] = "b"
		return env.Client.Update(ctxT(t), p)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	var hash string
	g.Eventually(func(g Gomega) {
		for _, i := range []string{"fleet-a", "fleet-b"} {
			pr := getInstance(t, g, ns, i).Status.PendingRollout
			g.Expect(pr).NotTo(BeNil())
			g.Expect(pr.Approval).To(Equal(tiledv1alpha1.ApprovalRequired))
		}
		hash = getInstance(t, g, ns, "fleet-a").Status.PendingRollout.ChangeHash
	}, time.Minute, 250*time.Millisecond).Should(Succeed())

	// The receiver fails: the error is in status, redacted, with one Event.
	g.Eventually(func(g Gomega) {
		s := getInstance(t, g, ns, "fleet-a").Status.Notifications
		g.Expect(s).NotTo(BeNil())
		g.Expect(s.Failures).To(BeNumerically(">=", 1))
		g.Expect(s.LastError).To(ContainSubstring("approval/" + hash))
		g.Expect(s.LastError).To(ContainSubstring("500"))
		g.Expect(s.LastError).NotTo(ContainSubstring("SECRET"))
		g.Expect(s.LastErrorTime).NotTo(BeNil())
		g.Expect(s.Delivered).To(BeEmpty())
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Reason == controllers.ReasonNotificationFailed && e.Regarding.Name == "fleet-a" {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(HaveLen(1))
		g.Expect(notes[0]).NotTo(ContainSubstring("SECRET"))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	_, refused = recv.posts()
	g.Expect(refused).To(BeNumerically(">=", 1))

	// The receiver answers again: the retry (after 10s) delivers, once.
	recv.setFailing(false)
	g.Eventually(func(g Gomega) {
		posts, _ := recv.posts()
		g.Expect(posts).To(HaveLen(1), "one pending-approval POST, and nothing else (the calendar has no windows: none opens)")
		s := getInstance(t, g, ns, "fleet-a").Status.Notifications
		g.Expect(s).NotTo(BeNil())
		g.Expect(s.Failures).To(BeZero())
		g.Expect(s.Delivered).To(ConsistOf(HaveField("Key", "approval/"+hash)))
		g.Expect(s.LastError).To(ContainSubstring("500"), "the last error stays")
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	posts, _ = recv.posts()
	p := posts[0]
	g.Expect(p.id).To(Equal("approval/" + hash))
	g.Expect(p.signature).To(Equal(notify.Sign(hmacKey, p.body)), "signed with the Secret's key")
	g.Expect(p.payload.Kind).To(Equal(notify.KindPendingApproval))
	g.Expect(p.payload.Severity).To(Equal("Warning"))
	g.Expect(p.payload.Instance).To(Equal("fleet-a"))
	g.Expect(p.payload.Namespace).To(Equal(ns))
	g.Expect(p.payload.Text).To(ContainSubstring(hash))
	g.Expect(getInstance(t, g, ns, "fleet-b").Status.Notifications).To(BeNil(), "no webhook: no status.notifications")
	waitQuiet(t, op)

	// A restarted operator (a crash, a new leader) reads what was delivered and sends nothing.
	op.stop()
	op2 := startOperator(t, ns)
	g.Expect(op2.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op2)
	g.Consistently(func() int {
		posts, _ := recv.posts()
		return len(posts)
	}, 5*time.Second, 250*time.Millisecond).Should(Equal(1), "a restarted operator sent again")
	for _, p := range posts {
		g.Expect(p.payload.Instance).To(Equal("fleet-a"), "b has no webhook")
	}
}
