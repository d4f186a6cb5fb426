package controllers

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/controllers/upgrade"
)

// sts is a StatefulSet at generation gen whose status has observed observed, with ready (and as
// many updated) pods.
func sts(gen, observed int64, ready int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{}
	s.Generation = gen
	s.Status.ObservedGeneration = observed
	s.Status.ReadyReplicas, s.Status.UpdatedReplicas = ready, ready
	return s
}

// TestInstanceStatus: the instance's status is a function of what was observed, table by table.
func TestInstanceStatus(t *testing.T) {
	image := "ghcr.io/bluesky/tiled:0.2.20"
	base := func() observedInstance {
		return observedInstance{
			Generation: 3, Namespace: "nsls2", TiledName: "fleet-csx", Image: &image, Replicas: 2,
			Tiled: sts(5, 5, 2), Postgres: sts(1, 1, 1), PostgresPod: "fleet-csx-postgres-0",
		}
	}
	crash := &podstatus.Problem{Pod: "fleet-csx-0", Reason: podstatus.ReasonCrashLoop, Message: "pod fleet-csx-0: crash", Stalled: true}
	dbCrash := &podstatus.Problem{Pod: "fleet-csx-postgres-0", Reason: podstatus.ReasonCrashLoop, Message: "pod fleet-csx-postgres-0: crash", Stalled: true}
	probe := &podstatus.Problem{Pod: "fleet-csx-1", Reason: podstatus.ReasonProbeFailing, Message: "pod fleet-csx-1: probe"}
	wasReady := []metav1.Condition{{Type: ConditionDatabaseReady, Status: metav1.ConditionTrue, Reason: ReasonReady}}

	type want struct {
		ready, reason string // Ready's status and reason
		reconciling   bool
		stalled       bool
		db, dbReason  string // "" when DatabaseReady is absent
		readyReplicas int32
		message       string // a substring of Ready's message
	}
	cases := []struct {
		name   string
		prev   []metav1.Condition
		change func(o *observedInstance)
		want   want
	}{
		{name: "everything ready", change: func(*observedInstance) {},
			want: want{ready: "True", reason: ReasonReady, db: "True", dbReason: ReasonReady, readyReplicas: 2, message: "Tiled serves at http://fleet-csx.nsls2.svc:8000"}},
		{name: "external database: no DatabaseReady", prev: wasReady, change: func(o *observedInstance) { o.External, o.Postgres = true, nil },
			want: want{ready: "True", reason: ReasonReady, readyReplicas: 2}},
		{name: "Tiled StatefulSet not in the cache yet", change: func(o *observedInstance) { o.Tiled = nil },
			want: want{ready: "False", reason: ReasonWaitingForPods, reconciling: true, db: "True", dbReason: ReasonReady, message: "0 of 2 Tiled pods ready"}},
		{name: "an apply the cache has not caught up with is not ready", change: func(o *observedInstance) { o.TiledApplied = 6 },
			want: want{ready: "False", reason: ReasonWaitingForPods, reconciling: true, db: "True", dbReason: ReasonReady, readyReplicas: 2, message: "2 of 2 Tiled pods ready"}},
		{name: "one replica short, a probe failing", change: func(o *observedInstance) { o.Tiled = sts(5, 5, 1); o.ServerProblem = probe },
			want: want{ready: "False", reason: podstatus.ReasonProbeFailing, reconciling: true, db: "True", dbReason: ReasonReady, readyReplicas: 1, message: "1 of 2 Tiled pods ready: pod fleet-csx-1: probe"}},
		{name: "a crash-looping Tiled pod stalls", change: func(o *observedInstance) { o.Tiled = sts(5, 5, 0); o.ServerProblem = crash },
			want: want{ready: "False", reason: podstatus.ReasonCrashLoop, stalled: true, db: "True", dbReason: ReasonReady, message: "crash"}},
		{name: "a stalled problem of a ready server is not reported", change: func(o *observedInstance) { o.ServerProblem = crash },
			want: want{ready: "True", reason: ReasonReady, db: "True", dbReason: ReasonReady, readyReplicas: 2}},
		{name: "database starting", change: func(o *observedInstance) { o.Postgres = nil },
			want: want{ready: "False", reason: ReasonWaitingForDatabase, reconciling: true, db: "False", dbReason: ReasonWaitingForDatabase, readyReplicas: 2, message: "fleet-csx-postgres-0"}},
		{name: "database down after it was ready: an outage", prev: wasReady, change: func(o *observedInstance) { o.Postgres = sts(1, 1, 0) },
			want: want{ready: "False", reason: ReasonDatabaseUnavailable, reconciling: true, db: "False", dbReason: ReasonDatabaseUnavailable, readyReplicas: 2}},
		{name: "database crash-looping stalls before the server's problem", change: func(o *observedInstance) {
			o.Postgres, o.DatabaseProblem, o.Tiled, o.ServerProblem = sts(1, 1, 0), dbCrash, sts(5, 5, 0), crash
		}, want: want{ready: "False", reason: podstatus.ReasonCrashLoop, stalled: true, db: "False", dbReason: podstatus.ReasonCrashLoop, message: "fleet-csx-postgres-0"}},
		{name: "a database problem of an external database is ignored", change: func(o *observedInstance) { o.External, o.DatabaseProblem = true, dbCrash },
			want: want{ready: "True", reason: ReasonReady, readyReplicas: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := base()
			tc.change(&o)
			prev := &tiledv1alpha1.TiledInstanceStatus{Conditions: append([]metav1.Condition{
				{Type: ConditionReconciling, Status: metav1.ConditionTrue, Reason: ReasonWaitingForPods},
				{Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: ReasonRenderFailed},
			}, tc.prev...)}
			before := prev.DeepCopy()
			st := instanceStatus(prev, o)
			g.Expect(prev).To(Equal(before), "the previous status is not modified")
			g.Expect(st.ObservedGeneration).To(Equal(int64(3)))
			g.Expect(st.URL).To(Equal("http://fleet-csx.nsls2.svc:8000"))
			g.Expect(st.Image).To(Equal(image))
			g.Expect(st.ReadyReplicas).To(Equal(tc.want.readyReplicas))
			ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(string(ready.Status)).To(Equal(tc.want.ready))
			g.Expect(ready.Reason).To(Equal(tc.want.reason))
			g.Expect(ready.Message).To(ContainSubstring(tc.want.message))
			g.Expect(ready.ObservedGeneration).To(Equal(int64(3)))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, ConditionReconciling)).To(Equal(tc.want.reconciling))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, ConditionStalled)).To(Equal(tc.want.stalled))
			g.Expect(tc.want.reconciling && tc.want.stalled).To(BeFalse(), "kstatus: never both")
			db := meta.FindStatusCondition(st.Conditions, ConditionDatabaseReady)
			if tc.want.db == "" {
				g.Expect(db).To(BeNil())
				g.Expect(st.Database).To(Equal(&tiledv1alpha1.DatabaseStatus{Mode: "External", Ready: true}))
			} else {
				g.Expect(db).NotTo(BeNil())
				g.Expect(string(db.Status)).To(Equal(tc.want.db))
				g.Expect(db.Reason).To(Equal(tc.want.dbReason))
				g.Expect(st.Database).To(Equal(&tiledv1alpha1.DatabaseStatus{Mode: "Managed", Ready: tc.want.db == "True"}))
			}
			g.Expect(meta.FindStatusCondition(st.Conditions, ConditionIngressEnabled)).To(BeNil())
			g.Expect(meta.FindStatusCondition(st.Conditions, ConditionExternalEdits)).To(BeNil())
		})
	}
}

