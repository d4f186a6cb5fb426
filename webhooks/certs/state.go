package certs

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"
)

// Keys of the CA Secret.
const (
	KeyCACert         = "ca.crt"
	KeyCAKey          = "ca.key"
	KeyNextCACert     = "next-ca.crt"
	KeyNextCAKey      = "next-ca.key"
	KeyPreviousCACert = "previous-ca.crt"
)

// state is what the CA Secret holds: the active CA, which signs serving certificates; during a
// rotation the next one, trusted but not signing yet; and the previous one, trusted until it
// expires.
type state struct {
	active   *keyPair
	next     *keyPair
	previous *x509.Certificate
	// previousPEM is previous, PEM-encoded.
	previousPEM []byte
}

// parseState reads the Secret's data. A missing or broken active CA is an error; a broken next or
// previous one is dropped (and the caller's next write removes it).
func parseState(data map[string][]byte) (*state, []error) {
	var problems []error
	active, err := parsePair(data[KeyCACert], data[KeyCAKey])
	if err != nil {
		return nil, []error{fmt.Errorf("%s/%s: %w", KeyCACert, KeyCAKey, err)}
	}
	s := &state{active: active}
	if len(data[KeyNextCACert]) > 0 || len(data[KeyNextCAKey]) > 0 {
		if s.next, err = parsePair(data[KeyNextCACert], data[KeyNextCAKey]); err != nil {
			problems = append(problems, fmt.Errorf("%s/%s: %w", KeyNextCACert, KeyNextCAKey, err))
		}
	}
	if len(data[KeyPreviousCACert]) > 0 {
		if s.previous, err = parseCert(data[KeyPreviousCACert]); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", KeyPreviousCACert, err))
		} else {
			s.previousPEM = data[KeyPreviousCACert]
		}
	}
	return s, problems
}

// data is the Secret's data for s.
func (s *state) data() map[string][]byte {
	d := map[string][]byte{KeyCACert: s.active.certPEM, KeyCAKey: s.active.keyPEM}
	if s.next != nil {
		d[KeyNextCACert], d[KeyNextCAKey] = s.next.certPEM, s.next.keyPEM
	}
	if s.previous != nil {
		d[KeyPreviousCACert] = s.previousPEM
	}
	return d
}

// bundle is the PEM caBundle for s at now: the active CA, the next one and the previous one unless
// it has expired, in that order.
func (s *state) bundle(now time.Time) []byte {
	var b bytes.Buffer
	b.Write(s.active.certPEM)
	if s.next != nil {
		b.Write(s.next.certPEM)
	}
	if s.previous != nil && now.Before(s.previous.NotAfter) && !s.previous.Equal(s.active.cert) {
		b.Write(s.previousPEM)
	}
	return b.Bytes()
}

// planInput is what plan needs besides the state.
type planInput struct {
	now time.Time
	// validity of a new CA.
	validity time.Duration
	// trustDelay is how long the next CA must have been in both configurations before it signs.
	trustDelay time.Duration
	// trustedSince says since when this replica has seen a CA in both webhook configurations.
	trustedSince func(*x509.Certificate) (time.Time, bool)
	// force publishes a next CA now (Rotate), if there is none.
	force bool
}

// plan returns the next state, and what changed (empty when nothing did). newCA makes a CA.
func plan(s *state, in planInput, newCAFn func(time.Time, time.Duration) (*keyPair, error)) (*state, string, error) {
	n := *s
	var what string
	// An expired active CA is replaced at once: nothing it signed is valid anymore.
	if !in.now.Before(n.active.cert.NotAfter) {
		ca, err := newCAFn(in.now, in.validity)
		if err != nil {
			return nil, "", err
		}
		n.active, n.next, n.previous, n.previousPEM = ca, nil, nil, nil
		return &n, "replaced the expired CA", nil
	}
	if n.previous != nil && !in.now.Before(n.previous.NotAfter) {
		n.previous, n.previousPEM = nil, nil
		what = "dropped the expired previous CA"
	}
	if n.next != nil && !in.now.Before(n.next.cert.NotAfter) {
		n.next = nil
		what = "dropped an expired next CA"
	}
	if n.next == nil && (in.force || !in.now.Before(renewAt(n.active.cert))) {
		ca, err := newCAFn(in.now, in.validity)
		if err != nil {
			return nil, "", err
		}
		n.next = ca
		return &n, "published a next CA", nil
	}
	if n.next != nil {
		if since, ok := in.trustedSince(n.next.cert); ok && in.now.Sub(since) >= in.trustDelay {
			n.previous, n.previousPEM = n.active.cert, n.active.certPEM
			n.active, n.next = n.next, nil
			return &n, "promoted the next CA", nil
		}
	}
	if what == "" {
		return s, "", nil
	}
	return &n, what, nil
}

// deadline is the next time plan has something to do for s (zero when it waits on an event).
func (s *state) deadline(trustedSince func(*x509.Certificate) (time.Time, bool), trustDelay time.Duration) time.Time {
	var t time.Time
	earliest := func(c time.Time) {
		if t.IsZero() || c.Before(t) {
			t = c
		}
	}
	earliest(s.active.cert.NotAfter)
	if s.next == nil {
		earliest(renewAt(s.active.cert))
	} else if since, ok := trustedSince(s.next.cert); ok {
		earliest(since.Add(trustDelay))
	}
	if s.previous != nil {
		earliest(s.previous.NotAfter)
	}
	return t
}
