package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// StatusAPIVersion and StatusKind head the document `kubectl tiled status -o json|yaml` prints.
// Fields are only ever added to it under this version.
const (
	StatusAPIVersion = "kubectl-tiled/v1alpha1"
	StatusKind       = "TiledStatus"
)

// Scopes of a status document.
const (
	ScopeNamespace = "Namespace"
	ScopeCluster   = "Cluster"
	ScopeInstance  = "Instance"
)

// StatusDocument is what `kubectl tiled status` prints with -o json or -o yaml: the same facts as
// the text, with times as RFC 3339 timestamps instead of ages.
type StatusDocument struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Scope is Namespace (no argument), Cluster or Instance.
	Scope     string `json:"scope"`
	Namespace string `json:"namespace"`
	// Cluster is the cluster shown (scope Cluster).
	Cluster *ClusterSummary `json:"cluster,omitempty"`
	// Clusters are the namespace's clusters (scope Namespace).
	Clusters []ClusterSummary `json:"clusters,omitempty"`
	// Instance is the instance shown (scope Instance).
	Instance *InstanceSummary `json:"instance,omitempty"`
	// Instances are the cluster's instances (scope Cluster) or the namespace's standalone
	// instances (scope Namespace).
	Instances []InstanceSummary `json:"instances,omitempty"`
	// Pods are the instance's pods (scope Instance).
	Pods []PodSummary `json:"pods,omitempty"`
	// Events are the most recent Warning events of the objects shown, newest first.
	Events []EventSummary `json:"events,omitempty"`
	// Unreadable says what could not be read with the user's rights (pods, events); the rest is
	// shown.
	Unreadable []string `json:"unreadable,omitempty"`
}

