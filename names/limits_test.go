package names

import (
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestLimits: shortened names are exactly at their limit, keep their suffix, end with the hash,
// and distinct long inputs stay distinct.
func TestLimits(t *testing.T) {
	g := NewWithT(t)
	long := strings.Repeat("x", 80)
	g.Expect(Join(63, long)).To(HaveLen(63))
	g.Expect(Instance("nsls2", long)).To(HaveLen(MaxInstanceNameLength))
	g.Expect(Instance("nsls2", long+"a")).NotTo(Equal(Instance("nsls2", long+"b")))
	o := For("nsls2", long)
	g.Expect(o.Tiled).To(HaveLen(MaxStatefulSetNameLength))
	g.Expect(o.Postgres).To(HaveLen(MaxStatefulSetNameLength))
	g.Expect(o.Postgres).To(MatchRegexp(`^x+-postgres-[0-9a-f]{8}$`))
	g.Expect(o.Secret).To(HaveLen(MaxObjectNameLength))
	g.Expect(o.Secret).To(MatchRegexp(`^x+-secret-[0-9a-f]{8}$`))
	g.Expect(o.MetricsSecret).To(HaveLen(MaxObjectNameLength))
	g.Expect(o.MetricsSecret).To(MatchRegexp(`^x+-metrics-[0-9a-f]{8}$`))
	g.Expect(For("nsls2", "csx").MetricsSecret).To(Equal("csx-metrics"))
	g.Expect(For("nsls2", "csx").ConfigMap).To(Equal("csx-config"))
	for _, lim := range []int{0, 1, 8, 9} {
		g.Expect(Join(lim, long)).To(HaveLen(min(lim, hashLength)), "limit %d", lim)
	}
}

// TestInstanceNames: an instance's name is <cluster>-<instance> while it fits; a long one is cut to
// MaxInstanceNameLength, stable and distinct, and ends with the hash; Join trims a prefix ending in
// '-', and label values are cut to 63.
func TestInstanceNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Instance("nsls2", "chx")).To(Equal("nsls2-chx"))
	long := strings.Repeat("a", 40)
	n := Instance(long, strings.Repeat("b", 40))
	g.Expect(n).To(HaveLen(MaxInstanceNameLength))
	g.Expect(n).To(Equal(Instance(long, strings.Repeat("b", 40))), "stable")
	g.Expect(n).NotTo(Equal(Instance(long, strings.Repeat("b", 39)+"c")), "distinct")
	g.Expect(n).To(MatchRegexp(`^a{40}-b{13}-[0-9a-f]{8}$`))
	g.Expect(Join(MaxStatefulSetNameLength, n, "db")).To(HaveLen(MaxStatefulSetNameLength))
	// A prefix ending in '-' is trimmed so the result stays a DNS label.
	g.Expect(Join(20, "abcdefghij-", "xxxxxxxxxxx")).To(MatchRegexp(`^abcdefghij-[0-9a-f]{8}$`))
	g.Expect(Join(5, "abcdefgh")).To(HaveLen(5))
	g.Expect(LabelValue(strings.Repeat("c", 70))).To(HaveLen(63))
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// TestChildNamesAreDNSLabels: every child name of an instance, short or long, is a DNS label of at
// most 63 characters, its StatefulSets' at most 52; long instance names that differ give different
// children.
func TestChildNamesAreDNSLabels(t *testing.T) {
	g := NewWithT(t)
	for _, instance := range []string{"nsls2-csx", "nsls2-" + strings.Repeat("x", 70)} {
		n := For("beamlines", instance)
		for _, s := range []string{n.Tiled, n.HeadlessService, n.ConfigMap, n.Secret, n.MetricsSecret, n.DataClaim, n.DataVolume, n.Postgres, n.PostgresInit, n.ReadOnlyClaimName("proposals"), n.ReadOnlyVolumeName("ns", "proposals")} {
			g.Expect(len(s)).To(BeNumerically("<=", 63), s)
			g.Expect(s).To(MatchRegexp(dnsLabel.String()), s)
		}
		g.Expect(len(n.Tiled)).To(BeNumerically("<=", 52))
		g.Expect(len(n.Postgres)).To(BeNumerically("<=", 52))
	}
	x, y := For("beamlines", "nsls2-"+strings.Repeat("a", 60)+"1").ConfigMap, For("beamlines", "nsls2-"+strings.Repeat("a", 60)+"2").ConfigMap
	g.Expect(x).NotTo(Equal(y))
	g.Expect(x).To(MatchRegexp(`-config-[0-9a-f]{8}$`))
}
