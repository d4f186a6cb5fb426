package main

import (
	"os"
	"path/filepath"
	"testing"

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
