package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/rollout"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/profiles"
)

// AnnotationExpansionHash is the hash of an instance's expanded content (spec, provenance, labels),
// which the cluster controller compares to tell up-to-date instances from those still to roll out.
const AnnotationExpansionHash = "tiled.blueskyproject.io/expansion-hash"

// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledinstances,verbs=create;patch;delete
// +kubebuilder:rbac:groups=tiled.blueskyproject.io,resources=tiledclusters/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=delete

// TiledClusterReconciler expands each TiledCluster, through the TiledProfiles it selects, into its
// TiledInstances, prunes the instances it no longer lists, and reports what it did in its status.
type TiledClusterReconciler struct {
	// Client reads from the informer cache.
	Client client.Client
	// Applier writes with server-side apply and skips unchanged intents.
	Applier *applier.Applier
	// Recorder sends Events, only on state transitions.
	Recorder events.EventRecorder
	// Builtins are the built-in defaults of every expansion.
	Builtins expansion.Builtins
	// Metrics records expansions; nil records nothing.
	Metrics *Metrics
	// Resync, when not nil, delivers clusters to reconcile again (Operator.ResyncAll).
	Resync <-chan event.GenericEvent

	// expansions remembers the last expansion of each cluster with the inputs it came from: Expand is
	// pure, so a reconcile caused by an instance's status (the most common kind) need not run it again.
	expansions sync.Map // types.NamespacedName -> *memo
	// took remembers how long each cluster's last reconcile took, to pace the reconciles its
	// members' changes cause (memberHandler).
	took sync.Map // types.NamespacedName -> time.Duration
}

// memberPace is how many times its own last duration a cluster waits, after a change of one of its
// TiledInstances, before it reconciles: the changes of that wait (during a stamp-out, a status write
// of every instance) are taken together in one reconcile, so reconciles caused by members take at
// most a fifth of a worker's time, whatever the fleet's size. A small cluster's reconcile takes a
// millisecond or two, so it hardly waits; a thousand-instance one waits a fraction of a second.
const memberPace = 4

// maxMemberWait bounds that wait.
const maxMemberWait = 2 * time.Second

// memberHandler enqueues the cluster that controls a TiledInstance when the instance changes
// (after memberPace times the cluster's last reconcile) or is deleted (at once: it is put back).
// The creation of an instance does not enqueue: the cluster created it.
func (r *TiledClusterReconciler) memberHandler() handler.EventHandler {
	owner := func(o client.Object) (reconcile.Request, bool) {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != "TiledCluster" || ref.APIVersion != tiledv1alpha1.GroupVersion.String() {
			return reconcile.Request{}, false
		}
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}, true
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueueAdder) {
			if req, ok := owner(e.ObjectNew); ok {
				q.AddAfter(req, r.memberWait(req.NamespacedName))
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueueAdder) {
			if req, ok := owner(e.Object); ok {
				q.Add(req)
			}
		},
	}
}

// memberWait is how long a change of one of the cluster's instances waits before the cluster
// reconciles (memberPace).
func (r *TiledClusterReconciler) memberWait(cluster types.NamespacedName) time.Duration {
	d, ok := r.took.Load(cluster)
	if !ok {
		return 0
	}
	return min(memberPace*d.(time.Duration), maxMemberWait)
}

type memo struct {
	key string
	// profiles are the profiles the expansion used, for the status.
	profiles []tiledv1alpha1.SelectedProfile
	err      error
	// intents are the expansion's instances as the applier needs them to decide whether an apply
	// must be sent — names and hashes, not objects: a reconcile that must send one, or compare a held
	// instance with its expansion, expands the cluster again (expanded), which is pure.
	intents []intent
	// changed remembers, by instance name, the fields a held change would change (ChangedFields is
	// not free, and a reconcile caused by an instance's status would compute it again).
	changed map[string]changedFields
	// pending keeps the expanded instances while a rollout waits or holds some of them: each step
	// of it sends a few, and would otherwise expand the whole cluster again. Nil once every instance
	// is applied.
	pending []*tiledv1alpha1.TiledInstance
}

// expansionView gives one reconcile the expanded instances of a memo's intents: those the engine
// just returned, those the memo keeps while a rollout is under way, or the engine's output for the
// same inputs, computed at most once and only when the reconcile needs one (an instance to send, a
// held instance to compare).
type expansionView struct {
	// cluster is namespace/name, for errors.
	cluster string
	m       *memo
	// mu guards typed: the instances of one reconcile are applied concurrently (carryOut).
	mu    sync.Mutex
	typed []*tiledv1alpha1.TiledInstance
	// expand runs the engine again on the memo's inputs.
	expand func() ([]*tiledv1alpha1.TiledInstance, error)
}

