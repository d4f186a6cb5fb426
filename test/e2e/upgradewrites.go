package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// The operator-upgrade cases (operator_upgrade_test.go) count the operator's writes to the upgrade
// fleet's objects, status and Events apart, after each upgrade. An upgrade to a release that renders
// nothing new must write nothing (this build -> prime -> this build). The upgrade from the previous
// release may write what this release deliberately adds to a running fleet (the first release with
// NetworkPolicies creates them for every instance, and the TiledInstances' expanded spec gains
// networkPolicy): those writes are listed, each with its reason, in ReviewedWritesFile, reviewed for
// one previous release. This file is outside the e2e build tag so that its unit tests run in
// `make test`, without a node.

// ReviewedWritesFile is the reviewed list, relative to the checkout.
const ReviewedWritesFile = "test/e2e/testdata/operator-upgrade-writes.yaml"

// PreviousReleaseFile names the previous release: its first line is the commit.
const PreviousReleaseFile = "hack/previous-release"

// ReviewedWrites is ReviewedWritesFile: the operator's writes the upgrade from PreviousRelease is
// expected to make to a running fleet.
type ReviewedWrites struct {
	// PreviousRelease is the commit of hack/previous-release the list was reviewed for. The list
	// applies to the upgrade from that commit only.
	PreviousRelease string `json:"previousRelease"`
	// Writes are the expected writes.
	Writes []ReviewedWrite `json:"writes"`
}

