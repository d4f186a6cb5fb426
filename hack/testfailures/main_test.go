package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestParse: each failed leaf test's lines, with -v (parallel subtests interleaved under "=== NAME"
// headers) and without (the lines after the "--- FAIL" line); a parent that failed with its child is
// left out.
func TestParse(t *testing.T) {
	tests := []struct {
		file string
		want []failure
	}{
		{file: "testdata/parallel.txt", want: []failure{
			{Name: "TestE2E/case_a", Lines: []string{
				"    a_test.go:10: a starts",
				"    a_test.go:11: the instance's Ready condition while scaling: Ready=False Unschedulable",
				"        continued on a second line",
			}},
			{Name: "TestLonely"},
		}},
		{file: "testdata/quiet.txt", want: []failure{
			{Name: "TestQuiet", Lines: []string{"    quiet_test.go:7: want 2, got 3"}},
			{Name: "TestParent/child", Lines: []string{"        parent_test.go:9: child broke"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			g := NewWithT(t)
			f, err := os.Open(tc.file)
			g.Expect(err).NotTo(HaveOccurred())
			defer f.Close()
			got, err := parse(f)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name     string
		failures []failure
		n        int
		want     []string
		notWant  []string
	}{
		{name: "nothing failed", want: nil},
		{name: "the last lines", failures: []failure{{Name: "T", Lines: []string{"    1", "    2", "    3"}}}, n: 2,
			want: []string{"--- T", "... 1 lines before", "    2", "    3"}, notWant: []string{"    1\n"}},
		{name: "a failure that logged nothing", failures: []failure{{Name: "T"}}, n: 5, want: []string{"(logged nothing)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var b bytes.Buffer
			write(&b, tc.failures, tc.n)
			if tc.want == nil {
				g.Expect(b.String()).To(BeEmpty())
			}
			for _, w := range tc.want {
				g.Expect(b.String()).To(ContainSubstring(w))
			}
			for _, w := range tc.notWant {
				g.Expect(strings.Contains(b.String(), w)).To(BeFalse(), "unexpected %q in %q", w, b.String())
			}
		})
	}
}
