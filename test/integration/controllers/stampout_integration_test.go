package controllers_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/operator/traffic"
)

// idleWindow is how long the idle phase watches for requests: TILED_IDLE_SECONDS, 30 by default
// (`make bench` measures ten minutes).
func idleWindow() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("TILED_IDLE_SECONDS")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 30 * time.Second
}

// resourceVersions maps every operator-managed object of the namespace to its resourceVersion.
func resourceVersions(t *testing.T, g Gomega, ns string) map[string]string {
	ctx := ctxT(t)
	out := map[string]string{}
	sel := client.MatchingLabels{tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}
	add := func(kind string, l client.ObjectList) {
		items, err := meta.ExtractList(l)
		g.Expect(err).NotTo(HaveOccurred())
		for _, it := range items {
			o := it.(client.Object)
			out[kind+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	for kind, l := range map[string]client.ObjectList{
		"ConfigMap": &corev1.ConfigMapList{}, "Secret": &corev1.SecretList{}, "Service": &corev1.ServiceList{},
		"PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{}, "StatefulSet": &appsv1.StatefulSetList{},
	} {
		g.Expect(env.Client.List(ctx, l, client.InNamespace(ns), sel)).To(Succeed())
		add(kind, l)
	}
	var tis tiledv1alpha1.TiledInstanceList
	g.Expect(env.Client.List(ctx, &tis, client.InNamespace(ns))).To(Succeed())
	add("TiledInstance", &tis)
	return out
}

func changed(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	return out
}

// TestStampOutTraffic applies the 30-beamline fleet and checks the API traffic the design promises:
// writes ≈ objects created, no reads through the API server after the caches sync, no write on a
// full resync, no request at all while idle with every StatefulSet not ready, and writes only for
// the objects a profile change or an override change touches.
func TestStampOutTraffic(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, g, "stampout")
	op := startOperator(t, ns)
	profiles := fleetProfiles(ns)
	for _, p := range profiles {
		createAll(t, g, p)
	}
	names := beamlines(t)
	g.Expect(names).To(HaveLen(30))
	waitQuiet(t, op)

	// Stamp-out.
	before := op.Traffic.Snapshot()
	start := time.Now()
	createAll(t, g, fleetCluster(ns, "nsls2", names))
	waitForStampOut(t, g, op, ns, "nsls2", len(names))
	stamp := op.Traffic.Snapshot().Sub(before)
	objects := managedObjects(t, g, ns)
	created := total(objects)
	objectWrites := stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && !isStatus(k) && k.Resource != "events" })
	statusWrites := stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && isStatus(k) })
	eventWrites := stamp.Sum(func(k traffic.Key) bool { return k.IsWrite() && k.Resource == "events" })
	t.Logf("stamp-out of %d instances in %s: %d objects created %v; %d object writes, %d status writes, %d event writes; %d reads\n%s",
		len(names), time.Since(start).Round(time.Millisecond), created, objects, objectWrites, statusWrites, eventWrites, stamp.Reads(), stamp)
	g.Expect(objects["TiledInstance"]).To(Equal(30))
	g.Expect(objects["StatefulSet"]).To(Equal(90), "a Tiled, a PostgreSQL and a streaming cache StatefulSet per instance")
	g.Expect(objects["Secret"]).To(Equal(30))
	g.Expect(stamp.Reads()).To(BeZero(), "GET or LIST through the API server after the caches synced:\n%s", stamp)
	g.Expect(float64(objectWrites)).To(BeNumerically("<=", 1.05*float64(created)), "object writes per object created")
	g.Expect(statusWrites).To(BeNumerically("<=", int64(len(names)+2+len(profiles))),
		"one status write per instance, the cluster's, and each profile's (now selected by the cluster)")
	g.Expect(eventWrites).To(BeNumerically("<=", 2))

	// The children of one instance, as stored, match the golden files.
	checkGolden(t, g, ns, "nsls2-chx")

	// kubectl lists the cluster's instances by label.
	out, stderr, err := env.Kubectl(ctxT(t), "get", "ti", "-n", ns, "-l", tiledv1alpha1.LabelCluster+"=nsls2", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("tiledinstance.tiled.blueskyproject.io/nsls2-chx"))
	cluster := &tiledv1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2"}, cluster)).To(Succeed())
	g.Expect(cluster.Status.Instances).To(Equal(int32(30)))
	g.Expect(cluster.Status.InstanceSelector).To(Equal(tiledv1alpha1.LabelCluster + "=nsls2"))
	g.Expect(cluster.Status.ProfileNames).To(Equal("nsls2-defaults,nsls2-ops,nsls2-mx"))
	g.Expect(meta.IsStatusConditionTrue(cluster.Status.Conditions, controllers.ConditionProfilesResolved)).To(BeTrue())
	g.Expect(meta.IsStatusConditionTrue(cluster.Status.Conditions, controllers.ConditionReconciling)).To(BeTrue())

	// A full resync of every object: no write.
	before = op.Traffic.Snapshot()
	g.Expect(op.ResyncAll(ctxT(t))).To(Succeed())
	waitQuiet(t, op)
	resync := op.Traffic.Snapshot().Sub(before)
	t.Logf("full resync: %d writes, %d reads", resync.Writes(), resync.Reads())
	g.Expect(resync.Writes()).To(BeZero(), "writes on a full resync:\n%s", resync)
	g.Expect(resync.Reads()).To(BeZero())

	// Idle, with every StatefulSet not ready (no kubelet here): no request at all, Events included.
	before = op.Traffic.Snapshot()
	time.Sleep(idleWindow())
	idle := op.Traffic.Snapshot().Sub(before)
	t.Logf("idle for %s: %d requests", idleWindow(), idle.Total())
	g.Expect(idle.Total()).To(BeZero(), "requests while idle:\n%s", idle)

	// The databases and caches ready (the Tiled pod template's change waits for them: dependencies
	// before dependants), as they are on a node.
	for _, name := range names {
		markDependenciesReady(t, g, ns, "nsls2-"+name)
	}
	waitQuiet(t, op)

	// One profile field changes: writes only for the objects whose content changed.
	rvBefore := resourceVersions(t, g, ns)
	before = op.Traffic.Snapshot()
	ops := &tiledv1alpha1.TiledProfile{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-ops"}, ops)).To(Succeed())
	ops.Spec.Tiled.PodAnnotations["nsls2.bnl.gov/team"] = "controls"
	g.Expect(env.Client.Update(ctxT(t), ops)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var sts appsv1.StatefulSetList
		g.Expect(env.Client.List(ctxT(t), &sts, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "server"})).To(Succeed())
		for _, s := range sts.Items {
			g.Expect(s.Spec.Template.Annotations).To(HaveKeyWithValue("nsls2.bnl.gov/team", "controls"), s.Name)
		}
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	change := op.Traffic.Snapshot().Sub(before)
	touched := changed(rvBefore, resourceVersions(t, g, ns))
	t.Logf("profile change: %d writes for %d objects changed\n%s", change.Writes(), len(touched), change)
	g.Expect(change.Reads()).To(BeZero())
	for k := range change {
		if k.IsWrite() {
			g.Expect(k.Resource).To(BeElementOf("tiledinstances", "tiledinstances/status", "statefulsets", "tiledclusters/status", "tiledprofiles/status"),
				"a profile change that only touches pod annotations wrote %s", k.Resource)
		}
	}
	g.Expect(change[traffic.Key{Verb: traffic.VerbApply, Resource: "statefulsets"}]).To(Equal(int64(30)))
	g.Expect(change[traffic.Key{Verb: traffic.VerbApply, Resource: "tiledinstances"}]).To(Equal(int64(30)))
	g.Expect(change[traffic.Key{Verb: traffic.VerbApply, Resource: "tiledprofiles/status"}]).To(Equal(int64(1)), "the changed profile's observedGeneration")
	g.Expect(change.Writes()).To(BeNumerically("<=", int64(len(touched)+len(names)+2)),
		"writes beyond the objects changed (and one status per instance, and the profile's)")

	// One override on one instance changes that instance's objects only.
	rvBefore = resourceVersions(t, g, ns)
	before = op.Traffic.Snapshot()
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2"}, cluster)).To(Succeed())
	for i := range cluster.Spec.Instances {
		if cluster.Spec.Instances[i].Name == "bmm" {
			cluster.Spec.Instances[i].Overrides = &tiledv1alpha1.InstanceTemplate{Tiled: &tiledv1alpha1.TiledServerSpec{
				PodAnnotations: map[string]string{"nsls2.bnl.gov/note": "commissioning"},
			}}
		}
	}
	g.Expect(env.Client.Update(ctxT(t), cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := &appsv1.StatefulSet{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2-bmm"}, s)).To(Succeed())
		g.Expect(s.Spec.Template.Annotations).To(HaveKeyWithValue("nsls2.bnl.gov/note", "commissioning"))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	waitQuiet(t, op)
	override := op.Traffic.Snapshot().Sub(before)
	touched = changed(rvBefore, resourceVersions(t, g, ns))
	t.Logf("override change: %d writes; objects changed %v\n%s", override.Writes(), touched, override)
	g.Expect(touched).To(ConsistOf("TiledInstance/nsls2-bmm", "StatefulSet/nsls2-bmm"))
	g.Expect(override.Writes()).To(BeNumerically("<=", 4), "instance, its status, its StatefulSet, the cluster's status")

	// Provenance says where the override came from.
	bmm := getInstance(t, g, ns, "nsls2-bmm")
	g.Expect(bmm.Provenance).To(HaveKeyWithValue(`spec.tiled.podAnnotations["nsls2.bnl.gov/note"]`, "instance/bmm/overrides"))
	_ = metav1.Now
}