// TestInstanceStatusSideConditions: IngressEnabled and ExternalEdits come and go with what was
// observed, and the image stays when the spec has no tiled section.
func TestInstanceStatusSideConditions(t *testing.T) {
	g := NewWithT(t)
	o := observedInstance{Generation: 1, Namespace: "ns", TiledName: "x", Replicas: 1, Tiled: sts(1, 1, 1), External: true,
		IngressHostWithoutEnabled: true, ExternalEdits: "StatefulSet x: spec.replicas managed by kubectl"}
	st := instanceStatus(&tiledv1alpha1.TiledInstanceStatus{Image: "kept"}, o)
	g.Expect(st.Image).To(Equal("kept"))
	ing := meta.FindStatusCondition(st.Conditions, ConditionIngressEnabled)
	g.Expect(ing).NotTo(BeNil())
	g.Expect(ing.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ing.Reason).To(Equal(ReasonHostWithoutEnabled))
	edits := meta.FindStatusCondition(st.Conditions, ConditionExternalEdits)
	g.Expect(edits).NotTo(BeNil())
	g.Expect(edits.Reason).To(Equal(ReasonFieldsManaged))
	g.Expect(edits.Message).To(ContainSubstring("spec.replicas"))

	o.IngressHostWithoutEnabled, o.ExternalEdits = false, ""
	st = instanceStatus(st, o)
	g.Expect(meta.FindStatusCondition(st.Conditions, ConditionIngressEnabled)).To(BeNil())
	g.Expect(meta.FindStatusCondition(st.Conditions, ConditionExternalEdits)).To(BeNil())
	g.Expect(meta.IsStatusConditionTrue(st.Conditions, ConditionReady)).To(BeTrue())
}

