package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// markDependenciesReady simulates the StatefulSet controller and the kubelet for the managed
// dependencies of the instance (its PostgreSQL and, when it streams through one, its streaming
// cache): each reports every replica ready at its current generation. A change of the Tiled pod
// template waits for them (dependencies before dependants, controllers/tiledinstance_dependencies.go),
// so a test that changes it on a serving instance makes them ready first, as they are on a node.
func markDependenciesReady(t *testing.T, g Gomega, ns, instance string) {
	n := fleet.NamesOf(getInstance(t, g, ns, instance))
	for _, name := range []string{n.Postgres, n.Cache} {
		if exists(t, &appsv1.StatefulSet{}, ns, name) {
			markReady(t, g, ns, name)
		}
	}
}
