package certs

import (
	"bytes"
	"crypto/x509"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func mustCA(t *testing.T, now time.Time, validity time.Duration) *keyPair {
	t.Helper()
	ca, err := newCA(now, validity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// trustedAt returns a trustedSince that trusts the given CAs since the given times.
func trustedAt(since map[*x509.Certificate]time.Time) func(*x509.Certificate) (time.Time, bool) {
	return func(c *x509.Certificate) (time.Time, bool) {
		for k, v := range since {
			if k.Equal(c) {
				return v, true
			}
		}
		return time.Time{}, false
	}
}

func never(*x509.Certificate) (time.Time, bool) { return time.Time{}, false }

func TestStateRoundTrip(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	s := &state{active: mustCA(t, now, time.Hour), next: mustCA(t, now, time.Hour)}
	prev := mustCA(t, now.Add(-time.Hour), 2*time.Hour)
	s.previous, s.previousPEM = prev.cert, prev.certPEM
	back, problems := parseState(s.data())
	g.Expect(problems).To(BeEmpty())
	g.Expect(back.active.cert.Equal(s.active.cert)).To(BeTrue())
	g.Expect(back.next.cert.Equal(s.next.cert)).To(BeTrue())
	g.Expect(back.previous.Equal(prev.cert)).To(BeTrue())
	g.Expect(back.bundle(now)).To(Equal(s.bundle(now)))
	g.Expect(bytes.Count(s.bundle(now), []byte("BEGIN CERTIFICATE"))).To(Equal(3))
}

func TestParseStateProblems(t *testing.T) {
	now := time.Now()
	a, b := mustCA(t, now, time.Hour), mustCA(t, now, time.Hour)
	for _, tc := range []struct {
		name         string
		data         map[string][]byte
		wantState    bool
		wantProblems int
	}{
		{"empty", map[string][]byte{}, false, 1},
		{"key of another CA", map[string][]byte{KeyCACert: a.certPEM, KeyCAKey: b.keyPEM}, false, 1},
		{"garbage certificate", map[string][]byte{KeyCACert: []byte("x"), KeyCAKey: a.keyPEM}, false, 1},
		{"active only", map[string][]byte{KeyCACert: a.certPEM, KeyCAKey: a.keyPEM}, true, 0},
		{"broken next is dropped", map[string][]byte{KeyCACert: a.certPEM, KeyCAKey: a.keyPEM, KeyNextCACert: b.certPEM}, true, 1},
		{"broken previous is dropped", map[string][]byte{KeyCACert: a.certPEM, KeyCAKey: a.keyPEM, KeyPreviousCACert: []byte("nope")}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s, problems := parseState(tc.data)
			g.Expect(s != nil).To(Equal(tc.wantState))
			g.Expect(problems).To(HaveLen(tc.wantProblems))
			if s != nil {
				g.Expect(s.next).To(BeNil())
				g.Expect(s.previous).To(BeNil())
			}
		})
	}
}

// The bundle leaves out an expired previous CA and a previous equal to the active one.
func TestBundleLeavesOutExpired(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	s := &state{active: mustCA(t, now, time.Hour)}
	old := mustCA(t, now.Add(-2*time.Hour), time.Hour)
	s.previous, s.previousPEM = old.cert, old.certPEM
	g.Expect(s.bundle(now)).To(Equal(s.active.certPEM))
	s.previous, s.previousPEM = s.active.cert, s.active.certPEM
	g.Expect(s.bundle(now)).To(Equal(s.active.certPEM))
}

// Each step of the rotation, in order, with the time it happens at.
func TestPlanRotationSteps(t *testing.T) {
	t0 := time.Now()
	const validity = 90 * time.Minute
	const trust = time.Minute
	active := mustCA(t, t0, validity)
	renew := renewAt(active.cert) // 30 minutes before expiry
	next := mustCA(t, renew, validity)
	old := mustCA(t, t0.Add(-80*time.Minute), validity)
	newCAFn := func(time.Time, time.Duration) (*keyPair, error) { return next, nil }

	for _, tc := range []struct {
		name    string
		st      state
		now     time.Time
		trusted map[*x509.Certificate]time.Time
		force   bool
		want    string
		check   func(g Gomega, s *state)
	}{
		{name: "fresh CA: nothing to do", st: state{active: active}, now: t0.Add(time.Minute), want: ""},
		{name: "a third left: publish next", st: state{active: active}, now: renew, want: "published a next CA",
			check: func(g Gomega, s *state) { g.Expect(s.next).To(Equal(next)); g.Expect(s.active).To(Equal(active)) }},
		{name: "forced: publish next early", st: state{active: active}, now: t0.Add(time.Minute), force: true, want: "published a next CA"},
		{name: "next not in the configurations yet: wait", st: state{active: active, next: next}, now: renew.Add(time.Hour / 4), want: ""},
		{name: "next trusted for less than the delay: wait", st: state{active: active, next: next}, now: renew.Add(30 * time.Second),
			trusted: map[*x509.Certificate]time.Time{next.cert: renew}, want: ""},
		{name: "next trusted long enough: promote", st: state{active: active, next: next}, now: renew.Add(trust),
			trusted: map[*x509.Certificate]time.Time{next.cert: renew}, want: "promoted the next CA",
			check: func(g Gomega, s *state) {
				g.Expect(s.active).To(Equal(next))
				g.Expect(s.next).To(BeNil())
				g.Expect(s.previous.Equal(active.cert)).To(BeTrue())
			}},
		{name: "previous expired: drop it", st: state{active: active, previous: old.cert, previousPEM: old.certPEM}, now: old.cert.NotAfter,
			want: "dropped the expired previous CA", check: func(g Gomega, s *state) { g.Expect(s.previous).To(BeNil()) }},
		{name: "active expired: replace at once", st: state{active: active, next: next}, now: active.cert.NotAfter, want: "replaced the expired CA",
			check: func(g Gomega, s *state) {
				g.Expect(s.active).To(Equal(next))
				g.Expect(s.next).To(BeNil())
				g.Expect(s.previous).To(BeNil())
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			trusted := never
			if tc.trusted != nil {
				trusted = trustedAt(tc.trusted)
			}
			before := tc.st
			got, what, err := plan(&tc.st, planInput{now: tc.now, validity: validity, trustDelay: trust, trustedSince: trusted, force: tc.force}, newCAFn)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(what).To(Equal(tc.want))
			g.Expect(tc.st).To(Equal(before), "plan must not change its input")
			if tc.want == "" {
				g.Expect(got).To(BeIdenticalTo(&tc.st))
			}
			if tc.check != nil {
				tc.check(g, got)
			}
		})
	}
}

// Across a whole rotation, the bundle only gains CAs until the previous one expires: every CA that
// ever signed stays trusted while its certificates are valid.
func TestPlanBundleOnlyGrows(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Now()
	const validity = 90 * time.Minute
	s := &state{active: mustCA(t, t0, validity)}
	trusted := map[*x509.Certificate]time.Time{}
	signers := []*x509.Certificate{s.active.cert}
	newCAFn := newCA
	for now := t0; now.Before(t0.Add(4 * validity)); now = now.Add(time.Minute) {
		// What the bundle holds is trusted from the moment it holds it.
		for _, c := range certsIn(s.bundle(now)) {
			if _, ok := trustedAt(trusted)(c); !ok {
				trusted[c] = now
			}
		}
		n, what, err := plan(s, planInput{now: now, validity: validity, trustDelay: 5 * time.Minute, trustedSince: trustedAt(trusted)}, newCAFn)
		g.Expect(err).NotTo(HaveOccurred())
		if what == "promoted the next CA" {
			signers = append(signers, n.active.cert)
		}
		s = n
		bundle := certsIn(s.bundle(now))
		// Every CA that signed and has not expired is in the bundle.
		for _, c := range signers {
			if now.Before(c.NotAfter) {
				g.Expect(bundle).To(ContainElement(c), "at %s a CA that signed is missing", now.Sub(t0))
			}
		}
		// The active one was trusted for the trust delay before it signed (the first excepted).
		if !s.active.cert.Equal(signers[0]) {
			since, ok := trustedAt(trusted)(s.active.cert)
			g.Expect(ok).To(BeTrue())
			g.Expect(now.Sub(since)).To(BeNumerically(">=", 5*time.Minute))
		}
	}
	g.Expect(len(signers)).To(BeNumerically(">=", 5), "60-minute rotations over 6 hours")
}

func TestIssueIsCappedAtTheCAExpiry(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	ca := mustCA(t, now, time.Hour)
	cert, err := ca.issue(now, 24*time.Hour, newSANs([]string{"svc.ns.svc", "a.ns.svc", "svc.ns.svc"}, []net.IP{net.ParseIP("127.0.0.1")}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.Leaf.NotAfter).To(Equal(ca.cert.NotAfter))
	g.Expect(cert.Leaf.DNSNames).To(Equal([]string{"a.ns.svc", "svc.ns.svc"}))
	g.Expect(signedBy(cert.Leaf, ca.cert)).To(BeTrue())
	g.Expect(signedBy(cert.Leaf, mustCA(t, now, time.Hour).cert)).To(BeFalse())
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	_, err = cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "svc.ns.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	g.Expect(err).NotTo(HaveOccurred())
}

func TestDeadline(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	active := mustCA(t, now, 90*time.Minute)
	s := &state{active: active}
	g.Expect(s.deadline(never, time.Minute)).To(Equal(renewAt(active.cert)))
	next := mustCA(t, now, 90*time.Minute)
	s.next = next
	g.Expect(s.deadline(never, time.Minute)).To(Equal(active.cert.NotAfter), "waits for the next CA to be trusted")
	g.Expect(s.deadline(trustedAt(map[*x509.Certificate]time.Time{next.cert: now}), time.Minute)).To(Equal(now.Add(time.Minute)))
}
