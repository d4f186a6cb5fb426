package controllers_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/operator/traffic"
)

var profileStatusWrite = traffic.Key{Verb: traffic.VerbApply, Resource: "tiledprofiles/status"}

// profileEvents lists the Events regarding one profile, as type/reason.
func profileEvents(t *testing.T, g Gomega, ns, name string) []string {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctxT(t), &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "TiledProfile" && e.Regarding.Name == name {
			out = append(out, e.Type+"/"+e.Reason)
		}
	}
	return out
}

// profileState is what a test reads off a profile's status.
type profileState struct {
	Generation, ObservedGeneration int64
	Valid, Reason                  string
	Clusters, Instances            int32
}

func readProfile(t *testing.T, g Gomega, ns, name string) (profileState, string) {
	p := &tiledv1alpha1.TiledProfile{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
	s := profileState{Generation: p.Generation, ObservedGeneration: p.Status.ObservedGeneration,
		Clusters: p.Status.SelectedByClusters, Instances: p.Status.SelectedByInstances}
	message := ""
	if c := meta.FindStatusCondition(p.Status.Conditions, controllers.ConditionValid); c != nil {
		s.Valid, s.Reason, message = string(c.Status), c.Reason, c.Message
		g.Expect(c.ObservedGeneration).To(Equal(p.Status.ObservedGeneration), "the condition's generation")
	}
	return s, message
}

// settled waits until the namespace holds n TiledInstances, each reconciled at its generation, and
// the operator has gone quiet.
func settled(t *testing.T, g Gomega, op *runningOperator, ns string, n int) {
	g.Eventually(func(g Gomega) {
		var tis tiledv1alpha1.TiledInstanceList
		g.Expect(env.Client.List(ctxT(t), &tis, client.InNamespace(ns))).To(Succeed())
		g.Expect(tis.Items).To(HaveLen(n))
		for _, ti := range tis.Items {
			g.Expect(ti.Status.ObservedGeneration).To(Equal(ti.Generation), "instance %s not reconciled", ti.Name)
		}
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
}

// TestProfileStatusReported: a profile reports whether it is valid, at which generation, and how many
// clusters (by their own selector or an instance's) and standalone instances select it; an
// invalid expression (stored while no webhook checks it) turns it Valid=False naming the field, with
// one Warning Event; fixing it turns it back; the counts follow the selectors; and the status is
// written only when it changes.
func TestProfileStatusReported(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "profilestatus")
	op := startOperator(t, ns)

	const host = "instance.name + '.example.org'"
	site := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site", Labels: map[string]string{"facility": "test"}},
		Spec: tiledv1alpha1.TiledProfileSpec{InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Storage:  &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{Size: "5Gi"}},
			Database: &tiledv1alpha1.DatabaseSpec{Managed: &tiledv1alpha1.ManagedDatabase{Size: "1Gi"}},
			Expose: &tiledv1alpha1.ExposeSpec{Ingress: &tiledv1alpha1.IngressSpec{
				Enabled: ptr.To(true), ClassName: "nginx", HostExpression: host,
			}},
		}},
	}
	mx := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mx", Labels: map[string]string{"family": "mx"}},
		Spec: tiledv1alpha1.TiledProfileSpec{Priority: 10, InstanceTemplate: tiledv1alpha1.InstanceTemplate{
			Storage: &tiledv1alpha1.StorageSpec{Data: &tiledv1alpha1.DataVolume{Size: "50Gi"}},
		}},
	}
	other := &tiledv1alpha1.TiledProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", Labels: map[string]string{"facility": "elsewhere"}},
	}
	facility := &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}}
	// fleet selects site itself, and mx for one instance only.
	fleet := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"},
		Spec: tiledv1alpha1.TiledClusterSpec{ProfileSelector: facility, Instances: []tiledv1alpha1.ClusterInstance{
			{Name: "a"},
			{Name: "amx", ProfileSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"family": "mx"}}},
		}},
	}
	second := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"},
		Spec:       tiledv1alpha1.TiledClusterSpec{ProfileSelector: facility, Instances: []tiledv1alpha1.ClusterInstance{{Name: "b"}}},
	}
	solo := &tiledv1alpha1.TiledInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "solo"},
		Spec:       tiledv1alpha1.TiledInstanceSpec{ProfileSelector: facility},
	}
	createAll(t, g, site, mx, other, fleet, second, solo)

	state := func(name string) func(g Gomega) profileState {
		return func(g Gomega) profileState { s, _ := readProfile(t, g, ns, name); return s }
	}
	g.Eventually(state("site"), time.Minute, 200*time.Millisecond).Should(Equal(profileState{
		Generation: 1, ObservedGeneration: 1, Valid: "True", Reason: controllers.ReasonValid, Clusters: 2, Instances: 1}))
	g.Eventually(state("mx"), time.Minute, 200*time.Millisecond).Should(Equal(profileState{
		Generation: 1, ObservedGeneration: 1, Valid: "True", Reason: controllers.ReasonValid, Clusters: 1, Instances: 0}))
	g.Eventually(state("other"), time.Minute, 200*time.Millisecond).Should(Equal(profileState{
		Generation: 1, ObservedGeneration: 1, Valid: "True", Reason: controllers.ReasonValid}))
	settled(t, g, op, ns, 4)

	// kubectl get shows the verdict and the counts (0 too; a priority of 0 is left blank).
	out, stderr, err := env.Kubectl(ctxT(t), "get", "tiledprofiles", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	t.Logf("kubectl get tiledprofiles:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "PRIORITY", "VALID", "CLUSTERS", "INSTANCES", "AGE"}))
	g.Expect(lines).To(ContainElement(MatchRegexp(`^site\s+True\s+2\s+1\s`)))
	g.Expect(lines).To(ContainElement(MatchRegexp(`^mx\s+10\s+True\s+1\s+0\s`)))
	g.Expect(lines).To(ContainElement(MatchRegexp(`^other\s+True\s+0\s+0\s`)))
	out, stderr, err = env.Kubectl(ctxT(t), "get", "tiledprofiles", "-n", ns, "-o", "wide")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "PRIORITY", "VALID", "CLUSTERS", "INSTANCES", "REASON", "AGE"}))
	g.Expect(lines).To(ContainElement(MatchRegexp(`^site\s+True\s+2\s+1\s+Valid\s`)))

	// A full resync writes no profile status (nor anything else).
	before := op.Traffic.Snapshot()
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op)
	resync := op.Traffic.Snapshot().Sub(before)
	g.Expect(resync[profileStatusWrite]).To(BeZero(), "profile status writes on a resync:\n%s", resync)
	g.Expect(resync.Writes()).To(BeZero(), "writes on a resync:\n%s", resync)

	// A cluster change that selects no profile differently (a new beamline without a selector):
	// the profiles are counted again, and their statuses are not written.
	before = op.Traffic.Snapshot()
	updateObject(t, g, &tiledv1alpha1.TiledCluster{}, client.ObjectKeyFromObject(getCluster(t, g, ns)), func(c *tiledv1alpha1.TiledCluster) {
		c.Spec.Instances = append(c.Spec.Instances, tiledv1alpha1.ClusterInstance{Name: "c"})
	})
	settled(t, g, op, ns, 5)
	grow := op.Traffic.Snapshot().Sub(before)
	g.Expect(grow[profileStatusWrite]).To(BeZero(), "profile status writes for a change of no count:\n%s", grow)

	// An expression that does not compile (no webhook runs here to refuse it): Valid=False at the
	// new generation, naming the field, and one Warning Event.
	before = op.Traffic.Snapshot()
	updateObject(t, g, &tiledv1alpha1.TiledProfile{}, client.ObjectKeyFromObject(site), func(p *tiledv1alpha1.TiledProfile) {
		p.Spec.Expose.Ingress.HostExpression = "instance.name +"
	})
	g.Eventually(state("site"), time.Minute, 200*time.Millisecond).Should(Equal(profileState{
		Generation: 2, ObservedGeneration: 2, Valid: "False", Reason: controllers.ReasonExpressionInvalid, Clusters: 2, Instances: 1}))
	_, message := readProfile(t, g, ns, "site")
	g.Expect(message).To(ContainSubstring("profile/site@2"))
	g.Expect(message).To(ContainSubstring("spec.expose.ingress.hostExpression"))
	g.Expect(message).To(ContainSubstring(`"instance.name +"`))
	g.Eventually(func(g Gomega) []string { return profileEvents(t, g, ns, "site") }, 30*time.Second, 200*time.Millisecond).
		Should(ContainElement(corev1.EventTypeWarning + "/" + controllers.ReasonExpressionInvalid))
	waitQuiet(t, op)
	g.Expect(op.Traffic.Snapshot().Sub(before)[profileStatusWrite]).To(Equal(int64(1)), "one status write for the change")

	// Resynced while invalid: no status write, no second Warning.
	before = op.Traffic.Snapshot()
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op)
	resync = op.Traffic.Snapshot().Sub(before)
	g.Expect(resync.Writes()).To(BeZero(), "writes on a resync of an invalid profile:\n%s", resync)
	g.Expect(profileEvents(t, g, ns, "site")).To(ConsistOf(corev1.EventTypeWarning + "/" + controllers.ReasonExpressionInvalid))

	// Fixed: Valid=True again, a Normal Event, and still one Warning.
	updateObject(t, g, &tiledv1alpha1.TiledProfile{}, client.ObjectKeyFromObject(site), func(p *tiledv1alpha1.TiledProfile) {
		p.Spec.Expose.Ingress.HostExpression = host
	})
	g.Eventually(state("site"), time.Minute, 200*time.Millisecond).Should(Equal(profileState{
		Generation: 3, ObservedGeneration: 3, Valid: "True", Reason: controllers.ReasonValid, Clusters: 2, Instances: 1}))
	g.Eventually(func(g Gomega) []string { return profileEvents(t, g, ns, "site") }, 30*time.Second, 200*time.Millisecond).
		Should(ConsistOf(corev1.EventTypeWarning+"/"+controllers.ReasonExpressionInvalid, corev1.EventTypeNormal+"/"+controllers.ReasonValid))

	// The counts follow the selectors: the second cluster stops selecting site, the standalone
	// instance goes, the fleet's beamline stops selecting mx; and a profile's new labels count too.
	updateObject(t, g, &tiledv1alpha1.TiledCluster{}, client.ObjectKeyFromObject(second), func(s2 *tiledv1alpha1.TiledCluster) {
		s2.Spec.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "elsewhere"}}
	})
	g.Eventually(state("site"), time.Minute, 200*time.Millisecond).Should(HaveField("Clusters", int32(1)))
	g.Eventually(state("other"), time.Minute, 200*time.Millisecond).Should(HaveField("Clusters", int32(1)))
	g.Expect(env.Client.Delete(ctxT(t), solo)).To(Succeed())
	g.Eventually(state("site"), time.Minute, 200*time.Millisecond).Should(HaveField("Instances", int32(0)))

	updateObject(t, g, &tiledv1alpha1.TiledCluster{}, client.ObjectKeyFromObject(getCluster(t, g, ns)), func(c *tiledv1alpha1.TiledCluster) {
		c.Spec.Instances[1].ProfileSelector = nil
	})
	g.Eventually(state("mx"), time.Minute, 200*time.Millisecond).Should(HaveField("Clusters", int32(0)))

	updateObject(t, g, &tiledv1alpha1.TiledProfile{}, client.ObjectKeyFromObject(mx), func(p *tiledv1alpha1.TiledProfile) {
		p.Labels["facility"] = "test"
	})
	g.Eventually(state("mx"), time.Minute, 200*time.Millisecond).Should(Equal(profileState{
		Generation: 1, ObservedGeneration: 1, Valid: "True", Reason: controllers.ReasonValid, Clusters: 1, Instances: 0}))
}

// updateObject reads the object key into obj, changes it with mutate and updates it, again on a
// conflict: the controllers write the status of the same object meanwhile, and each status write
// is a new resourceVersion.
func updateObject[T client.Object](t *testing.T, g Gomega, obj T, key client.ObjectKey, mutate func(T)) {
	t.Helper()
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctxT(t), key, obj); err != nil {
			return err
		}
		mutate(obj)
		return env.Client.Update(ctxT(t), obj)
	})).To(Succeed())
}