// ConditionSummary is a condition of a cluster or an instance.
type ConditionSummary struct {
	Type               string       `json:"type"`
	Status             string       `json:"status"`
	Reason             string       `json:"reason,omitempty"`
	Message            string       `json:"message,omitempty"`
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// ClusterSummary is the state of a TiledCluster.
type ClusterSummary struct {
	Name string `json:"name"`
	// Ready is the status of the Ready condition (True, False, Unknown; "" before the operator
	// reported), ReadyReason its reason.
	Ready       string `json:"ready"`
	ReadyReason string `json:"readyReason,omitempty"`
	// Stalled and Reconciling are true when those conditions are True.
	Stalled     bool   `json:"stalled"`
	Reconciling bool   `json:"reconciling"`
	Paused      bool   `json:"paused"`
	Profiles    string `json:"profiles,omitempty"`
	// Instances, ReadyInstances, UpdatedInstances, HeldInstances, PendingInstances: from the
	// cluster's status.
	Instances        int32 `json:"instances"`
	ReadyInstances   int32 `json:"readyInstances"`
	UpdatedInstances int32 `json:"updatedInstances"`
	HeldInstances    int32 `json:"heldInstances"`
	PendingInstances int32 `json:"pendingInstances"`
	// MaxUnavailable is spec.rollout.maxUnavailable ("1" when unset).
	MaxUnavailable string `json:"maxUnavailable"`
	// Held are the instances whose change is held back.
	Held []v1alpha1.HeldInstance `json:"held,omitempty"`
	// Generation and ObservedGeneration: the status describes the spec when they are equal.
	Generation         int64              `json:"generation"`
	ObservedGeneration int64              `json:"observedGeneration"`
	Conditions         []ConditionSummary `json:"conditions,omitempty"`
}

// InstanceSummary is the state of a TiledInstance.
type InstanceSummary struct {
	Name string `json:"name"`
	// Cluster is the TiledCluster the instance belongs to ("" for a standalone instance).
	Cluster string `json:"cluster,omitempty"`
	// Ready and ReadyReason: as for a cluster.
	Ready       string `json:"ready"`
	ReadyReason string `json:"readyReason,omitempty"`
	Stalled     bool   `json:"stalled"`
	// ReadyReplicas of Replicas Tiled pods are ready (Replicas 0: autoscaled).
	ReadyReplicas int32  `json:"readyReplicas"`
	Replicas      int32  `json:"replicas"`
	Image         string `json:"image,omitempty"`
	Version       string `json:"version,omitempty"`
	URL           string `json:"url,omitempty"`
	// Held is true when the cluster holds back a change of this instance (spec.instances[].hold).
	Held           bool                      `json:"held"`
	Database       *DatabaseSummary          `json:"database,omitempty"`
	LastBackup     *v1alpha1.BackupRecord    `json:"lastBackup,omitempty"`
	LastSuccessful *v1alpha1.BackupRecord    `json:"lastSuccessfulBackup,omitempty"`
	LastMigration  *v1alpha1.MigrationRecord `json:"lastMigration,omitempty"`
	Upgrade        *v1alpha1.UpgradeStatus   `json:"upgrade,omitempty"`
	PendingRollout *v1alpha1.PendingRollout  `json:"pendingRollout,omitempty"`
	// Maintenance is the instance's status.maintenance: whether its maintenance calendar
	// (spec.maintenance) lets disruptive changes start now, why, and when that changes.
	Maintenance *v1alpha1.MaintenanceStatus `json:"maintenance,omitempty"`
	// LastApproval and RefusedApproval are the instance's status.lastApproval and
	// status.refusedApproval (spec.maintenance.approval Manual).
	LastApproval    *v1alpha1.ApprovalRecord `json:"lastApproval,omitempty"`
	RefusedApproval *v1alpha1.ApprovalRecord `json:"refusedApproval,omitempty"`
	// Notifications is the instance's status.notifications (spec.notifications): what was
	// delivered, and the last delivery error.
	Notifications *v1alpha1.NotificationStatus `json:"notifications,omitempty"`
	Conditions    []ConditionSummary           `json:"conditions,omitempty"`
	Generation    int64                        `json:"generation"`
	Observed      int64                        `json:"observedGeneration"`
	Restore       *v1alpha1.RestoreRecord      `json:"restore,omitempty"`
	// InPlaceRestore is the last restore in place (kubectl tiled restore): who, which backup, its
	// phase or outcome.
	InPlaceRestore *v1alpha1.InPlaceRestoreStatus `json:"inPlaceRestore,omitempty"`
	// CatalogLost is the instance's status.catalogLost: its catalog is lost, Tiled stopped until
	// the newest whole backup is restored or a person accepts the loss (docs/backups.md).
	CatalogLost *v1alpha1.CatalogLost `json:"catalogLost,omitempty"`
	// AcceptCatalogLoss is the command that accepts the loss and starts Tiled with an empty
	// catalog, while the loss waits for a person and can be accepted (the new claim exists).
	AcceptCatalogLoss string `json:"acceptCatalogLoss,omitempty"`
	// backupTarget: the instance has one (for the text only).
	backupTarget bool
}

// DatabaseSummary is an instance's status.database, with ready always present.
type DatabaseSummary struct {
	// Mode is Managed or External.
	Mode            string `json:"mode"`
	Ready           bool   `json:"ready"`
	CatalogRevision string `json:"catalogRevision,omitempty"`
	AuthRevision    string `json:"authRevision,omitempty"`
}

// PodSummary is a pod of an instance.
type PodSummary struct {
	Name      string      `json:"name"`
	Component string      `json:"component,omitempty"`
	Ready     string      `json:"ready"`
	Status    string      `json:"status"`
	Restarts  int32       `json:"restarts"`
	Created   metav1.Time `json:"creationTimestamp"`
}

// EventSummary is a Warning event.
type EventSummary struct {
	// Object is kind/name of the object the event is about, e.g. tiledinstance/nsls2-chx.
	Object   string      `json:"object"`
	Reason   string      `json:"reason"`
	Message  string      `json:"message"`
	Count    int32       `json:"count"`
	LastSeen metav1.Time `json:"lastSeen"`
}

type statusOptions struct {
	*options
	output string
	color  string
	events int
}

func newStatusCommand(opts *options) *cobra.Command {
	o := &statusOptions{options: opts, color: "auto", events: 10}
	cmd := &cobra.Command{
		Use:   "status [CLUSTER | INSTANCE | tiledcluster/NAME | tiledinstance/NAME]",
		Short: "Show the state of a cluster, an instance, or every cluster of the namespace",
		Long: `Show on one screen how a TiledCluster or a TiledInstance of the live cluster is doing.

For a TiledCluster: its Ready, Stalled and Reconciling conditions with their reasons, the rollout
(instances updated of total, pending, held, maxUnavailable, paused) and the instances held back,
then a table of its instances (ready replicas, Tiled version, database mode, state and revision,
last whole backup and its age, upgrade phase, pending rollout, Ready reason), then the most recent
Warning events of the cluster and its instances, newest first.

For a TiledInstance: its image and version, database and revisions, last backup, last migration,
the upgrade in progress, the pending rollout, every condition with its reason and message, its pods
(selected by app.kubernetes.io/name=tiled and app.kubernetes.io/instance=<instance>) and the most
recent Warning events of the instance and its pods.

Without an argument: one line for each TiledCluster of the namespace, then one for each standalone
TiledInstance.

NAME is looked up as a TiledCluster first, then as a TiledInstance (by name, then by short name,
e.g. chx). To say which, write tiledcluster/NAME (or tc/NAME, cluster/NAME) or tiledinstance/NAME
(or ti/NAME, instance/NAME).

Everything is read with your kubeconfig's rights: get and list on tiledclusters and tiledinstances
(the operator's viewer role), and list on pods and events. Pods or events you may not list are left
out with a note; the rest is shown.

-o json or -o yaml prints a document (apiVersion kubectl-tiled/v1alpha1, kind TiledStatus) for
scripts, with timestamps instead of ages. The text is coloured when standard output is a terminal
(--color=auto), never with --color=never or when NO_COLOR is set.`,
		Example: `  # Every cluster of the namespace
  kubectl tiled status -n nsls2

  # One cluster, with its instances
  kubectl tiled status nsls2 -n nsls2

  # One instance (its name, its short name, or tiledinstance/NAME when a cluster has the same name)
  kubectl tiled status nsls2-chx -n nsls2
  kubectl tiled status tiledinstance/chx -n nsls2

  # The instances that are not ready, for a script
  kubectl tiled status nsls2 -n nsls2 -o json | jq -r '.instances[] | select(.ready != "True") | .name'`,
		ValidArgsFunction: completeStatus(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf(cmd, "expected at most one CLUSTER or INSTANCE, got %d arguments", len(args))
			}
			if !slices.Contains([]string{"", "json", "yaml"}, o.output) {
				return usageErrorf(cmd, "unable to match a printer suitable for the output format %q, allowed formats are: json,yaml", o.output)
			}
			if !slices.Contains([]string{"auto", "always", "never"}, o.color) {
				return usageErrorf(cmd, "--color must be auto, always or never, got %q", o.color)
			}
			if o.events < 0 {
				return usageErrorf(cmd, "--events must be 0 or more, got %d", o.events)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			return o.run(ctx, arg)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (default: text).")
	cmd.Flags().StringVar(&o.color, "color", o.color, "Colour the text: auto (when standard output is a terminal), always or never. NO_COLOR turns it off.")
	cmd.Flags().IntVar(&o.events, "events", o.events, "How many recent Warning events to show (0: none).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("color", cobra.FixedCompletions([]string{"auto", "always", "never"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *statusOptions) run(ctx context.Context, arg string) error {
	ns, c, err := liveClient(o.config)
	if err != nil {
		return err
	}
	r := &statusReader{c: c, ns: ns, events: o.events}
	doc, err := r.read(ctx, arg)
	if err != nil {
		return err
	}
	if printed, err := printDocument(o.streams.Out, o.output, doc); printed {
		return err
	}
	p := &statusPrinter{w: o.streams.Out, now: clock(), color: useColor(o.color, o.streams.Out)}
	p.print(doc)
	return nil
}

// useColor says whether to colour the text: --color=always, or auto on a terminal; never with
// NO_COLOR set (https://no-color.org).
func useColor(mode string, out io.Writer) bool {
	if v, ok := os.LookupEnv("NO_COLOR"); ok && v != "" {
		return false
	}
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// statusReader reads what status shows from the cluster.
type statusReader struct {
	c      client.Client
	ns     string
	events int
	doc    *StatusDocument
}

// statusTarget splits an argument into a kind (cluster, instance, or "" for either) and a name.
func statusTarget(arg string) (kind, name string, err error) {
	prefix, rest, found := strings.Cut(arg, "/")
	if !found {
		return "", arg, nil
	}
	switch strings.ToLower(prefix) {
	case "tiledcluster", "tiledclusters", "tc", "cluster", "tiledcluster.tiled.blueskyproject.io", "tiledclusters.tiled.blueskyproject.io":
		kind = ScopeCluster
	case "tiledinstance", "tiledinstances", "ti", "instance", "tiledinstance.tiled.blueskyproject.io", "tiledinstances.tiled.blueskyproject.io":
		kind = ScopeInstance
	default:
		return "", "", fmt.Errorf("%q: a TiledCluster or TiledInstance is named NAME, tiledcluster/NAME or tiledinstance/NAME", arg)
	}
	if rest == "" {
		return "", "", fmt.Errorf("%q names no object", arg)
	}
	return kind, rest, nil
}

func (r *statusReader) read(ctx context.Context, arg string) (*StatusDocument, error) {
	r.doc = &StatusDocument{APIVersion: StatusAPIVersion, Kind: StatusKind, Namespace: r.ns}
	if arg == "" {
		r.doc.Scope = ScopeNamespace
		return r.doc, r.readNamespace(ctx)
	}
	kind, name, err := statusTarget(arg)
	if err != nil {
		return nil, err
	}
	if kind != ScopeInstance {
		tc := &v1alpha1.TiledCluster{}
		err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, tc)
		switch {
		case err == nil:
			r.doc.Scope = ScopeCluster
			return r.doc, r.readCluster(ctx, tc)
		case kind == "" && apierrors.IsForbidden(err):
			// A user who may not read clusters may still read the instance of that name.
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading TiledCluster %s/%s: %w", r.ns, name, err)
		case kind == ScopeCluster:
			return nil, fmt.Errorf("TiledCluster %q not found in namespace %q", name, r.ns)
		}
	}
	ti, err := liveInstance(ctx, r.c, r.ns, name)
	if err != nil {
		// liveInstance's not-found error (the one that begins so); others (ambiguous, forbidden)
		// are told as they are.
		if kind == "" && strings.HasPrefix(err.Error(), "TiledInstance ") {
			return nil, fmt.Errorf("no TiledCluster or TiledInstance named %q in namespace %q", name, r.ns)
		}
		return nil, err
	}
	r.doc.Scope = ScopeInstance
	return r.doc, r.readInstance(ctx, ti)
}

// note records what could not be read.
func (r *statusReader) note(what string, err error) error {
	if apierrors.IsForbidden(err) {
		r.doc.Unreadable = append(r.doc.Unreadable, fmt.Sprintf("%s in namespace %s could not be read: forbidden (you may not list them)", what, r.ns))
		return nil
	}
	return fmt.Errorf("listing %s in namespace %s: %w", what, r.ns, err)
}

func (r *statusReader) readNamespace(ctx context.Context) error {
	var clusters v1alpha1.TiledClusterList
	if err := r.c.List(ctx, &clusters, client.InNamespace(r.ns)); err != nil {
		return fmt.Errorf("listing TiledClusters in namespace %s: %w", r.ns, err)
	}
	var instances v1alpha1.TiledInstanceList
	if err := r.c.List(ctx, &instances, client.InNamespace(r.ns)); err != nil {
		return fmt.Errorf("listing TiledInstances in namespace %s: %w", r.ns, err)
	}
	slices.SortFunc(clusters.Items, func(a, b v1alpha1.TiledCluster) int { return strings.Compare(a.Name, b.Name) })
	member := map[string]bool{}
	for i := range clusters.Items {
		tc := &clusters.Items[i]
		r.doc.Clusters = append(r.doc.Clusters, clusterSummary(tc))
		member[names.LabelValue(tc.Name)] = true
	}
	slices.SortFunc(instances.Items, func(a, b v1alpha1.TiledInstance) int { return strings.Compare(a.Name, b.Name) })
	for i := range instances.Items {
		ti := &instances.Items[i]
		if clusterOf(ti) != "" || member[ti.Labels[v1alpha1.LabelCluster]] {
			continue
		}
		r.doc.Instances = append(r.doc.Instances, instanceSummary(ti, nil))
	}
	return nil
}

// clusterOf is the TiledCluster controlling ti, "" for none.
func clusterOf(ti *v1alpha1.TiledInstance) string {
	if ref := metav1.GetControllerOf(ti); ref != nil && ref.Kind == "TiledCluster" {
		return ref.Name
	}
	return ""
}

func (r *statusReader) readCluster(ctx context.Context, tc *v1alpha1.TiledCluster) error {
	cs := clusterSummary(tc)
	r.doc.Cluster = &cs
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelCluster: names.LabelValue(tc.Name)})
	if tc.Status.InstanceSelector != "" {
		if s, err := labels.Parse(tc.Status.InstanceSelector); err == nil {
			sel = s
		}
	}
	var list v1alpha1.TiledInstanceList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("listing the TiledInstances of TiledCluster %s/%s: %w", r.ns, tc.Name, err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.TiledInstance) int { return strings.Compare(a.Name, b.Name) })
	objects := map[string]bool{"TiledCluster/" + tc.Name: true}
	for i := range list.Items {
		ti := &list.Items[i]
		if owner := clusterOf(ti); owner != "" && owner != tc.Name {
			continue
		}
		r.doc.Instances = append(r.doc.Instances, instanceSummary(ti, tc))
		objects["TiledInstance/"+ti.Name] = true
	}
	return r.readEvents(ctx, objects)
}

func (r *statusReader) readInstance(ctx context.Context, ti *v1alpha1.TiledInstance) error {
	var tc *v1alpha1.TiledCluster
	if name := clusterOf(ti); name != "" {
		c := &v1alpha1.TiledCluster{}
		// Only to say whether the cluster holds the instance back: without it, nothing is said.
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, c); err == nil {
			tc = c
		}
	}
	is := instanceSummary(ti, tc)
	r.doc.Instance = &is
	objects := map[string]bool{"TiledInstance/" + ti.Name: true}
	var pods corev1.PodList
	err := r.c.List(ctx, &pods, client.InNamespace(r.ns), client.MatchingLabels{
		v1alpha1.LabelAppName: render.AppName, v1alpha1.LabelAppInstance: ti.Name})
	if err != nil {
		if err := r.note("pods", err); err != nil {
			return err
		}
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods.Items {
		p := &pods.Items[i]
		r.doc.Pods = append(r.doc.Pods, podSummary(p))
		objects["Pod/"+p.Name] = true
	}
	return r.readEvents(ctx, objects)
}

// readEvents keeps the newest Warning events of the objects (kind/name).
func (r *statusReader) readEvents(ctx context.Context, objects map[string]bool) error {
	if r.events == 0 {
		return nil
	}
	var list corev1.EventList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns), client.MatchingFields{"type": corev1.EventTypeWarning}); err != nil {
		return r.note("events", err)
	}
	var out []EventSummary
	for i := range list.Items {
		e := &list.Items[i]
		if e.Type != corev1.EventTypeWarning || !objects[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] {
			continue
		}
		out = append(out, EventSummary{
			Object:   strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name,
			Reason:   e.Reason,
			Message:  strings.TrimSpace(e.Message),
			Count:    eventCount(e),
			LastSeen: metav1.NewTime(eventTime(e)),
		})
	}
	slices.SortStableFunc(out, func(a, b EventSummary) int {
		return cmp.Or(b.LastSeen.Compare(a.LastSeen.Time), strings.Compare(a.Object, b.Object), strings.Compare(a.Reason, b.Reason))
	})
	if len(out) > r.events {
		out = out[:r.events]
	}
	r.doc.Events = out
	return nil
}

