package packaging

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fieldLine is a line of `kubectl explain --recursive` naming a field: indentation, name, <type>.
var fieldLine = regexp.MustCompile(`^(\s+)([A-Za-z0-9_$-]+)\s+<[^>]+>`)

// recursiveFields parses the FIELDS section of `kubectl explain --recursive` into dotted paths.
func recursiveFields(out string) []string {
	var paths, stack []string
	var indents []int
	inFields := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "FIELDS:") {
			inFields = true
			continue
		}
		m := fieldLine.FindStringSubmatch(line)
		if !inFields || m == nil {
			continue
		}
		indent := len(m[1])
		for len(indents) > 0 && indents[len(indents)-1] >= indent {
			indents, stack = indents[:len(indents)-1], stack[:len(stack)-1]
		}
		indents, stack = append(indents, indent), append(stack, m[2])
		paths = append(paths, strings.Join(stack, "."))
	}
	return paths
}

// description returns the DESCRIPTION section of `kubectl explain` for one field.
func description(out string) string {
	_, after, found := strings.Cut(out, "DESCRIPTION:")
	if !found {
		return ""
	}
	before, _, _ := strings.Cut(after, "\nFIELDS:")
	return strings.TrimSpace(before)
}

// `kubectl explain tiledprofile.spec --recursive` lists every field of a profile; each one, asked
// for on its own, has a documentation line: an admin learns the API from kubectl alone.
func TestExplainDocumentsEveryProfileField(t *testing.T) {
	// One kubectl process a field, eight at once: some 800 fields of the two kinds. Five minutes
	// were not enough on a loaded machine (the two cores shared with a benchmark); the deadline
	// bounds a hung kubectl, not the test's speed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	installCRDs(ctx, t)
	for _, resource := range []string{"tiledprofile", "tiledcluster"} {
		// The apiserver publishes a new CRD's OpenAPI a moment after it is established.
		var out, stderr string
		var err error
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, stderr, err = kubectlStdin(ctx, t, nil, "explain", resource+".spec", "--recursive")
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("kubectl explain %s.spec --recursive: %v\n%s", resource, err, stderr)
		}
		fields := recursiveFields(out)
		if len(fields) < 50 {
			t.Fatalf("kubectl explain %s.spec --recursive lists only %d fields:\n%s", resource, len(fields), out)
		}
		for _, want := range []string{"priority", "tiled.image", "storage.readOnlyMounts.nfs.pathExpression", "database.external.uriSecretRef.key"} {
			if resource == "tiledprofile" && !containsString(fields, want) {
				t.Errorf("kubectl explain %s.spec --recursive does not list %s", resource, want)
			}
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		var mu sync.Mutex
		var undocumented []string
		for _, f := range fields {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				out, stderr, err := kubectlStdin(ctx, t, nil, "explain", resource+".spec."+f)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					undocumented = append(undocumented, f+" (kubectl explain failed: "+strings.TrimSpace(stderr)+")")
				} else if description(out) == "" || description(out) == "<empty>" {
					undocumented = append(undocumented, f)
				}
			}()
		}
		wg.Wait()
		if len(undocumented) > 0 {
			t.Errorf("%s.spec fields without a description in kubectl explain:\n  %s", resource, strings.Join(undocumented, "\n  "))
		}
		t.Logf("%s.spec: %d fields, each documented", resource, len(fields))
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var crdsOnce sync.Once

// installCRDs creates the operator's CRDs from the config/default rendering, once.
func installCRDs(ctx context.Context, t *testing.T) {
	t.Helper()
	crdsOnce.Do(func() {
		crds := only(renderDefault(t), "CustomResourceDefinition")
		if out, stderr, err := kubectlStdin(ctx, t, toYAML(t, crds), "apply", "--server-side", "--field-manager=packaging-test", "-f", "-"); err != nil {
			t.Fatalf("installing the CRDs: %v\n%s%s", err, out, stderr)
		}
		if out, stderr, err := kubectlStdin(ctx, t, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
			t.Fatalf("CRDs not established: %v\n%s%s", err, out, stderr)
		}
	})
}
