package applier

import (
	"testing"
	"unsafe"

	. "github.com/onsi/gomega"
)

// TestRecordsAreSmall: a record is one 96-byte allocation (a thousand instances are 22,000 of
// them; with the whole SHA-256, a time.Time and a status's UID it was 136 bytes, a 144-byte one).
func TestRecordsAreSmall(t *testing.T) {
	g := NewWithT(t)
	g.Expect(int(unsafe.Sizeof(record{}))).To(BeNumerically("<=", 96))
	g.Expect(int(unsafe.Sizeof(statusRecord{}))).To(BeNumerically("<=", 48))
}
