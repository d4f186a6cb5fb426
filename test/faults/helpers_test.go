package faults_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fixture"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/webhooks"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startOperator runs the operator (the shared fixture's, test/support/fixture) watching ns, with
// the webhooks when hooks is set. The trials break its world on purpose: an error it stops with is
// logged, and the trials that need it to keep running check Done themselves.
func startOperator(t *testing.T, _ Gomega, ns string, hooks *webhooks.Options) *fixture.Operator {
	t.Helper()
	mo := fixture.InProcess(ns)
	mo.Webhooks = hooks
	return fixture.StartOperator(t, env.Config, fixture.OperatorOptions{Manager: mo, SyncTimeout: 2 * time.Minute, Tolerant: true})
}

// newFleet creates a namespace with the five profiles (the shared fleet fixture) and, unless cluster
// is nil, the cluster.
func newFleet(t *testing.T, g Gomega, prefix string, cluster func(ns string) *tiledv1alpha1.TiledCluster) (string, *tiledv1alpha1.TiledCluster) {
	ctx := ctxT(t)
	ns := fixture.NewFleet(ctx, t, env.Client, prefix, nil)
	if cluster == nil {
		return ns, nil
	}
	c := cluster(ns)
	g.Expect(env.Client.Create(ctx, c)).To(Succeed())
	return ns, c
}

func defaultCluster(n int) func(ns string) *tiledv1alpha1.TiledCluster {
	return func(ns string) *tiledv1alpha1.TiledCluster {
		names, err := fleet.Beamlines(n)
		if err != nil {
			panic(err)
		}
		return fleet.Cluster(ns, fixture.ClusterName, names)
	}
}

// waitStampedOut waits until the cluster's n instances are reconciled and have their StatefulSets
// (as the operator's cache, then the API server, say), then until the operator is quiet.
func waitStampedOut(t *testing.T, _ Gomega, op *fixture.Operator, ns string, n int) {
	ctx := ctxT(t)
	fixture.WaitStampedOut(ctx, t, op.GetClient(), ns, fixture.ClusterName, n, 500*time.Millisecond, 5*time.Minute)
	fixture.WaitStampedOut(ctx, t, env.Client, ns, fixture.ClusterName, n, 500*time.Millisecond, time.Minute)
	op.WaitQuiet(ctx, t, 2*time.Second, 3*time.Minute)
}

// expectedKeys are the "Kind/name" of every object the operator must create for the cluster: what
// the engine and the renderers produce, computed here without the operator.
func expectedKeys(g Gomega, c *tiledv1alpha1.TiledCluster) map[string]bool {
	res, err := expansion.Expand(c, profileValues(fleet.Profiles(c.Namespace)), expansion.DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	keys := map[string]bool{}
	for _, inst := range res.Instances {
		keys["TiledInstance/"+inst.Object.Name] = true
		data, err := render.GenerateSecretData(inst.Object, nil, rand.Reader)
		g.Expect(err).NotTo(HaveOccurred())
		objs, err := render.Render(inst.Object, render.Inputs{SecretData: data})
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range objs.All() {
			kind, name := kindName(o)
			keys[kind+"/"+name] = true
		}
	}
	return keys
}

func profileValues(ps []*tiledv1alpha1.TiledProfile) []tiledv1alpha1.TiledProfile {
	out := make([]tiledv1alpha1.TiledProfile, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}

// kindName reads kind and name off an apply configuration.
func kindName(o any) (string, string) {
	type named interface {
		GetKind() *string
		GetName() *string
	}
	if n, ok := o.(named); ok {
		return *n.GetKind(), *n.GetName()
	}
	if u, ok := o.(interface {
		GetKind() string
		GetName() string
	}); ok {
		return u.GetKind(), u.GetName()
	}
	panic(fmt.Sprintf("no kind and name on %T", o))
}

// checkFleet asserts the stamped-out state: exactly the expected objects (none missing, no
// duplicate, nothing extra), each owned as the design says (TiledInstances by the cluster, children
// by an existing instance, retained claims, their Secrets and PersistentVolumes by no one), no orphan.
// Objects of the beamlines listed in removed (no longer in the cluster) are left out: what they leave
// behind is the retention policy's business.
func checkFleet(t *testing.T, g Gomega, c *tiledv1alpha1.TiledCluster, removed ...string) map[string]client.Object {
	all, err := fleet.Objects(ctxT(t), env.Client, c.Namespace)
	g.Expect(err).NotTo(HaveOccurred())
	// The cluster's objects: every object it stamps out carries its name in the cluster label (a
	// standalone instance's objects do not).
	objs := map[string]client.Object{}
	for k, o := range all {
		if o.GetLabels()[tiledv1alpha1.LabelCluster] == c.Name && !slices.Contains(removed, o.GetLabels()[tiledv1alpha1.LabelInstance]) {
			objs[k] = o
		}
	}
	want := expectedKeys(g, c)
	var missing, extra []string
	for k := range want {
		if _, ok := objs[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range objs {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	g.Expect(missing).To(BeEmpty(), "objects missing")
	g.Expect(extra).To(BeEmpty(), "objects not rendered for any instance (duplicates or orphans)")

	cluster := &tiledv1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKeyFromObject(c), cluster)).To(Succeed())
	instances := map[types.UID]bool{}
	for k, o := range objs {
		if strings.HasPrefix(k, "TiledInstance/") {
			instances[o.GetUID()] = true
			ref := metav1.GetControllerOf(o)
			g.Expect(ref).NotTo(BeNil(), "%s has no controller", k)
			g.Expect(ref.UID).To(Equal(cluster.UID), "%s is not controlled by its cluster", k)
		}
	}
	for k, o := range objs {
		if strings.HasPrefix(k, "TiledInstance/") {
			continue
		}
		ref := metav1.GetControllerOf(o)
		if ref == nil {
			retained := strings.HasPrefix(k, "PersistentVolume/") ||
				(strings.HasPrefix(k, "PersistentVolumeClaim/") && o.GetAnnotations()[render.AnnotationRetention] == string(tiledv1alpha1.RetentionRetain)) ||
				// The Secret goes with retained data (the database's password is in it).
				strings.HasPrefix(k, "Secret/")
			g.Expect(retained).To(BeTrue(), "%s has no controller and is not retained data", k)
			continue
		}
		g.Expect(instances[ref.UID]).To(BeTrue(), "%s is controlled by %s %s, which does not exist (orphan)", k, ref.Kind, ref.Name)
	}
	return objs
}

// secretData maps every Secret of the fleet to its data.
func secretData(objs map[string]client.Object) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for k, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			out[k] = s.Data
		}
	}
	return out
}

func getCluster(t *testing.T, g Gomega, ns string) *tiledv1alpha1.TiledCluster {
	c := &tiledv1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2"}, c)).To(Succeed())
	return c
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}