// get returns the expanded instance of intent i.
func (v *expansionView) get(i int) (*tiledv1alpha1.TiledInstance, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.typed == nil {
		typed, err := v.expand()
		if err != nil {
			return nil, err
		}
		v.typed = typed
	}
	if len(v.typed) != len(v.m.intents) || v.typed[i].Name != v.m.intents[i].name {
		return nil, fmt.Errorf("the expansion of %s changed under the same inputs (instance %d: %s)", v.cluster, i, v.m.intents[i].name)
	}
	return v.typed[i], nil
}

// keepWhilePending keeps this reconcile's expanded instances in the memo while the plan still has
// instances to apply later, and lets them go once it has none.
func (v *expansionView) keepWhilePending(plan rollout.Plan) {
	if plan.Pending > 0 || plan.Held > 0 {
		if v.typed != nil {
			v.m.pending = v.typed
		}
		return
	}
	v.m.pending = nil
}

// intent is the apply intent of one instance.
type intent struct {
	name string
	// instance is the instance's name in the cluster's spec.instances.
	instance string
	// prepared is the applier's view of the TiledInstance object built from the expanded instance.
	prepared applier.Prepared
	hash     string
}

// changedFields are the fields in which a stored instance (identified by storedKey) differs from
// its expansion.
type changedFields struct {
	storedKey string
	fields    []string
}

// expansionKey identifies the inputs of an expansion: the cluster's generation, every profile of the
// namespace (uid, generation, labels) and the built-in defaults' version.
func expansionKey(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile, builtins string) string {
	parts := make([]string, 0, len(candidates)+2)
	parts = append(parts, fmt.Sprintf("%s@%d", cluster.UID, cluster.Generation), builtins)
	for i := range candidates {
		p := &candidates[i]
		parts = append(parts, fmt.Sprintf("%s@%d%v", p.UID, p.Generation, labelsString(p.Labels)))
	}
	sort.Strings(parts[2:])
	return strings.Join(parts, "|")
}