// ReviewedWrite is one pattern of expected writes and why the upgrade makes them.
type ReviewedWrite struct {
	// Pattern matches writes as the cases print them, "verb resource/name" (the audit log's verb: a
	// server-side apply is a "patch", whether it creates the object or changes it), with path.Match:
	// "patch networkpolicies/*".
	Pattern string `json:"pattern"`
	// Reason says why the upgrade writes this, for the reviewer of the next release.
	Reason string `json:"reason"`
	// Rolls says that these writes change the pod template of the StatefulSets they match
	// ("patch statefulsets/NAME" writes): the upgrade replaces those StatefulSets' pods, one rollout
	// within the cluster's rollout budget, each new pod Ready with no container restarted. No other
	// pod may be replaced. Only a pattern of "patch statefulsets/..." may roll.
	Rolls bool `json:"rolls,omitempty"`
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// LoadReviewedWrites reads and checks a reviewed list: a commit, and the writes, each with a valid
// pattern of the form "verb resource/name" and a reason. No writes is a list too: the upgrade from
// that release was reviewed to write nothing.
func LoadReviewedWrites(file string) (*ReviewedWrites, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var r ReviewedWrites
	if err := yaml.UnmarshalStrict(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if !commitRE.MatchString(r.PreviousRelease) {
		return nil, fmt.Errorf("%s: previousRelease %q is not a commit (40 hex digits)", file, r.PreviousRelease)
	}
	seen := map[string]bool{}
	for i, w := range r.Writes {
		verb, target, ok := strings.Cut(w.Pattern, " ")
		if !ok || verb == "" || !strings.Contains(target, "/") {
			return nil, fmt.Errorf("%s: writes[%d].pattern %q is not \"verb resource/name\"", file, i, w.Pattern)
		}
		if _, err := path.Match(w.Pattern, ""); err != nil {
			return nil, fmt.Errorf("%s: writes[%d].pattern %q: %w", file, i, w.Pattern, err)
		}
		if strings.TrimSpace(w.Reason) == "" {
			return nil, fmt.Errorf("%s: writes[%d] (%s) has no reason", file, i, w.Pattern)
		}
		if w.Rolls && !strings.HasPrefix(w.Pattern, "patch statefulsets/") {
			return nil, fmt.Errorf("%s: writes[%d].rolls: pattern %q is not \"patch statefulsets/NAME\"; only a StatefulSet's pods roll", file, i, w.Pattern)
		}
		if seen[w.Pattern] {
			return nil, fmt.Errorf("%s: writes[%d].pattern %q is listed twice", file, i, w.Pattern)
		}
		seen[w.Pattern] = true
	}
	return &r, nil
}

// PreviousReleaseCommit is the first line of the file hack/previous-release: the commit.
func PreviousReleaseCommit(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() {
		return "", fmt.Errorf("%s is empty", file)
	}
	c := strings.TrimSpace(sc.Text())
	if !commitRE.MatchString(c) {
		return "", fmt.Errorf("%s: first line %q is not a commit", file, c)
	}
	return c, nil
}

// WritesVerdict is what Judge says of the writes an upgrade made.
type WritesVerdict struct {
	// Stale, when not empty, says that the list was reviewed for another previous release: it was
	// not applied, and every write is in Unexpected.
	Stale string
	// Matched counts the writes each pattern matched (a write matching several counts for the first).
	Matched map[string]int
	// Unexpected are the writes no pattern matches, sorted.
	Unexpected []string
	// Unseen are the patterns no write matched: the list is stale (the upgrade no longer writes
	// that), or the operator did not do what the list says it does.
	Unseen []string
}

// Reviewed is the number of writes the list matched.
func (v WritesVerdict) Reviewed() int {
	n := 0
	for _, c := range v.Matched {
		n += c
	}
	return n
}

// Problems are the verdict's failures, one sentence each; none when the writes are exactly the
// reviewed ones.
func (v WritesVerdict) Problems() []string {
	var out []string
	if v.Stale != "" {
		out = append(out, v.Stale)
	}
	if len(v.Unexpected) > 0 {
		out = append(out, fmt.Sprintf("%d writes on no reviewed pattern: %v", len(v.Unexpected), v.Unexpected))
	}
	for _, p := range v.Unseen {
		out = append(out, fmt.Sprintf("the reviewed pattern %q matched no write: the list in %s is stale, or the operator no longer does what it says", p, ReviewedWritesFile))
	}
	return out
}

// Judge compares the writes of the upgrade from the previous release previous with the list r: every
// write must match a pattern and every pattern must match a write. A list reviewed for another
// commit is not applied.
func (r *ReviewedWrites) Judge(previous string, writes []string) WritesVerdict {
	v := WritesVerdict{Matched: map[string]int{}}
	if r.PreviousRelease != previous {
		v.Stale = fmt.Sprintf("%s was reviewed for the previous release %s, but %s names %s: review the writes of this upgrade (listed with the failure) and update the list and its commit",
			ReviewedWritesFile, r.PreviousRelease, PreviousReleaseFile, previous)
		v.Unexpected = append([]string(nil), writes...)
		sort.Strings(v.Unexpected)
		return v
	}
	for _, w := range writes {
		matched := false
		for _, p := range r.Writes {
			if ok, _ := path.Match(p.Pattern, w); ok {
				v.Matched[p.Pattern]++
				matched = true
				break
			}
		}
		if !matched {
			v.Unexpected = append(v.Unexpected, w)
		}
	}
	sort.Strings(v.Unexpected)
	for _, p := range r.Writes {
		if v.Matched[p.Pattern] == 0 {
			v.Unseen = append(v.Unseen, p.Pattern)
		}
	}
	return v
}

// Rolling says which of the StatefulSets named are to roll in the upgrade from previous: those a
// rolling pattern matches ("patch statefulsets/NAME"). None when the list was reviewed for another
// previous release (it is not applied; Judge says so).
func (r *ReviewedWrites) Rolling(previous string, statefulSets []string) []string {
	if r == nil || r.PreviousRelease != previous {
		return nil
	}
	var out []string
	for _, name := range statefulSets {
		for _, p := range r.Writes {
			if ok, _ := path.Match(p.Pattern, "patch statefulsets/"+name); ok && p.Rolls {
				out = append(out, name)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}
