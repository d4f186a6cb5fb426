package crdcompat_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/hack/crdcompat"
)

// The checkout's files, relative to this package (go test runs in the package's folder).
var (
	repoRoot       = filepath.Join("..", "..")
	currentCRDs    = filepath.Join(repoRoot, "config", "crd", "bases")
	previousCRDs   = filepath.Join("testdata", "previous")
	previousCommit = filepath.Join(repoRoot, "hack", "previous-release")
	commitFile     = filepath.Join(previousCRDs, "COMMIT")
)

const refreshHint = "run hack/crdcompat/refresh.sh and commit hack/crdcompat/testdata/previous"

var hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

// firstLine returns the first line of a file that is neither empty nor a # comment, trimmed.
func firstLine(g Gomega, path string) string {
	raw, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

// TestPreviousReleaseCompatible is the upgrade check of a release: every CRD and served version of
// the previous release (testdata/previous) must be replaceable by the checkout's
// (config/crd/bases) without a Problem. Warnings are logged.
func TestPreviousReleaseCompatible(t *testing.T) {
	g := NewWithT(t)
	previous, err := crdcompat.LoadDir(previousCRDs)
	g.Expect(err).NotTo(HaveOccurred())
	current, err := crdcompat.LoadDir(currentCRDs)
	g.Expect(err).NotTo(HaveOccurred())
	// The three kinds of the project, so that an empty folder does not pass.
	g.Expect(previous).To(HaveLen(3))

	res := crdcompat.Compare(previous, current)
	for _, w := range res.Warnings {
		t.Logf("warning (may refuse the next update of some stored objects): %s", w)
	}
	for _, p := range res.Problems {
		t.Errorf("CRD upgrade problem: %s", p)
	}
	if len(res.Problems) > 0 {
		t.Errorf("%d problems between the previous release (%s, commit %s) and config/crd/bases: "+
			"an object stored by the previous release would break. Keep the field (deprecate it in its "+
			"description), or add a new API version with a conversion.",
			len(res.Problems), previousCRDs, firstLine(g, commitFile))
	}
}

// TestPreviousReleaseIsCurrent checks that testdata/previous holds the release hack/previous-release
// names: the COMMIT file names the same commit, and, when git has that commit, every file is
// byte-for-byte what git show gives.
func TestPreviousReleaseIsCurrent(t *testing.T) {
	g := NewWithT(t)
	want := firstLine(g, previousCommit)
	g.Expect(want).To(MatchRegexp(hex40.String()), "the first line of hack/previous-release must be a 40-hex commit")
	got := firstLine(g, commitFile)
	g.Expect(got).To(Equal(want),
		"testdata/previous holds commit %s but hack/previous-release names %s: %s", got, want, refreshHint)

	git, err := exec.LookPath("git")
	if err != nil {
		t.Logf("git is not on PATH: the files of testdata/previous are not compared with commit %s", want)
		return
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(git, append([]string{"-C", repoRoot}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Logf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out, err
	}
	if _, err := run("cat-file", "-e", want+"^{commit}"); err != nil {
		t.Logf("commit %s is not in this clone (shallow?): the files of testdata/previous are not compared with it; "+
			"the compatibility check still runs from them", want)
		return
	}

	ls, err := run("ls-tree", "--name-only", want, "config/crd/bases/")
	g.Expect(err).NotTo(HaveOccurred())
	var wantFiles []string
	for _, p := range strings.Fields(string(ls)) {
		if strings.HasSuffix(p, ".yaml") {
			wantFiles = append(wantFiles, p)
		}
	}
	g.Expect(wantFiles).NotTo(BeEmpty(), "no config/crd/bases/*.yaml at %s", want)

	have, err := filepath.Glob(filepath.Join(previousCRDs, "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var haveNames, wantNames []string
	for _, p := range have {
		haveNames = append(haveNames, filepath.Base(p))
	}
	for _, p := range wantFiles {
		wantNames = append(wantNames, filepath.Base(p))
	}
	sort.Strings(haveNames)
	sort.Strings(wantNames)
	g.Expect(haveNames).To(Equal(wantNames), "the CRD files of testdata/previous are not those of %s: %s", want, refreshHint)

	for _, p := range wantFiles {
		wantBytes, err := run("show", want+":"+p)
		g.Expect(err).NotTo(HaveOccurred())
		haveBytes, err := os.ReadFile(filepath.Join(previousCRDs, filepath.Base(p)))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bytes.Equal(haveBytes, wantBytes)).To(BeTrue(),
			"testdata/previous/%s differs from %s at %s: %s", filepath.Base(p), p, want, refreshHint)
	}
}