func labelsString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k+"="+l[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// expand runs the engine and builds the instances' apply intents, or returns those of its last run
// for the same inputs. It returns the expanded instances too when it ran the engine (nil when the
// memo answered): expanded keeps them for the rest of the reconcile.
func (r *TiledClusterReconciler) expand(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile) (*memo, []*tiledv1alpha1.TiledInstance, error) {
	key := expansionKey(cluster, candidates, r.Builtins.Version)
	name := client.ObjectKeyFromObject(cluster)
	if m, ok := r.expansions.Load(name); ok && m.(*memo).key == key {
		return m.(*memo), nil, m.(*memo).err
	}
	done := r.Metrics.startExpansion()
	result, err := expansion.Expand(cluster, candidates, r.Builtins)
	done(err)
	var typed []*tiledv1alpha1.TiledInstance
	m := &memo{key: key, err: err, changed: map[string]changedFields{}}
	if err == nil {
		m.profiles = result.Profiles
		m.intents = make([]intent, 0, len(result.Instances))
		for _, inst := range result.Instances {
			obj, hash, ierr := instanceObject(cluster, inst.Object)
			if ierr != nil {
				return nil, nil, ierr
			}
			prepared, ierr := applier.Prepare(client.ApplyConfigurationFromUnstructured(obj))
			if ierr != nil {
				return nil, nil, ierr
			}
			m.intents = append(m.intents, intent{name: inst.Object.Name, instance: inst.Name, prepared: prepared, hash: hash})
			typed = append(typed, inst.Object)
		}
	}
	r.expansions.Store(name, m)
	return m, typed, err
}

// view returns the expanded instances of m's intents for one reconcile (fresh: what expand just
// returned, nil when the memo answered).
func (r *TiledClusterReconciler) view(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile,
	m *memo, fresh []*tiledv1alpha1.TiledInstance) *expansionView {
	if fresh == nil {
		fresh = m.pending
	}
	return &expansionView{cluster: cluster.Namespace + "/" + cluster.Name, m: m, typed: fresh, expand: func() ([]*tiledv1alpha1.TiledInstance, error) {
		done := r.Metrics.startExpansion()
		result, err := expansion.Expand(cluster, candidates, r.Builtins)
		done(err)
		if err != nil {
			return nil, err
		}
		typed := make([]*tiledv1alpha1.TiledInstance, len(result.Instances))
		for j, inst := range result.Instances {
			typed[j] = inst.Object
		}
		return typed, nil
	}}
}

// SetupWithManager registers the controller: it watches TiledClusters, the TiledInstances they own,
// and TiledProfiles (re-enqueuing only the clusters whose selectors match a profile's old or new
// labels).
func (r *TiledClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.PersistentVolume{}, pvClusterIndex, indexVolumeCluster); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("tiledcluster").
		For(&tiledv1alpha1.TiledCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&tiledv1alpha1.TiledInstance{}, r.memberHandler()).
		Watches(&tiledv1alpha1.TiledProfile{}, profileHandler(r.Client, true))
	if r.Resync != nil {
		b = b.WatchesRawSource(source.Channel(r.Resync, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// profileHandler maps a profile event to the clusters (forClusters) or standalone instances whose
// selectors match the profile's old or new labels.
func profileHandler(c client.Client, forClusters bool) handler.EventHandler {
	enqueue := func(ctx context.Context, old, updated *tiledv1alpha1.TiledProfile, q workqueueAdder) {
		ns := updated.Namespace
		var clusters tiledv1alpha1.TiledClusterList
		var instances tiledv1alpha1.TiledInstanceList
		if forClusters {
			if err := c.List(ctx, &clusters, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
				return
			}
		} else if err := c.List(ctx, &instances, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
			return
		}
		cl, in := profiles.Affected(old, updated, clusters.Items, instances.Items)
		for _, n := range append(cl, in...) {
			q.Add(reconcile.Request{NamespacedName: n})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueueAdder) {
			if p, ok := e.Object.(*tiledv1alpha1.TiledProfile); ok {
				enqueue(ctx, nil, p, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueueAdder) {
			o, ok1 := e.ObjectOld.(*tiledv1alpha1.TiledProfile)
			n, ok2 := e.ObjectNew.(*tiledv1alpha1.TiledProfile)
			if ok1 && ok2 && (o.Generation != n.Generation || !equality.Semantic.DeepEqual(o.Labels, n.Labels)) {
				enqueue(ctx, o, n, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueueAdder) {
			if p, ok := e.Object.(*tiledv1alpha1.TiledProfile); ok {
				enqueue(ctx, p, p, q)
			}
		},
	}
}

// Reconcile expands one TiledCluster and applies its instances.
func (r *TiledClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx).WithValues("cluster", req.String())
	start, gone := time.Now(), false
	defer func() {
		if gone {
			r.took.Delete(req.NamespacedName)
		} else {
			r.took.Store(req.NamespacedName, time.Since(start))
		}
	}()
	cluster := &tiledv1alpha1.TiledCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			gone = true
			r.expansions.Delete(req.NamespacedName)
			r.Applier.ForgetGroup(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes the instances; retained data stays
	}
	if cluster.Spec.Paused {
		logger.V(1).Info("paused: no writes")
		return ctrl.Result{}, nil
	}

	var profileList tiledv1alpha1.TiledProfileList
	if err := r.Client.List(ctx, &profileList, client.InNamespace(cluster.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	status := cluster.Status.DeepCopy()
	status.ObservedGeneration = cluster.Generation
	status.InstanceSelector = tiledv1alpha1.LabelCluster + "=" + cluster.Name
	status.Instances = int32(len(cluster.Spec.Instances))

	expanded, fresh, err := r.expand(cluster, profileList.Items)
	if err == nil {
		err = deletedInUse(cluster, profileList.Items)
	}
	if err != nil {
		// Children stay exactly as they were: nothing is applied, nothing pruned.
		reason := expansionReason(err)
		logger.Info("expansion failed; instances left as they were", "reason", reason, "error", err.Error())
		setCondition(&status.Conditions, cluster.Generation, ConditionProfilesResolved, metav1.ConditionFalse, reason, err.Error())
		setStalled(&status.Conditions, cluster.Generation, reason, err.Error())
		setCondition(&status.Conditions, cluster.Generation, ConditionReady, metav1.ConditionFalse, reason, "the cluster cannot be expanded: "+err.Error())
		sent, werr := r.writeStatus(ctx, cluster, status)
		// Events mark transitions only: sent once, when the status that records them is written.
		if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionProfilesResolved); changed && sent {
			r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, reason, "Expand", "%s", c.Message)
			r.eventOnConflictingProfiles(err, profileList.Items, cluster)
		}
		return ctrl.Result{}, werr
	}

	status.Profiles = expanded.profiles
	names := make([]string, len(expanded.profiles))
	for i, p := range expanded.profiles {
		names[i] = p.Name
	}
	status.ProfileNames = strings.Join(names, ",")
	setCondition(&status.Conditions, cluster.Generation, ConditionProfilesResolved, metav1.ConditionTrue, ReasonResolved,
		fmt.Sprintf("%d profiles selected: %s", len(names), status.ProfileNames))

	// Every TiledInstance of the namespace by name, members or not: a name this cluster wants that
	// another owner holds (another cluster, a person) is never adopted nor shared. The cache's own
	// objects, not copies (a reconcile runs on every instance status write; copying N instances each
	// time is most of the manager's allocations at scale): nothing below modifies them.
	var inNamespace tiledv1alpha1.TiledInstanceList
	if err := r.Client.List(ctx, &inNamespace, client.InNamespace(cluster.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	byName := map[string]*tiledv1alpha1.TiledInstance{}
	for i := range inNamespace.Items {
		byName[inNamespace.Items[i].Name] = &inNamespace.Items[i]
	}

	// What is there for each desired instance, what the rollout does with it, and doing it.
	view := r.view(cluster, profileList.Items, expanded, fresh)
	observed, current, held, err := expanded.observe(cluster, byName, view)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := rollout.Make(observed, rollout.MaxUnavailable(rolloutMaxUnavailable(cluster), len(cluster.Spec.Instances)))
	ready, refused, err := r.carryOut(ctx, cluster, plan, expanded.intents, current, view)
	if err != nil {
		return ctrl.Result{}, err
	}
	view.keepWhilePending(plan)

	// Prune instances no longer listed: only ours (controller UID checked), with a UID precondition.
	desired := make(map[string]bool, len(expanded.intents))
	for _, in := range expanded.intents {
		desired[in.name] = true
	}
	pruned, err := r.prune(ctx, cluster, inNamespace.Items, desired)
	if err != nil {
		return ctrl.Result{}, err
	}

	total := len(plan.Decisions)
	setRolloutStatus(status, cluster, plan, held, ready, current, refused)
	for _, p := range pruned {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, "InstanceRemoved", "Prune",
			"instance %s is no longer listed and was deleted", p)
	}
	// A name another owner holds is not a change of this cluster's objects: look again now and then
	// (once a minute, not a hot loop) in case it has gone.
	var again ctrl.Result
	if plan.Refused > 0 {
		again.RequeueAfter = time.Minute
	}
	sent, err := r.writeStatus(ctx, cluster, status)
	if err != nil || !sent {
		return again, err
	}
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionStalled); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
	}
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionProfilesResolved); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, ReasonResolved, "Expand", "%s; %d instances", c.Message, total)
	}
	if c, changed := transitioned(cluster.Status.Conditions, status.Conditions, ConditionReady); changed && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, c.Reason, "Reconcile", "%s", c.Message)
	}
	return again, nil
}

// observe returns, for each intent (in order), what is there: the rollout's view of it, the
// instance when this cluster controls it, and the status.held entries of held instances (sorted).
func (m *memo) observe(cluster *tiledv1alpha1.TiledCluster, byName map[string]*tiledv1alpha1.TiledInstance,
	view *expansionView) (
	[]rollout.Instance, []*tiledv1alpha1.TiledInstance, []tiledv1alpha1.HeldInstance, error) {
	hold := map[string]bool{}
	for _, ci := range cluster.Spec.Instances {
		hold[ci.Name] = ci.Hold
	}
	observed := make([]rollout.Instance, len(m.intents))
	current := make([]*tiledv1alpha1.TiledInstance, len(m.intents))
	var held []tiledv1alpha1.HeldInstance
	for i, in := range m.intents {
		o := rollout.Instance{Name: in.name}
		if cur := byName[in.name]; cur != nil {
			o.Exists = true
			if ref := metav1.GetControllerOf(cur); ref == nil || ref.UID != cluster.UID {
				o.Foreign = foreignOwner(ref)
			} else {
				current[i] = cur
				o.UpToDate = cur.Annotations[AnnotationExpansionHash] == in.hash
				o.Ready = instanceReady(cur)
			}
		}
		// A hold protects an instance that exists; one that does not is created.
		if hold[in.instance] && current[i] != nil && !o.UpToDate {
			fields, err := m.changedFields(current[i], in, func() (*tiledv1alpha1.TiledInstance, error) { return view.get(i) })
			if err != nil {
				return nil, nil, nil, fmt.Errorf("comparing the held instance %s with its expansion: %w", in.name, err)
			}
			// A change no field shows (only the expansion hash differs) restarts nothing: applied.
			if len(fields) > 0 {
				o.Held = true
				held = append(held, heldEntry(cluster.Status.Held, in.name, fields))
			}
		}
		observed[i] = o
	}
	sort.Slice(held, func(i, j int) bool { return held[i].Name < held[j].Name })
	return observed, current, held, nil
}

// carryOut applies the instances the plan says to apply, a few at once (the instance controller
// starts on each as soon as it exists), and returns how many instances count as ready and the ones
// refused (a name taken, or the API server refusing the object), in the plan's order.
func (r *TiledClusterReconciler) carryOut(ctx context.Context, cluster *tiledv1alpha1.TiledCluster, plan rollout.Plan, intents []intent,
	current []*tiledv1alpha1.TiledInstance, view *expansionView) (int, []string, error) {
	var (
		mu      sync.Mutex
		ready   int
		refused = make([]string, len(plan.Decisions))
		firstEr error
		wg      sync.WaitGroup
	)
	work := make(chan int)
	group := applier.Group(types.NamespacedName{Namespace: cluster.Namespace, Name: cluster.Name}.String())
	apply := func(i int) {
		d := plan.Decisions[i]
		build := func() (runtime.ApplyConfiguration, error) {
			typed, err := view.get(i)
			if err != nil {
				return nil, err
			}
			obj, _, err := instanceObject(cluster, typed)
			return client.ApplyConfigurationFromUnstructured(obj), err
		}
		_, err := r.Applier.ApplyPrepared(ctx, intents[i].prepared, build, curOrNil(current[i]), group)
		mu.Lock()
		defer mu.Unlock()
		switch reason := refusal(err); {
		case reason != "":
			// One beamline the API server refuses (e.g. a value an expression computed that the
			// schema rejects) stalls the cluster, naming it; the other beamlines go on.
			refused[i] = fmt.Sprintf("%s (%s: %v)", d.Name, reason, trimError(err))
		case err != nil:
			if firstEr == nil {
				firstEr = err
			}
		case d.CountsReady:
			ready++
		}
	}
	for range min(applyConcurrency, len(plan.Decisions)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				apply(i)
			}
		}()
	}
	for i, d := range plan.Decisions {
		switch d.Action {
		case rollout.Refuse:
			refused[i] = fmt.Sprintf("%s (NameTaken: a TiledInstance of that name exists and %s; it is not adopted — rename the beamline or remove that object)", d.Name, d.Foreign)
			continue
		case rollout.Hold, rollout.Wait:
			if d.CountsReady {
				mu.Lock()
				ready++ // held: serving, on the spec it had
				mu.Unlock()
			}
			continue
		}
		mu.Lock()
		failed := firstEr != nil
		mu.Unlock()
		if failed {
			break // the reconcile fails and is retried; the applies already sent stand
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if firstEr != nil {
		return 0, nil, firstEr
	}
	var out []string
	for _, msg := range refused {
		if msg != "" {
			out = append(out, msg)
		}
	}
	return ready, out, nil
}

// applyConcurrency is how many TiledInstances one cluster reconcile applies at once.
const applyConcurrency = DefaultInstanceConcurrency

// setRolloutStatus sets the instance counts, status.held and the Ready, Reconciling and Stalled
// conditions of a cluster that expanded, from the rollout plan and what carrying it out gave.
func setRolloutStatus(status *tiledv1alpha1.TiledClusterStatus, cluster *tiledv1alpha1.TiledCluster, plan rollout.Plan,
	held []tiledv1alpha1.HeldInstance, ready int, current []*tiledv1alpha1.TiledInstance, refused []string) {
	total, pending := len(plan.Decisions), plan.Pending
	status.UpdatedInstances = int32(total - pending - plan.Held)
	status.ReadyInstances = int32(ready)
	status.PendingInstances = int32(pending)
	status.HeldInstances = int32(len(held))
	status.Held = held[:min(len(held), maxHeldListed)]
	heldMsg := heldMessage(held)
	removeCondition(&status.Conditions, ConditionStalled)
	members := make([]*tiledv1alpha1.TiledInstance, 0, total)
	for _, cur := range current {
		if cur != nil {
			members = append(members, cur)
		}
	}
	stalled := stalledMembers(cluster.Name, total, members, refused)
	switch {
	case stalled != "":
		setStalled(&status.Conditions, cluster.Generation, ReasonInstancesStalled, stalled)
	case pending > 0:
		msg := fmt.Sprintf("rolling out: %d of %d instances updated, %d waiting (maxUnavailable %d)", int(status.UpdatedInstances), total, pending, plan.MaxUnavailable)
		if heldMsg != "" {
			msg += "; " + heldMsg
		}
		setReconciling(&status.Conditions, cluster.Generation, ReasonRollingOut, msg)
	case int(status.ReadyInstances) < total:
		msg := fmt.Sprintf("%d of %d instances ready", status.ReadyInstances, total)
		if heldMsg != "" {
			msg = heldMsg + "; " + msg
		}
		setReconciling(&status.Conditions, cluster.Generation, ReasonWaitingForReady, msg)
	case len(held) > 0:
		// A hold is deliberate, not progress: the cluster is Ready, and says what it holds back.
		setReady(&status.Conditions, cluster.Generation, ReasonInstancesHeld, fmt.Sprintf("%s; %d of %d ready", heldMsg, status.ReadyInstances, total))
	default:
		setReady(&status.Conditions, cluster.Generation, ReasonAllReady, fmt.Sprintf("all %d instances ready", total))
	}
}

// maxHeldListed and maxHeldFields bound status.held (heldInstances and fieldCount count them all).
const (
	maxHeldListed = 50
	maxHeldFields = 10
	// heldNamed is how many held instances the Ready condition names.
	heldNamed = 5
)

// changedFields returns the fields in which the stored instance differs from its expansion, from
// the memo when the stored instance has not changed since they were computed.
func (m *memo) changedFields(cur *tiledv1alpha1.TiledInstance, in intent, typed func() (*tiledv1alpha1.TiledInstance, error)) ([]string, error) {
	key := fmt.Sprintf("%s@%d|%s", cur.UID, cur.Generation, labelsString(cur.Labels))
	if c, ok := m.changed[in.name]; ok && c.storedKey == key {
		return c.fields, nil
	}
	desired, err := typed()
	if err != nil {
		return nil, err
	}
	fields, err := expansion.ChangedFields(cur, desired)
	if err != nil {
		return nil, err
	}
	m.changed[in.name] = changedFields{storedKey: key, fields: fields}
	return fields, nil
}

// heldEntry is the status.held entry of a held instance: the fields that would change (the first
// maxHeldFields) and since when, kept from the previous status.
func heldEntry(previous []tiledv1alpha1.HeldInstance, name string, fields []string) tiledv1alpha1.HeldInstance {
	e := tiledv1alpha1.HeldInstance{Name: name, Fields: fields[:min(len(fields), maxHeldFields)], FieldCount: int32(len(fields))}
	for _, p := range previous {
		if p.Name == name && p.Since != nil {
			e.Since = p.Since.DeepCopy()
		}
	}
	if e.Since == nil {
		now := metav1.Now().Rfc3339Copy()
		e.Since = &now
	}
	return e
}

// heldMessage names the held instances for the Ready condition, e.g. "2 instances held (beamtime):
// nsls2-amx, nsls2-bmm"; "" when none is held. held is sorted by name.
func heldMessage(held []tiledv1alpha1.HeldInstance) string {
	if len(held) == 0 {
		return ""
	}
	names := make([]string, 0, heldNamed)
	for _, h := range held[:min(len(held), heldNamed)] {
		names = append(names, h.Name)
	}
	list := strings.Join(names, ", ")
	if len(held) > heldNamed {
		list += fmt.Sprintf(" and %d more (status.held)", len(held)-heldNamed)
	}
	if len(held) == 1 {
		return "1 instance held (beamtime): " + list
	}
	return fmt.Sprintf("%d instances held (beamtime): %s", len(held), list)
}

// writeStatus applies the status when it differs from the one in the cache (and from the last one
// applied), and reports whether it sent it.
func (r *TiledClusterReconciler) writeStatus(ctx context.Context, cluster *tiledv1alpha1.TiledCluster, status *tiledv1alpha1.TiledClusterStatus) (bool, error) {
	if equality.Semantic.DeepEqual(&cluster.Status, status) {
		return false, nil
	}
	return applyStatus(ctx, r.Applier, cluster, "TiledCluster", status)
}

// prune deletes the instances of this cluster that it no longer lists.
func (r *TiledClusterReconciler) prune(ctx context.Context, cluster *tiledv1alpha1.TiledCluster, existing []tiledv1alpha1.TiledInstance, desired map[string]bool) ([]string, error) {
	var pruned []string
	for i := range existing {
		ti := &existing[i]
		if desired[ti.Name] || !ti.DeletionTimestamp.IsZero() {
			continue
		}
		ref := metav1.GetControllerOf(ti)
		if ref == nil || ref.UID != cluster.UID {
			continue // not ours: never delete
		}
		released, err := r.release(ctx, ti)
		if err != nil {
			return pruned, err
		}
		uid := ti.UID
		err = r.Client.Delete(ctx, ti, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return pruned, fmt.Errorf("pruning TiledInstance %s/%s: %w", ti.Namespace, ti.Name, err)
		}
		r.Applier.Forget(applier.Key{APIVersion: tiledv1alpha1.GroupVersion.String(), Kind: "TiledInstance", Namespace: ti.Namespace, Name: ti.Name})
		msg := ti.Labels[tiledv1alpha1.LabelInstance]
		if len(released) > 0 {
			msg += " (retained: " + strings.Join(released, ", ") + ")"
		}
		pruned = append(pruned, msg)
	}
	sort.Strings(pruned)
	return pruned, r.releaseVolumes(ctx, cluster, desired)
}

// releaseVolumes deletes the NFS PersistentVolumes of this cluster's instances that are gone. They
// are cluster-scoped, so no owner reference can take them with their instance; they point at the
// export and hold no data (reclaim policy Retain: deleting one never touches the files). A volume
// goes only once its instance is gone from the cache: while the instance controller can still see
// the instance, it would put a deleted volume back.
func (r *TiledClusterReconciler) releaseVolumes(ctx context.Context, cluster *tiledv1alpha1.TiledCluster, desired map[string]bool) error {
	// This runs on every reconcile, and a fleet has two volumes an instance: the index hands over
	// this cluster's volumes alone, and the cache's own objects, not copies (nothing below modifies
	// them).
	var pvs corev1.PersistentVolumeList
	if err := r.Client.List(ctx, &pvs, client.MatchingFields{pvClusterIndex: cluster.Namespace + "/" + cluster.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		instance := pv.Labels["app.kubernetes.io/instance"]
		if pv.Spec.NFS == nil || instance == "" || desired[instance] || !pv.DeletionTimestamp.IsZero() {
			continue
		}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: instance}, &tiledv1alpha1.TiledInstance{})
		if !apierrors.IsNotFound(err) {
			continue // still there (or unknown): the next reconcile, when it goes, looks again
		}
		uid := pv.UID
		if err := r.Client.Delete(ctx, pv, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the NFS PersistentVolume %s of the removed instance %s/%s: %w", pv.Name, cluster.Namespace, instance, err)
		}
	}
	return nil
}