// TestInstanceStatusUpgrade: the upgrade procedure's stall wins over everything, its progress keeps
// the instance Reconciling even with every pod ready, and the revisions report sets status.version
// and the database's revisions (the previous ones kept when there is none).
func TestInstanceStatusUpgrade(t *testing.T) {
	image := "ghcr.io/bluesky/tiled:0.2.14"
	base := func() observedInstance {
		return observedInstance{
			Generation: 3, Namespace: "nsls2", TiledName: "fleet-csx", Image: &image, Replicas: 2,
			Tiled: sts(5, 5, 2), Postgres: sts(1, 1, 1), PostgresPod: "fleet-csx-postgres-0",
		}
	}
	crash := &podstatus.Problem{Pod: "fleet-csx-0", Reason: podstatus.ReasonCrashLoop, Message: "pod fleet-csx-0: crash", Stalled: true}
	dbCrash := &podstatus.Problem{Pod: "fleet-csx-postgres-0", Reason: podstatus.ReasonCrashLoop, Message: "pod fleet-csx-postgres-0: crash", Stalled: true}
	stall := &upgrade.Condition{Reason: upgrade.ReasonMigrationFailed, Message: "the migration of the catalog failed; backup restored"}
	progress := &upgrade.Condition{Reason: upgrade.ReasonUpgrading, Message: "upgrading Tiled 0.2.14 -> 0.2.20: migrating"}
	rev := func(s string) *string { return &s }
	report := &upgrade.Report{Version: "0.2.20",
		Catalog: &upgrade.Revision{Current: rev("dfbb7478c6bd"), Required: "dfbb7478c6bd", Known: true},
		Auth:    &upgrade.Revision{Current: rev("a806cc635ab2"), Required: "a806cc635ab2", Known: true}}
	prevDB := &tiledv1alpha1.DatabaseStatus{Mode: "Managed", Ready: true, CatalogRevision: "6825c778aa3c", AuthRevision: "c7777c8e7c8b"}

	type want struct {
		ready, reason        string // Ready's status and reason
		reconciling, stalled bool
		message              string // Ready's message, when the upgrade's
		version              string
		catalogRev, authRev  string
		dbReady              bool
	}
	cases := []struct {
		name   string
		prev   *tiledv1alpha1.TiledInstanceStatus
		change func(o *observedInstance)
		want   want
	}{
		{name: "the upgrade's stall with everything ready", change: func(o *observedInstance) { o.UpgradeStall = stall },
			want: want{ready: "False", reason: upgrade.ReasonMigrationFailed, stalled: true, message: stall.Message, dbReady: true}},
		{name: "the upgrade's stall wins over a crash-looping pod and its progress", change: func(o *observedInstance) {
			o.UpgradeStall, o.UpgradeProgress, o.Tiled, o.ServerProblem = stall, progress, sts(5, 5, 0), crash
		}, want: want{ready: "False", reason: upgrade.ReasonMigrationFailed, stalled: true, message: stall.Message, dbReady: true}},
		{name: "the upgrade's stall wins over a crash-looping database", change: func(o *observedInstance) {
			o.UpgradeStall, o.Postgres, o.DatabaseProblem = stall, sts(1, 1, 0), dbCrash
		}, want: want{ready: "False", reason: upgrade.ReasonMigrationFailed, stalled: true, message: stall.Message}},
		{name: "the upgrade in progress: Reconciling, not Ready, though the server is ready", change: func(o *observedInstance) { o.UpgradeProgress = progress },
			want: want{ready: "False", reason: upgrade.ReasonUpgrading, reconciling: true, message: progress.Message, dbReady: true}},
		{name: "the upgrade in progress, Tiled stopped", change: func(o *observedInstance) { o.UpgradeProgress, o.Replicas, o.Tiled = progress, 0, sts(6, 6, 0) },
			want: want{ready: "False", reason: upgrade.ReasonUpgrading, reconciling: true, message: progress.Message, dbReady: true}},
		{name: "the upgrade in progress, the database starting", change: func(o *observedInstance) { o.UpgradeProgress, o.Postgres = progress, nil },
			want: want{ready: "False", reason: upgrade.ReasonUpgrading, reconciling: true, message: progress.Message}},
		{name: "a pod's stall wins over the upgrade's progress", change: func(o *observedInstance) {
			o.UpgradeProgress, o.Tiled, o.ServerProblem = progress, sts(5, 5, 0), crash
		}, want: want{ready: "False", reason: podstatus.ReasonCrashLoop, stalled: true, dbReady: true}},
		{name: "a report sets the version and the revisions", change: func(o *observedInstance) { o.Revisions = report },
			want: want{ready: "True", reason: ReasonReady, version: "0.2.20", catalogRev: "dfbb7478c6bd", authRev: "a806cc635ab2", dbReady: true}},
		{name: "a report replaces the previous revisions",
			prev:   &tiledv1alpha1.TiledInstanceStatus{Version: "0.2.14", Database: prevDB},
			change: func(o *observedInstance) { o.Revisions = report },
			want:   want{ready: "True", reason: ReasonReady, version: "0.2.20", catalogRev: "dfbb7478c6bd", authRev: "a806cc635ab2", dbReady: true}},
		{name: "a report without auth clears the auth revision",
			prev: &tiledv1alpha1.TiledInstanceStatus{Version: "0.2.14", Database: prevDB},
			change: func(o *observedInstance) {
				o.Revisions = &upgrade.Report{Version: "0.2.20", Catalog: &upgrade.Revision{Current: rev("dfbb7478c6bd"), Required: "dfbb7478c6bd", Known: true}}
			},
			want: want{ready: "True", reason: ReasonReady, version: "0.2.20", catalogRev: "dfbb7478c6bd", dbReady: true}},
		{name: "no report: the previous version and revisions are kept",
			prev:   &tiledv1alpha1.TiledInstanceStatus{Version: "0.2.14", Database: prevDB},
			change: func(*observedInstance) {},
			want:   want{ready: "True", reason: ReasonReady, version: "0.2.14", catalogRev: "6825c778aa3c", authRev: "c7777c8e7c8b", dbReady: true}},
		{name: "no report, the database down: the revisions are kept",
			prev:   &tiledv1alpha1.TiledInstanceStatus{Version: "0.2.14", Database: prevDB},
			change: func(o *observedInstance) { o.Postgres = sts(1, 1, 0) },
			want:   want{ready: "False", reason: ReasonWaitingForDatabase, reconciling: true, version: "0.2.14", catalogRev: "6825c778aa3c", authRev: "c7777c8e7c8b"}},
		{name: "no report, no previous: none",
			change: func(*observedInstance) {},
			want:   want{ready: "True", reason: ReasonReady, dbReady: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := base()
			tc.change(&o)
			prev := tc.prev
			if prev == nil {
				prev = &tiledv1alpha1.TiledInstanceStatus{}
			}
			before := prev.DeepCopy()
			st := instanceStatus(prev, o)
			g.Expect(prev).To(Equal(before), "the previous status is not modified")
			ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(string(ready.Status)).To(Equal(tc.want.ready))
			g.Expect(ready.Reason).To(Equal(tc.want.reason))
			if tc.want.message != "" {
				g.Expect(ready.Message).To(Equal(tc.want.message))
			}
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, ConditionReconciling)).To(Equal(tc.want.reconciling))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, ConditionStalled)).To(Equal(tc.want.stalled))
			if tc.want.stalled {
				g.Expect(meta.FindStatusCondition(st.Conditions, ConditionStalled).Reason).To(Equal(tc.want.reason))
			}
			if tc.want.reconciling {
				g.Expect(meta.FindStatusCondition(st.Conditions, ConditionReconciling).Reason).To(Equal(tc.want.reason))
			}
			g.Expect(st.Version).To(Equal(tc.want.version))
			g.Expect(st.Database).To(Equal(&tiledv1alpha1.DatabaseStatus{Mode: "Managed", Ready: tc.want.dbReady,
				CatalogRevision: tc.want.catalogRev, AuthRevision: tc.want.authRev}))
			g.Expect(st.Image).To(Equal(image))
		})
	}
}

