package expansion

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// disconnectedDoc is the guide whose table of built-in images is generated from BuiltinImages.
const disconnectedDoc = "../docs/disconnected.md"

// Markers around the generated table in disconnectedDoc.
const (
	imagesTableBegin = "<!-- BEGIN built-in images: generated from expansion.BuiltinImages (go test ./expansion/ -run TestDisconnectedDocTable -update) -->\n"
	imagesTableEnd   = "<!-- END built-in images -->\n"
)

// imagesTable is the Markdown table of BuiltinImages.
func imagesTable() string {
	var b strings.Builder
	b.WriteString("| role (`relatedImages` name) | built-in image | manager variable | profile fields naming another | what runs it |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, bi := range BuiltinImages() {
		fields := make([]string, len(bi.Fields))
		for i, f := range bi.Fields {
			fields[i] = "`" + f + "`"
		}
		b.WriteString("| `" + bi.Role + "` | `" + bi.Default + "` (`" + FullImageReference(bi.Default) + "`) | `" + bi.Variable() + "` | " +
			strings.Join(fields, ", ") + " | " + bi.Runs + " |\n")
	}
	return b.String()
}

// docs/disconnected.md lists every built-in image, its variable and the fields that name another, as
// BuiltinImages says: run with -update to rewrite the table after a change.
func TestDisconnectedDocTable(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(disconnectedDoc))
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(data, []byte(imagesTableBegin)), bytes.Index(data, []byte(imagesTableEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers of the built-in images table", disconnectedDoc)
	}
	begin += len(imagesTableBegin)
	want := imagesTable()
	if string(data[begin:end]) == want {
		return
	}
	if !*update {
		t.Fatalf("the table of built-in images in %s is stale: run go test ./expansion/ -run TestDisconnectedDocTable -update and commit; want:\n%s", disconnectedDoc, want)
	}
	out := append(append(append([]byte{}, data[:begin]...), want...), data[end:]...)
	if err := os.WriteFile(filepath.FromSlash(disconnectedDoc), out, 0o644); err != nil {
		t.Fatal(err)
	}
}