// pvClusterIndex indexes the operator's PersistentVolumes by the namespace of their claim and the
// cluster label: "namespace/cluster".
const pvClusterIndex = ".metadata.labels.cluster"

// indexVolumeCluster is pvClusterIndex's function.
func indexVolumeCluster(o client.Object) []string {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Labels[tiledv1alpha1.LabelManagedBy] != tiledv1alpha1.ManagedByValue || pv.Spec.ClaimRef == nil {
		return nil
	}
	if c := pv.Labels[tiledv1alpha1.LabelCluster]; c != "" {
		return []string{pv.Spec.ClaimRef.Namespace + "/" + c}
	}
	return nil
}

// LabelReleased marks a data or database claim, or the Secret, kept by the Retain policy after its
// instance was removed: `kubectl get pvc,secret -l tiled.blueskyproject.io/released=true` lists them.
const LabelReleased = "tiled.blueskyproject.io/released"

// release labels the claims and the Secret an instance leaves behind under the Retain policy (they
// have no owner reference, so the garbage collector keeps them) and returns their names.
func (r *TiledClusterReconciler) release(ctx context.Context, ti *tiledv1alpha1.TiledInstance) ([]string, error) {
	claims := &metav1.PartialObjectMetadataList{}
	claims.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"))
	if err := r.Client.List(ctx, claims, client.InNamespace(ti.Namespace),
		client.MatchingLabels{"app.kubernetes.io/instance": ti.Name, tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}); err != nil {
		return nil, err
	}
	var secrets corev1.SecretList
	if err := r.Client.List(ctx, &secrets, client.InNamespace(ti.Namespace),
		client.MatchingLabels{"app.kubernetes.io/instance": ti.Name, tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue}); err != nil {
		return nil, err
	}
	retained := make([]client.Object, 0, len(claims.Items)+len(secrets.Items))
	for i := range claims.Items {
		retained = append(retained, &claims.Items[i])
	}
	for i := range secrets.Items {
		retained = append(retained, &secrets.Items[i])
	}
	var names []string
	for _, o := range retained {
		if metav1.GetControllerOf(o) != nil {
			continue // owned: goes with the instance (Delete policy, or an NFS claim)
		}
		kind := "PersistentVolumeClaim"
		if _, ok := o.(*corev1.Secret); ok {
			kind = "Secret"
		}
		if o.GetLabels()[LabelReleased] != "true" {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": kind,
				"metadata": map[string]any{"name": o.GetName(), "namespace": o.GetNamespace(), "labels": map[string]any{LabelReleased: "true"}},
			}}
			if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(tiledv1alpha1.RetentionFieldOwner), client.ForceOwnership); err != nil {
				return nil, fmt.Errorf("labelling the retained %s %s/%s: %w", kind, o.GetNamespace(), o.GetName(), err)
			}
		}
		if kind == "PersistentVolumeClaim" {
			names = append(names, o.GetName())
		} else {
			names = append(names, "Secret "+o.GetName())
		}
	}
	sort.Strings(names)
	return names, nil
}

