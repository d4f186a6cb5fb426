package main

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

// fixtureArgs are the -f flags of the objects the admission table is tried beside.
func fixtureArgs() []string {
	var args []string
	for _, f := range admissiontable.Fixtures() {
		args = append(args, "-f", f)
	}
	return args
}

// The fixtures themselves pass: the offline checks refuse nothing the API server admits.
func TestAdmissionFixturesExpand(t *testing.T) {
	g := NewWithT(t)
	code, out, errOut := runCmd("", append([]string{"expand", "-n", "admission"}, fixtureArgs()...)...)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("name: bl-a-b"))
}

// TestAdmissionTableOffline runs the table of bad objects that webhooks' TestAdmissionTable tries
// against the API server through `kubectl tiled expand`, beside the same fixtures: each is refused
// with the same field and reason.
func TestAdmissionTableOffline(t *testing.T) {
	cases, err := admissiontable.Load(admissiontable.Dir())
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, admissiontable.Generated()...)
	if len(cases) < 40 {
		t.Fatalf("only %d bad objects", len(cases))
	}
	dir := t.TempDir()
	refused := 0
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			file := filepath.Join(dir, tc.Name+".yaml")
			g.Expect(os.WriteFile(file, tc.Object, 0o600)).To(Succeed())
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			g.Expect(yaml.Unmarshal(tc.Object, &meta)).To(Succeed())
			args := append([]string{"expand", "-n", "admission"}, fixtureArgs()...)
			code, out, errOut := runCmd("", append(args, "-f", file)...)
			t.Log(errOut)
			g.Expect(code).To(Equal(1), "%s was expanded:\n%s", tc.Description, out)
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(ContainSubstring(meta.Kind), "the refusal names the kind")
			g.Expect(errOut).To(ContainSubstring(meta.Metadata.Name), "the refusal names the object")
			g.Expect(errOut).To(ContainSubstring(tc.Field), "the refusal names the field")
			for _, m := range tc.Messages {
				g.Expect(errOut).To(ContainSubstring(m))
			}
			refused++
		})
	}
	t.Logf("%d of %d bad objects refused offline with the field named", refused, len(cases))
}
