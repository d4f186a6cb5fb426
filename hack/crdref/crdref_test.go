package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// docs/profile-reference.md is what hack/crdref generates from today's CRDs: run `make docs` and
// commit when this fails.
func TestReferenceIsCurrent(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "profile-reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("docs/profile-reference.md is stale: run make docs and commit")
	}
}

// Every field has a row and a description.
func TestReferenceDocumentsEveryField(t *testing.T) {
	out, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{
		"`spec.priority`", "`spec.storage.readOnlyMounts[].nfs.pathExpression`", "`spec.database.external.uriSecretRef.key`",
		"`spec.instances[].overrides`", "`status.instanceSelector`", "`spec.auth.oidc.providers[].wellKnownURI`",
	} {
		if !bytes.Contains(out, []byte("| "+field+" |")) {
			t.Errorf("no row for %s", field)
		}
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "| `") && strings.HasSuffix(line, "|  |") {
			t.Errorf("row without a description: %s", line)
		}
	}
}