// eventOnConflictingProfiles records the conflict on each profile involved.
func (r *TiledClusterReconciler) eventOnConflictingProfiles(err error, candidates []tiledv1alpha1.TiledProfile, cluster *tiledv1alpha1.TiledCluster) {
	conflict, ok := asConflict(err)
	if !ok {
		return
	}
	for _, src := range conflict.Profiles {
		for i := range candidates {
			if expansion.ProfileSource(&candidates[i]) == src {
				r.Recorder.Eventf(&candidates[i], cluster, corev1.EventTypeWarning, ReasonConflict, "Expand",
					"conflicts with %s on %s in cluster %s", other(conflict.Profiles, src), conflict.Field, cluster.Name)
			}
		}
	}
}

// ProfileDeletedError reports a profile the cluster's instances were expanded from that has been
// deleted since. Until the cluster's spec changes (which acknowledges the new selection), the
// instances stay as they were rather than silently losing the profile's settings.
type ProfileDeletedError struct {
	Cluster, Profile string
}

func (e *ProfileDeletedError) Error() string {
	return fmt.Sprintf("TiledCluster %s: profile %s, which its instances were expanded from, was deleted; the instances are left as they were. "+
		"Recreate the profile, or change the cluster's spec (e.g. its profileSelector) to accept the new selection", e.Cluster, e.Profile)
}

