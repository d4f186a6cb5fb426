package render

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestGolden(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := objectsYAML(o)
			g.Expect(err).NotTo(HaveOccurred())
			path := filepath.Join("testdata", f.name+".yaml")
			if *update {
				g.Expect(os.WriteFile(path, got, 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(path)
			g.Expect(err).NotTo(HaveOccurred(), "run go test ./render -update to create it")
			g.Expect(string(got)).To(Equal(string(want)))
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			first, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			a, _ := objectsYAML(first)
			for range 20 {
				o, err := Render(f.ti(), f.in)
				g.Expect(err).NotTo(HaveOccurred())
				b, _ := objectsYAML(o)
				g.Expect(b).To(Equal(a))
			}
		})
	}
}
