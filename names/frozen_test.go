package names

import (
	"fmt"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// golden computes, with this package, the lines of testdata/names.golden. That file was written by
// the code these functions came from (expansion.Name and render's objectName), before they moved
// here; it has no -update flag on purpose: live objects are named by this output.
func golden() string {
	var b strings.Builder
	seg := func(n int, c byte) string { return strings.Repeat(string(c), n) }
	// Strings of lengths around every limit, some with "-" or "." where the cut falls.
	var strs []string
	for _, n := range []int{0, 1, 5, 8, 9, 10, 11, 20, 30, 40, 41, 42, 43, 44, 45, 46, 47, 48, 50, 51, 52, 53, 54, 55, 60, 62, 63, 64, 65, 70, 100, 200, 252, 253, 254, 300} {
		strs = append(strs, seg(n, 'a'))
	}
	for _, cut := range []int{42, 43, 44, 53, 54, 55} {
		for _, c := range []byte{'-', '.'} {
			s := []byte(seg(70, 'b'))
			s[cut-1] = c
			strs = append(strs, string(s))
			s[cut-2] = c
			strs = append(strs, string(s))
		}
	}
	strs = append(strs, "nsls2", "csx", "nsls2-csx", "chx-postgres", "x-"+seg(60, 'c'), seg(60, 'd')+"-x", "a.b.c", "---", "-"+seg(62, 'e'))

	for _, lim := range []int{0, 1, 5, 8, 10, 11, 12, 43, 52, 53, 62, 63, 64, 253} {
		for _, s := range strs {
			fmt.Fprintf(&b, "Name\t%d\t%s\t%s\n", lim, s, Join(lim, s))
		}
		fmt.Fprintf(&b, "Name\t%d\t%s|%s\t%s\n", lim, "nsls2", seg(70, 'f'), Join(lim, "nsls2", seg(70, 'f')))
	}
	for _, s := range strs {
		fmt.Fprintf(&b, "LabelValue\t%s\t%s\n", s, LabelValue(s))
	}
	clusters := []string{"nsls2", "fleet", seg(30, 'g'), seg(40, 'h') + "-", seg(62, 'i'), seg(63, 'j'), seg(100, 'k'), "a.b"}
	instances := []string{"csx", "chx-postgres", seg(20, 'l'), seg(31, 'm'), seg(32, 'n'), "-" + seg(30, 'o'), seg(63, 'p')}
	for _, c := range clusters {
		for _, i := range instances {
			fmt.Fprintf(&b, "InstanceName\t%s\t%s\t%s\n", c, i, Instance(c, i))
		}
	}
	namespaces := []string{"nsls2", "default", seg(20, 'q'), seg(63, 'r')}
	mounts := []string{"detectors", "d", seg(40, 's'), seg(63, 't')}
	var instNames []string
	instNames = append(instNames, strs...)
	for _, c := range clusters[:5] {
		for _, i := range instances {
			instNames = append(instNames, Instance(c, i))
		}
	}
	for _, ns := range namespaces {
		for _, n := range instNames {
			if n == "" {
				continue
			}
			x := For(ns, n)
			fmt.Fprintf(&b, "Objects\t%s\t%s\tbase=%s tiled=%s headless=%s config=%s secret=%s data=%s datavolume=%s postgres=%s postgresinit=%s dbclaim=%s\n",
				ns, n, x.Base, x.Tiled, x.HeadlessService, x.ConfigMap, x.Secret, x.DataClaim, x.DataVolume, x.Postgres, x.PostgresInit, x.DatabaseClaim)
			for _, m := range mounts {
				fmt.Fprintf(&b, "ReadOnly\t%s\t%s\t%s\tclaim=%s volume=%s\n", ns, n, m, x.ReadOnlyClaimName(m), x.ReadOnlyVolumeName(ns, m))
			}
		}
	}
	return b.String()
}

// TestGolden: every name is what it was when live objects were first named with it, byte for byte.
func TestGolden(t *testing.T) {
	g := NewWithT(t)
	want, err := os.ReadFile("testdata/names.golden")
	g.Expect(err).NotTo(HaveOccurred())
	wantLines := strings.Split(string(want), "\n")
	gotLines := strings.Split(golden(), "\n")
	g.Expect(len(wantLines)).To(BeNumerically(">", 3000))
	g.Expect(gotLines).To(HaveLen(len(wantLines)))
	for i := range wantLines {
		g.Expect(gotLines[i]).To(Equal(wantLines[i]), "line %d of testdata/names.golden", i+1)
	}
}