// deletedInUse returns a ProfileDeletedError for a profile of the last expansion that no longer
// exists, unless the cluster's spec changed since that expansion.
func deletedInUse(cluster *tiledv1alpha1.TiledCluster, candidates []tiledv1alpha1.TiledProfile) error {
	if cluster.Status.ObservedGeneration != cluster.Generation {
		return nil
	}
	// By name: a profile recreated under the same name (a new UID) is the profile back.
	present := map[string]bool{}
	for i := range candidates {
		present[candidates[i].Name] = true
	}
	for _, p := range cluster.Status.Profiles {
		if !present[p.Name] {
			return &ProfileDeletedError{Cluster: cluster.Name, Profile: p.Name}
		}
	}
	return nil
}

// instanceObject builds the apply intent of one instance: the engine's object (labels, spec,
// provenance) with the cluster's controller reference and the expansion hash, trimmed to the fields
// the cluster controller owns (no status, no creation timestamp).
func instanceObject(cluster *tiledv1alpha1.TiledCluster, ti *tiledv1alpha1.TiledInstance) (*unstructured.Unstructured, string, error) {
	content, err := json.Marshal(struct {
		Spec       any
		Provenance map[string]string
		Labels     map[string]string
	}{ti.Spec, ti.Provenance, ti.Labels})
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(content)
	hash := hex.EncodeToString(sum[:])[:16]
	intent := &tiledv1alpha1.TiledInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: tiledv1alpha1.GroupVersion.String(), Kind: "TiledInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ti.Name, Namespace: cluster.Namespace, Labels: ti.Labels,
			Annotations:     map[string]string{AnnotationExpansionHash: hash},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cluster, tiledv1alpha1.GroupVersion.WithKind("TiledCluster"))},
		},
		Spec:       ti.Spec,
		Provenance: ti.Provenance,
	}
	u, err := toUnstructured(intent)
	if err != nil {
		return nil, "", err
	}
	trimIntent(u)
	return u, hash, nil
}