// An Event's note is at most 1 kB (events.k8s.io refuses a longer one, and the Event is lost):
// eventNote cuts a longer message on a rune boundary.
func TestEventNoteFitsTheAPI(t *testing.T) {
	g := NewWithT(t)
	g.Expect(eventNote("short")).To(Equal("short"))
	long := eventNote(strings.Repeat("─", 1000))
	g.Expect(len(long)).To(BeNumerically("<=", maxEventNote))
	g.Expect(long).To(HaveSuffix("..."))
	g.Expect(utf8.ValidString(long)).To(BeTrue())
}

// TestStalledKeepsItsTransitionTime: a stall computed again (the next reconcile, or a restarted
// operator's first) keeps Stalled's lastTransitionTime, so that the status is not written again;
// a stuck pod that a hold keeps is named in the Stalled message.
func TestStalledKeepsItsTransitionTime(t *testing.T) {
	g := NewWithT(t)
	crash := &podstatus.Problem{Pod: "fleet-csx-0", Reason: podstatus.ReasonCrashLoop, Message: "pod fleet-csx-0: crash", Stalled: true}
	o := observedInstance{Generation: 3, Namespace: "nsls2", TiledName: "fleet-csx", Replicas: 1,
		Tiled: sts(5, 5, 0), External: true, ServerProblem: crash}
	first := instanceStatus(&tiledv1alpha1.TiledInstanceStatus{}, o)
	c := meta.FindStatusCondition(first.Conditions, ConditionStalled)
	g.Expect(c).NotTo(BeNil())
	long := metav1.NewTime(c.LastTransitionTime.Add(-time.Hour))
	c.LastTransitionTime = long
	again := instanceStatus(first, o)
	g.Expect(meta.FindStatusCondition(again.Conditions, ConditionStalled).LastTransitionTime).To(Equal(long))
	g.Expect(again).To(Equal(first), "nothing to write")
	g.Expect(equality.Semantic.DeepEqual(first, again)).To(BeTrue())

	o.StuckHeld = "pod fleet-csx-0 is stuck on revision fleet-csx-1 of StatefulSet fleet-csx and is not replaced while TiledCluster fleet spec.instances[csx].hold is set"
	held := instanceStatus(first, o)
	g.Expect(meta.FindStatusCondition(held.Conditions, ConditionStalled).Message).To(Equal("pod fleet-csx-0: crash; " + o.StuckHeld))
}