// eventTime is when an event was last seen, whichever API wrote it (events.k8s.io/v1's series and
// eventTime, core/v1's lastTimestamp).
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func eventCount(e *corev1.Event) int32 {
	if e.Series != nil && e.Series.Count > 0 {
		return e.Series.Count
	}
	return max(e.Count, 1)
}

func conditionSummaries(conds []metav1.Condition) []ConditionSummary {
	var out []ConditionSummary
	for _, c := range conds {
		cs := ConditionSummary{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		if !c.LastTransitionTime.IsZero() {
			cs.LastTransitionTime = c.LastTransitionTime.DeepCopy()
		}
		out = append(out, cs)
	}
	return out
}

func clusterSummary(tc *v1alpha1.TiledCluster) ClusterSummary {
	st := &tc.Status
	cs := ClusterSummary{
		Name: tc.Name, Paused: tc.Spec.Paused, Profiles: st.ProfileNames,
		Instances: st.Instances, ReadyInstances: st.ReadyInstances, UpdatedInstances: st.UpdatedInstances,
		HeldInstances: st.HeldInstances, PendingInstances: st.PendingInstances,
		MaxUnavailable: "1", Held: st.Held,
		Generation: tc.Generation, ObservedGeneration: st.ObservedGeneration,
		Conditions: conditionSummaries(st.Conditions),
	}
	if cs.Instances == 0 && len(tc.Spec.Instances) > 0 && st.ObservedGeneration == 0 {
		cs.Instances = int32(len(tc.Spec.Instances))
	}
	if r := tc.Spec.Rollout; r != nil && r.MaxUnavailable != nil {
		cs.MaxUnavailable = r.MaxUnavailable.String()
	}
	if c := meta.FindStatusCondition(st.Conditions, "Ready"); c != nil {
		cs.Ready, cs.ReadyReason = string(c.Status), c.Reason
	}
	cs.Stalled = meta.IsStatusConditionTrue(st.Conditions, "Stalled")
	cs.Reconciling = meta.IsStatusConditionTrue(st.Conditions, "Reconciling")
	return cs
}

// instanceSummary summarizes ti; tc, when given, is its cluster (for whether it is held).
func instanceSummary(ti *v1alpha1.TiledInstance, tc *v1alpha1.TiledCluster) InstanceSummary {
	st := &ti.Status
	is := InstanceSummary{
		Name: ti.Name, Cluster: clusterOf(ti),
		ReadyReplicas: st.ReadyReplicas, Replicas: 1,
		Image: st.Image, Version: st.Version, URL: st.URL,
		LastMigration: st.LastMigration, Upgrade: st.Upgrade, PendingRollout: st.PendingRollout, Maintenance: st.Maintenance,
		LastApproval: st.LastApproval, RefusedApproval: st.RefusedApproval, Notifications: st.Notifications,
		InPlaceRestore: st.InPlaceRestore,
		Conditions:     conditionSummaries(st.Conditions),
		Generation:     ti.Generation, Observed: st.ObservedGeneration,
		backupTarget: render.HasBackupTarget(ti),
	}
	if is.Cluster == "" {
		is.Cluster = ti.Labels[v1alpha1.LabelCluster]
	}
	if is.Image == "" && ti.Spec.Tiled != nil {
		is.Image = ti.Spec.Tiled.Image
	}
	if t := ti.Spec.Tiled; t != nil {
		switch {
		case t.Autoscaling != nil:
			is.Replicas = 0
		case t.Replicas != nil:
			is.Replicas = *t.Replicas
		}
	}
	if db := st.Database; db != nil {
		is.Database = &DatabaseSummary{Mode: db.Mode, Ready: db.Ready, CatalogRevision: db.CatalogRevision, AuthRevision: db.AuthRevision}
	}
	if b := st.Backup; b != nil {
		is.LastBackup, is.LastSuccessful, is.Restore = b.Last, b.LastSuccessful, b.Restore
	}
	if c := meta.FindStatusCondition(st.Conditions, "Ready"); c != nil {
		is.Ready, is.ReadyReason = string(c.Status), c.Reason
	}
	is.Stalled = meta.IsStatusConditionTrue(st.Conditions, "Stalled")
	if l := st.CatalogLost; l != nil {
		is.CatalogLost = l
		is.AcceptCatalogLoss = acceptCatalogLoss(ti.Namespace, ti.Name, l)
	}
	if tc != nil {
		is.Held = slices.ContainsFunc(tc.Status.Held, func(h v1alpha1.HeldInstance) bool { return h.Name == ti.Name })
	}
	return is
}

// acceptCatalogLoss is the command that accepts the loss of an instance's catalog: the annotation
// naming the new claim's UID (true for an external database), as the operator's CatalogLost message
// gives it. "" when there is nothing to accept yet (a managed database whose new claim does not
// exist) or the loss is no longer waiting for a person (a restore runs or ran).
func acceptCatalogLoss(ns, name string, l *v1alpha1.CatalogLost) string {
	if l.Phase != v1alpha1.CatalogLostStalled {
		return ""
	}
	uid := "true"
	if l.Claim != "" {
		if l.NewClaimUID == "" {
			return ""
		}
		uid = l.NewClaimUID
	}
	return fmt.Sprintf("kubectl annotate tiledinstance %s -n %s %s=%s", name, ns, v1alpha1.AnnotationAcceptCatalogLoss, uid)
}

func podSummary(p *corev1.Pod) PodSummary {
	ready, total, restarts := 0, len(p.Spec.Containers), int32(0)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		restarts += cs.RestartCount
	}
	total = max(total, len(p.Status.ContainerStatuses))
	return PodSummary{
		Name: p.Name, Component: p.Labels[v1alpha1.LabelAppComponent],
		Ready: fmt.Sprintf("%d/%d", ready, total), Status: podStatus(p), Restarts: restarts,
		Created: p.CreationTimestamp,
	}
}