// foreignOwner says who holds an instance this cluster does not control.
func foreignOwner(ref *metav1.OwnerReference) string {
	if ref == nil {
		return "has no controller (made by hand)"
	}
	return fmt.Sprintf("is controlled by %s %s", ref.Kind, ref.Name)
}

// stalledMembers describes the cluster's members that need a person: instances the API server
// refused, and instances whose own status is Stalled (with their reasons), the first few by name;
// "" when there are none.
func stalledMembers(cluster string, total int, members []*tiledv1alpha1.TiledInstance, refused []string) string {
	var list []string
	list = append(list, refused...)
	for _, ti := range members {
		if c := meta.FindStatusCondition(ti.Status.Conditions, ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			list = append(list, fmt.Sprintf("%s (%s: %s)", ti.Name, c.Reason, trimMessage(c.Message, 160)))
		}
	}
	if len(list) == 0 {
		return ""
	}
	sort.Strings(list)
	const shown = 3
	msg := fmt.Sprintf("%d of %d instances stalled: %s", len(list), total, strings.Join(list[:min(shown, len(list))], "; "))
	if len(list) > shown {
		msg += fmt.Sprintf("; and %d more (kubectl get ti -l %s=%s shows each)", len(list)-shown, tiledv1alpha1.LabelCluster, cluster)
	}
	return msg
}

func trimError(err error) string { return trimMessage(err.Error(), 240) }

func trimMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// instanceReady reports whether an instance is Ready at its current generation.
func instanceReady(ti *tiledv1alpha1.TiledInstance) bool {
	c := meta.FindStatusCondition(ti.Status.Conditions, ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && ti.Status.ObservedGeneration == ti.Generation
}

// rolloutMaxUnavailable is spec.rollout.maxUnavailable, nil when unset.
func rolloutMaxUnavailable(cluster *tiledv1alpha1.TiledCluster) *intstr.IntOrString {
	if cluster.Spec.Rollout == nil {
		return nil
	}
	return cluster.Spec.Rollout.MaxUnavailable
}

func asConflict(err error) (*expansion.ConflictError, bool) {
	var c *expansion.ConflictError
	return c, errors.As(err, &c)
}

// workqueueAdder is the queue event handlers add requests to.
type workqueueAdder = workqueue.TypedRateLimitingInterface[reconcile.Request]

func curOrNil(ti *tiledv1alpha1.TiledInstance) client.Object {
	if ti == nil {
		return nil
	}
	return ti
}

func other(pair [2]string, one string) string {
	if pair[0] == one {
		return pair[1]
	}
	return pair[0]
}
