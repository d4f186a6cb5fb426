package controllers_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/operator/traffic"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{ControllerManager: true, Controllers: append([]string{"job"}, testenv.DefaultControllers...)}, &env))
}

// runningOperator is the shared fixture's in-process operator (test/support/fixture).
type runningOperator struct{ *fixture.Operator }

// startOperator runs the operator, watching only the given namespaces so that tests do not see each
// other's objects.
func startOperator(t *testing.T, namespaces ...string) *runningOperator {
	t.Helper()
	return startOperatorWith(t, env.Config, namespaces...)
}

// startOperatorWith is startOperator with the rest config the manager is built from.
func startOperatorWith(t *testing.T, cfg *rest.Config, namespaces ...string) *runningOperator {
	t.Helper()
	return &runningOperator{fixture.StartOperator(t, cfg, fixture.OperatorOptions{
		Manager: fixture.InProcess(namespaces...), SyncTimeout: time.Minute,
	})}
}

func (o *runningOperator) stop() { _ = o.Stop() }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newNamespace(t *testing.T, _ Gomega, prefix string) string {
	return fixture.Namespace(ctxT(t), t, env.Client, prefix)
}

// beamlines are the NSLS-II fleet's 30 beamline names (test/support/fleet reads them from testdata).
func beamlines(t *testing.T) []string {
	names, err := fleet.Beamlines(30) // the 30 public names of controllers/testdata/nsls2-beamlines.txt
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// fleetProfiles are three of the facility's profiles (test/support/fleet): defaults for every
// beamline, the MX family (selected per instance) and operations.
func fleetProfiles(ns string) []*tiledv1alpha1.TiledProfile {
	return fleet.ProfilesNamed(ns, "nsls2-defaults", "nsls2-mx", "nsls2-ops")
}

// fleetCluster lists the beamlines (fleet.Cluster: MX beamlines select the MX profile, chx has one
// override), rolled out one instance at a time.
func fleetCluster(ns, name string, names []string) *tiledv1alpha1.TiledCluster {
	c := fleet.Cluster(ns, name, names)
	c.Spec.Rollout.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	return c
}

func createAll(t *testing.T, _ Gomega, objs ...client.Object) {
	fixture.Create(ctxT(t), t, env.Client, objs...)
}

// managedObjects counts the objects of a namespace that the operator created, by kind: TiledInstances
// and every object labelled as managed by it (plus cluster-scoped PersistentVolumes of the
// namespace), as fleet.Objects reads them.
func managedObjects(t *testing.T, g Gomega, ns string) map[string]int {
	objs, err := fleet.Objects(ctxT(t), env.Client, ns)
	g.Expect(err).NotTo(HaveOccurred())
	counts := map[string]int{}
	for k := range objs {
		kind, _, _ := strings.Cut(k, "/")
		counts[kind]++
	}
	return counts
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// waitForStampOut waits until the cluster has all its instances and each instance its objects, and
// the operator has gone quiet (no request for a moment).
func waitForStampOut(t *testing.T, _ Gomega, op *runningOperator, ns, cluster string, n int) {
	fixture.WaitStampedOut(ctxT(t), t, env.Client, ns, cluster, n, 250*time.Millisecond, 3*time.Minute)
	waitQuiet(t, op)
}

// waitQuiet waits until the operator has sent no request for a second.
func waitQuiet(t *testing.T, op *runningOperator) {
	op.WaitQuiet(ctxT(t), t, time.Second, 2*time.Minute)
}

func isStatus(k traffic.Key) bool { return strings.HasSuffix(k.Resource, "/status") }

func getInstance(t *testing.T, g Gomega, ns, name string) *tiledv1alpha1.TiledInstance {
	ti := &tiledv1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, ti)).To(Succeed())
	return ti
}
