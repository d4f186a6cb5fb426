package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The reviewed list of the checkout loads, and names the commit hack/previous-release names: a list
// reviewed for another previous release is a failure of the operator-upgrade case on the node, and
// is caught here first.
func TestReviewedWritesOfTheCheckout(t *testing.T) {
	// From the package's folder under go test; hack/e2e/run.sh runs the compiled suite (these tests
	// too) elsewhere and names the checkout in E2E_REPO.
	root := filepath.Join("..", "..")
	if repo := os.Getenv("E2E_REPO"); repo != "" {
		root = repo
	}
	r, err := LoadReviewedWrites(filepath.Join(root, ReviewedWritesFile))
	if err != nil {
		t.Fatal(err)
	}
	prev, err := PreviousReleaseCommit(filepath.Join(root, PreviousReleaseFile))
	if err != nil {
		t.Fatal(err)
	}
	if r.PreviousRelease != prev {
		t.Errorf("%s was reviewed for %s, %s names %s: review the upgrade's writes and update the list", ReviewedWritesFile, r.PreviousRelease, PreviousReleaseFile, prev)
	}
}

const commitA = "d0269e702432313b0a9273727948a4794eb40228"

func list() *ReviewedWrites {
	return &ReviewedWrites{PreviousRelease: commitA, Writes: []ReviewedWrite{
		{Pattern: "patch networkpolicies/*", Reason: "new"},
		{Pattern: "patch tiledinstances/*", Reason: "spec gains networkPolicy"},
	}}
}

func TestJudgeExactlyTheReviewedWrites(t *testing.T) {
	v := list().Judge(commitA, []string{"patch networkpolicies/opup-o1", "patch networkpolicies/opup-o1-postgres", "patch tiledinstances/opup-o1"})
	if p := v.Problems(); len(p) != 0 {
		t.Fatalf("problems %v, want none", p)
	}
	if v.Reviewed() != 3 || v.Matched["patch networkpolicies/*"] != 2 {
		t.Errorf("matched %v, want 2 network policies and 1 instance", v.Matched)
	}
}

func TestJudgeAWriteOnNoPattern(t *testing.T) {
	v := list().Judge(commitA, []string{"patch networkpolicies/a", "patch tiledinstances/a", "patch statefulsets/a", "delete networkpolicies/a"})
	if want := []string{"delete networkpolicies/a", "patch statefulsets/a"}; !reflect.DeepEqual(v.Unexpected, want) {
		t.Errorf("unexpected %v, want %v", v.Unexpected, want)
	}
	if len(v.Problems()) != 1 {
		t.Errorf("problems %v, want one naming the two writes", v.Problems())
	}
}

// A pattern that matched nothing makes the list stale.
func TestJudgeAnUnseenPattern(t *testing.T) {
	v := list().Judge(commitA, []string{"patch networkpolicies/a"})
	if !reflect.DeepEqual(v.Unseen, []string{"patch tiledinstances/*"}) {
		t.Errorf("unseen %v, want the instances' pattern", v.Unseen)
	}
	if p := v.Problems(); len(p) != 1 || !strings.Contains(p[0], "stale") {
		t.Errorf("problems %v, want one saying the list is stale", p)
	}
}

// No writes at all: every pattern unseen.
func TestJudgeNoWrites(t *testing.T) {
	if v := list().Judge(commitA, nil); len(v.Unseen) != 2 {
		t.Errorf("unseen %v, want both patterns", v.Unseen)
	}
}

// A list reviewed for another previous release is not applied: every write is unexpected.
func TestJudgeAnotherPreviousRelease(t *testing.T) {
	other := strings.Repeat("1", 40)
	v := list().Judge(other, []string{"patch networkpolicies/a"})
	if v.Stale == "" || !strings.Contains(v.Stale, other) || !strings.Contains(v.Stale, commitA) {
		t.Errorf("stale %q, want it to name both commits", v.Stale)
	}
	if !reflect.DeepEqual(v.Unexpected, []string{"patch networkpolicies/a"}) || v.Reviewed() != 0 {
		t.Errorf("unexpected %v, reviewed %d: the list must not be applied", v.Unexpected, v.Reviewed())
	}
	// Not applied even when nothing was written: the list must be reviewed again.
	if p := list().Judge(other, nil).Problems(); len(p) != 1 {
		t.Errorf("problems %v, want the stale list", p)
	}
}

func TestLoadReviewedWritesRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"no commit":        "writes: []\n",
		"a short commit":   "previousRelease: d0269e7\nwrites: []\n",
		"no reason":        "previousRelease: " + commitA + "\nwrites: [{pattern: \"patch networkpolicies/*\"}]\n",
		"no resource/name": "previousRelease: " + commitA + "\nwrites: [{pattern: \"patch networkpolicies\", reason: x}]\n",
		"no verb":          "previousRelease: " + commitA + "\nwrites: [{pattern: \"networkpolicies/*\", reason: x}]\n",
		"a bad pattern":    "previousRelease: " + commitA + "\nwrites: [{pattern: \"patch networkpolicies/[\", reason: x}]\n",
		"twice":            "previousRelease: " + commitA + "\nwrites: [{pattern: \"patch a/*\", reason: x}, {pattern: \"patch a/*\", reason: y}]\n",
		"an unknown field": "previousRelease: " + commitA + "\nwrites: [{pattern: \"patch a/*\", reason: x, max: 3}]\n",
	} {
		f := filepath.Join(t.TempDir(), "w.yaml")
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadReviewedWrites(f); err == nil {
			t.Errorf("%s: loaded, want refused", name)
		}
	}
	// No writes is a list: reviewed to write nothing.
	f := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(f, []byte("previousRelease: "+commitA+"\nwrites: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReviewedWrites(f); err != nil {
		t.Errorf("an empty list: %v", err)
	}
}

func TestRollingStatefulSets(t *testing.T) {
	r := &ReviewedWrites{PreviousRelease: commitA, Writes: []ReviewedWrite{
		{Pattern: "patch configmaps/*", Reason: "entrypoint.py changed"},
		{Pattern: "patch statefulsets/opup-o[0-9]", Reason: "config hash", Rolls: true},
		{Pattern: "patch statefulsets/*-postgres", Reason: "a label, no pod change"},
	}}
	sts := []string{"opup-o2", "opup-o1-cache", "opup-o1", "opup-o1-postgres"}
	if got, want := r.Rolling(commitA, sts), []string{"opup-o1", "opup-o2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rolling %v, want %v (a pattern that writes without rolling rolls nothing)", got, want)
	}
	if got := r.Rolling("0000000000000000000000000000000000000000", sts); got != nil {
		t.Errorf("a list reviewed for another release rolled %v", got)
	}
}

func TestOnlyAStatefulSetPatternRolls(t *testing.T) {
	f := filepath.Join(t.TempDir(), "writes.yaml")
	body := "previousRelease: " + commitA + "\nwrites:\n- pattern: \"patch configmaps/*\"\n  reason: x\n  rolls: true\n"
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReviewedWrites(f); err == nil || !strings.Contains(err.Error(), "rolls") {
		t.Errorf("a rolling ConfigMap pattern loaded: %v", err)
	}
}
