package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A port nobody listens on refuses every connection: blocked succeeds after -confirm attempts.
func TestBlockedRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if err := blocked([]string{"-timeout", "5s", "-confirm", "2", "http://" + addr + "/"}); err != nil {
		t.Fatalf("blocked on a closed port: %v", err)
	}
}

// A server that answers, even with an error status, is not blocked: blocked fails at its timeout and
// names the last answer.
func TestBlockedAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer srv.Close()
	err := blocked([]string{"-timeout", "1s", srv.URL})
	if err == nil {
		t.Fatal("blocked succeeded against a server that answers")
	}
	if !strings.Contains(err.Error(), "403") {
		t.Fatalf("error %q does not name the last answer (403)", err)
	}
}