// podStatus is the STATUS kubectl get pods shows, in short: Terminating, a container's waiting or
// terminated reason, else the phase.
func podStatus(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	for _, cs := range p.Status.InitContainerStatuses {
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			continue
		case cs.State.Terminated != nil:
			return "Init:" + cmp.Or(cs.State.Terminated.Reason, "Error")
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			return "Init:" + cs.State.Waiting.Reason
		case cs.State.Running != nil && !cs.Ready || cs.State.Waiting != nil:
			return "Init"
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			return cs.State.Waiting.Reason
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			return cs.State.Terminated.Reason
		}
	}
	if p.Status.Reason != "" {
		return p.Status.Reason
	}
	return cmp.Or(string(p.Status.Phase), "Pending")
}

// completeStatus completes the argument with the namespace's clusters and instances.
func completeStatus(o *options) cobra.CompletionFunc {
	instances := completeInstances(o)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ns, c, err := liveClient(o.config)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var list v1alpha1.TiledClusterList
		var out []cobra.Completion
		if err := c.List(ctx, &list, client.InNamespace(ns)); err == nil {
			for _, tc := range list.Items {
				if strings.HasPrefix(tc.Name, toComplete) {
					out = append(out, tc.Name)
				}
			}
		}
		more, dir := instances(cmd, args, toComplete)
		out = append(out, more...)
		slices.Sort(out)
		return slices.Compact(out), dir
	}
}
