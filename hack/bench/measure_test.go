package main

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"
)

// TestPhasesRunInTheMeasurementsOrder: the floor runs before the operator's control plane starts
// (so that it and the stamp-out are measured a minute apart), the stamp-out before every phase that
// changes the fleet or stops a replica, the restart before the failover (which kills the restarted
// replica), and the convergence trials last (they stop the shared control plane); only the idle
// phase and the naive baseline can be skipped, by their -skip words.
func TestPhasesRunInTheMeasurementsOrder(t *testing.T) {
	g := NewWithT(t)
	var names []string
	skippable := map[string]string{}
	for _, p := range phases {
		g.Expect(p.run).NotTo(BeNil(), p.name)
		names = append(names, p.name)
		if p.skip != "" {
			skippable[p.name] = p.skip
		}
	}
	at := func(name string) int {
		i := slices.Index(names, name)
		g.Expect(i).To(BeNumerically(">=", 0), "no phase %q", name)
		return i
	}
	g.Expect(at("floor")).To(BeNumerically("<", at("control plane")))
	for _, later := range []string{"idle", "profile change", "override change", "restart", "failover", "naive baseline"} {
		g.Expect(at("stamp-out")).To(BeNumerically("<", at(later)), later)
	}
	g.Expect(at("restart")).To(BeNumerically("<", at("failover")))
	g.Expect(at("convergence trials")).To(Equal(len(phases) - 1))
	g.Expect(skippable).To(Equal(map[string]string{"idle": "idle", "naive baseline": "naive"}))
}
