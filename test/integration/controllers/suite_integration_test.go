package controllers_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/traffic"
	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{ControllerManager: true}, &env))
}

// runningOperator runs the manager in-process until the test ends.
type runningOperator struct {
	*operator.Operator
	cancel context.CancelFunc
	done   chan struct{}
}

// startOperator runs the operator, watching only the given namespaces so that tests do not see each
// other's objects.
func startOperator(t *testing.T, namespaces ...string) *runningOperator {
	t.Helper()
	return startOperatorWith(t, env.Config, namespaces...)
}

// startOperatorWith is startOperator with the rest config the manager is built from.
func startOperatorWith(t *testing.T, cfg *rest.Config, namespaces ...string) *runningOperator {
	t.Helper()
	g := NewWithT(t)
	op, err := operator.NewManager(cfg, operator.ManagerOptions{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", WatchNamespaces: namespaces, Restartable: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	o := &runningOperator{Operator: op, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		if err := op.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	g.Expect(op.GetCache().WaitForCacheSync(syncCtx)).To(BeTrue())
	t.Cleanup(o.stop)
	return o
}

func (o *runningOperator) stop() {
	o.cancel()
	<-o.done
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newNamespace(t *testing.T, g Gomega, prefix string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	g.Expect(env.Client.Create(ctxT(t), ns)).To(Succeed())
	return ns.Name
}

// beamlines are the NSLS-II fleet's 30 beamline names (test/support/fleet reads them from testdata).
func beamlines(t *testing.T) []string {
	names, err := fleet.Beamlines(30) // the 30 public names of controllers/testdata/nsls2-beamlines.txt
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// fleetProfiles are the facility's profiles: defaults for every beamline, the MX family (selected
// per instance) and monitoring.
func fleetProfiles(ns string) []*tiledv1alpha1.TiledProfile {
	return []*tiledv1alpha1.TiledProfile{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-defaults", Labels: map[string]string{"facility": "nsls2"}},
			Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Tiled: &tiledv1alpha1.TiledServerSpec{Image: "ghcr.io/bluesky/tiled:0.2.20"},
				Storage: &tiledv1alpha1.StorageSpec{
					Data: &tiledv1alpha1.DataVolume{StorageClassName: ptr.To("ceph-rbd"), Size: "50Gi"},
					ReadOnlyMounts: []tiledv1alpha1.ReadOnlyMount{{
						Name: "proposals", MountPath: "/nsls2/proposals",
						NFS: &tiledv1alpha1.NFSVolumeSource{Server: "nfs.nsls2.bnl.gov", PathExpression: "'/nsls2/data/' + instance.name + '/proposals'"},
					}},
				},
				Database: &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Image: "postgres:16", Size: "20Gi"}},
				Auth:     &tiledv1alpha1.AuthSpec{SingleUserAPIKey: &tiledv1alpha1.SingleUserAPIKey{}},
				Expose: &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{
					Enabled: ptr.To(true), ClassName: "nginx", HostExpression: "instance.name + '.tiled.nsls2.bnl.gov'",
				}},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-mx", Labels: map[string]string{"family": "mx"}},
			Spec: tiledv1alpha1.TiledProfileSpec{Priority: 10, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{Size: "500Gi"}},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nsls2-ops", Labels: map[string]string{"facility": "nsls2"}},
			Spec: tiledv1alpha1.TiledProfileSpec{Priority: 5, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
				Tiled: &tiledv1alpha1.TiledServerSpec{PodAnnotations: map[string]string{"nsls2.bnl.gov/team": "data-science"}},
			}},
		},
	}
}

// fleetCluster lists the beamlines; MX beamlines select the MX profile, chx has one override.
func fleetCluster(ns, name string, names []string) *tiledv1alpha1.TiledCluster {
	c := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tiledv1alpha1.TiledClusterSpec{
			ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "nsls2"}},
			Rollout:         &tiledv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		},
	}
	for _, n := range names {
		ci := tiledv1alpha1.ClusterInstance{Name: n}
		switch n {
		case "amx", "fmx", "nyx":
			ci.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"family": "mx"}}
		case "chx":
			ci.Overrides = &tiledv1alpha1.InstanceTemplate{Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{Size: "2Ti"}}}
		}
		c.Spec.Instances = append(c.Spec.Instances, ci)
	}
	return c
}

func createAll(t *testing.T, g Gomega, objs ...client.Object) {
	for _, o := range objs {
		g.Expect(env.Client.Create(ctxT(t), o)).To(Succeed(), "creating %T %s", o, o.GetName())
	}
}

// managedObjects counts the objects of a namespace that the operator created: TiledInstances and
// every object labelled as managed by it (plus cluster-scoped PersistentVolumes of the namespace).
func managedObjects(t *testing.T, g Gomega, ns string) map[string]int {
	ctx := ctxT(t)
	sel := client.MatchingLabels{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}
	counts := map[string]int{}
	lists := map[string]client.ObjectList{
		"ConfigMap": &corev1.ConfigMapList{}, "Secret": &corev1.SecretList{}, "Service": &corev1.ServiceList{},
		"PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{}, "StatefulSet": &appsv1.StatefulSetList{},
	}
	for kind, l := range lists {
		g.Expect(env.Client.List(ctx, l, client.InNamespace(ns), sel)).To(Succeed())
		counts[kind] = lenOf(l)
	}
	var tis tiledv1alpha1.TiledInstanceList
	g.Expect(env.Client.List(ctx, &tis, client.InNamespace(ns))).To(Succeed())
	counts["TiledInstance"] = len(tis.Items)
	var pvs corev1.PersistentVolumeList
	g.Expect(env.Client.List(ctx, &pvs, sel)).To(Succeed())
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
			counts["PersistentVolume"]++
		}
	}
	var ings networkingv1.IngressList
	g.Expect(env.Client.List(ctx, &ings, client.InNamespace(ns), sel)).To(Succeed())
	counts["Ingress"] = len(ings.Items)
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
func waitForStampOut(t *testing.T, g Gomega, op *runningOperator, ns, cluster string, n int) {
	g.Eventually(func(g Gomega) {
		var tis tiledv1alpha1.TiledInstanceList
		g.Expect(env.Client.List(ctxT(t), &tis, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelCluster: cluster})).To(Succeed())
		g.Expect(tis.Items).To(HaveLen(n))
		for _, ti := range tis.Items {
			g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation), "instance %s not reconciled", ti.Name)
		}
		var sts appsv1.StatefulSetList
		g.Expect(env.Client.List(ctxT(t), &sts, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "server"})).To(Succeed())
		g.Expect(sts.Items).To(HaveLen(n))
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
}

// waitQuiet waits until the operator has sent no request for a second.
func waitQuiet(t *testing.T, op *runningOperator) {
	deadline := time.Now().Add(2 * time.Minute)
	last := op.Traffic.Snapshot().Total()
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		now := op.Traffic.Snapshot().Total()
		if now == last {
			return
		}
		last = now
	}
	t.Fatalf("the operator never went quiet:\n%s", op.Traffic.Snapshot())
}

func isStatus(k traffic.Key) bool { return strings.HasSuffix(k.Resource, "/status") }

func getInstance(t *testing.T, g Gomega, ns, name string) *tiledv1alpha1.TiledInstance {
	ti := &tiledv1alpha1.TiledInstance{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, ti)).To(Succeed())
	return ti
}

func lenOf(l client.ObjectList) int {
	items, err := meta.ExtractList(l)
	if err != nil {
		panic(err)
	}
	return len(items)
}
