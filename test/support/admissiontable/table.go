// Package admissiontable reads the table of bad objects in webhooks/testdata/admission: one YAML
// file per object that the API server, with the operator's CRDs and webhooks, must refuse, and that
// `kubectl tiled expand` must refuse offline. Each file begins with comment lines:
//
//	# What is wrong, in a sentence.
//	# field: the path of the refused field, as the refusal names it
//	# message: a fragment of the refusal (one line per fragment; all must appear)
//
// followed by the object (a TiledProfile, TiledCluster or TiledInstance without a namespace). The
// objects are tried beside the fixtures of webhooks/testdata (profiles.yaml, cluster.yaml,
// admission-fixtures.yaml), in one namespace.
//
// It also holds what the webhooks' handler tests (package webhooks) and their API-server tests
// (test/integration/webhooks) share: the objects of webhooks/testdata (LoadBase) and the bad objects
// each handler refuses (HandlerCases). It is test support, so it lives under test/support: only
// tests import it (test/layers refuses an import of test/ from the product's packages).
package admissiontable

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Case is one bad object.
type Case struct {
	// Name is the file name without .yaml, e.g. 01-names-child-suffix.
	Name string
	// Description is the first comment line.
	Description string
	// Field is the path of the refused field.
	Field string
	// Messages are fragments of the refusal.
	Messages []string
	// Object is the file's YAML (comments included).
	Object []byte
}

// Dir is webhooks/testdata/admission of this checkout.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "webhooks", "testdata", "admission")
}

// Fixtures are the files of the objects the cases are tried beside, in the order to create them.
func Fixtures() []string {
	return []string{Testdata("profiles.yaml"), Testdata("cluster.yaml"), Testdata("admission-fixtures.yaml")}
}

// Load reads every case of dir, ordered by file name.
func Load(dir string) ([]Case, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Case
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		c := Case{Name: strings.TrimSuffix(filepath.Base(name), ".yaml"), Object: b}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "#") {
				break
			}
			line = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			switch {
			case strings.HasPrefix(line, "field:"):
				c.Field = strings.TrimSpace(strings.TrimPrefix(line, "field:"))
			case strings.HasPrefix(line, "message:"):
				c.Messages = append(c.Messages, strings.TrimSpace(strings.TrimPrefix(line, "message:")))
			case c.Description == "":
				c.Description = line
			}
		}
		if c.Field == "" || len(c.Messages) == 0 {
			return nil, fmt.Errorf("%s: a case needs a '# field:' and at least one '# message:' line", name)
		}
		out = append(out, c)
	}
	return out, nil
}

// Generated returns the cases too large to keep as files: a standalone instance whose Tiled config
// would not fit in a ConfigMap (1 MiB), though the instance itself fits in etcd.
func Generated() []Case {
	origins := make([]string, 0, 11000)
	for i := 0; len(origins) < cap(origins); i++ {
		origins = append(origins, fmt.Sprintf("https://beamline-%05d.tiled.example.org/%s", i, strings.Repeat("x", 60)))
	}
	obj := map[string]any{
		"apiVersion": "tiled.blueskyproject.io/v1alpha1", "kind": "TiledInstance",
		"metadata": map[string]any{"name": "bad"},
		"spec": map[string]any{
			"profileSelector": map[string]any{"matchLabels": map[string]any{"facility": "nsls2"}},
			"config":          map[string]any{"allow_origins": origins},
		},
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return []Case{{Name: "99-config-too-large", Description: "A Tiled config larger than a ConfigMap holds.",
		Field: "spec.config", Messages: []string{"Too long", "1048566"}, Object: b}}
}
