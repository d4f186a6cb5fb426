package expansion

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestGoldenFleet(t *testing.T) {
	g := NewWithT(t)
	cluster, profs := loadFleet(t)
	res := mustExpand(t, cluster, profs)
	g.Expect(res.Instances).To(HaveLen(30))
	golden(t, g, "fleet/expanded.golden.yaml", mustMarshal(t, res))
}
