package intern

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"

	. "github.com/onsi/gomega"
)

func sameBytes(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestStringSurvivesCollections: equal strings interned on either side of collections share one
// copy (unique.Make(s).Value() gives a new one once its last Handle is collected), and the copy is
// of the string's bytes alone, not of the buffer it was cut from.
func TestStringSurvivesCollections(t *testing.T) {
	g := NewWithT(t)
	buf := strings.Repeat("x", 4096) + "nsls2-bmm-owner-uid"
	first := String(buf[4096:])
	g.Expect(first).To(Equal("nsls2-bmm-owner-uid"))
	g.Expect(sameBytes(first, buf[4096:])).To(BeFalse(), "a copy, not a slice of the buffer")
	for range 3 {
		runtime.GC()
	}
	again := String(strings.Clone("nsls2-bmm-owner-uid"))
	g.Expect(sameBytes(first, again)).To(BeTrue(), "one copy across collections")
	g.Expect(String("")).To(Equal(""))
}

// TestStringStartsOver: a full table starts over instead of growing, and what it handed out stays
// valid.
func TestStringStartsOver(t *testing.T) {
	g := NewWithT(t)
	kept := String("kept-across-the-reset")
	for i := range MaxStrings + 10 {
		String("filler-" + strings.Repeat("y", i%7) + string(rune('a'+i%26)) + itoa(i))
	}
	g.Expect(Len()).To(BeNumerically("<=", MaxStrings))
	g.Expect(kept).To(Equal("kept-across-the-reset"))
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}
