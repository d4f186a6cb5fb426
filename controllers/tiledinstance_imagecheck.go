package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/controllers/applier"
	"github.com/bluesky/tiled-operator/controllers/childset"
	"github.com/bluesky/tiled-operator/controllers/desired"
	"github.com/bluesky/tiled-operator/controllers/podstatus"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// The image check (issue 43): a new image of the managed PostgreSQL or streaming cache StatefulSet
// is proven pullable and startable by a Job of its own (render.ImageCheckJob: the image, its
// program's --version) before the StatefulSet's pod is replaced by one running it, as the Tiled
// upgrade's check Job proves a new Tiled image. A StatefulSet with OrderedReady pod management
// replaces its Ready pod at once with one on the new template: a typo in the image took the
// database down. While the check has not passed, the StatefulSet is left as it is live (its pod
// keeps serving), and the ImageCheckPending condition names the StatefulSet, the image and why it
// waits (the check pod's ImagePullBackOff). Once the check's Job completes, the image is recorded
// in status.checkedImages and the StatefulSet applied; the Job goes once the cache shows the
// record. The image set back to the live one cancels the check: its Job, no longer wanted, is
// pruned. A first creation (no live StatefulSet) is not checked. A failed check is never retried:
// one Job per image (a hash of the image in its name), replaced by a new image's.

// ConditionImageCheckPending is True, and present only then, while a change of the managed
// PostgreSQL or streaming cache StatefulSet's image waits for its image check.
const ConditionImageCheckPending = "ImageCheckPending"

// Reasons of ImageCheckPending besides the check pod's own (podstatus: ImagePullBackOff,
// ContainerConfigError, CrashLoopBackOff, Unschedulable).
const (
	// ReasonImageCheckRunning: the check's Job runs (or is being created).
	ReasonImageCheckRunning = "ImageCheckRunning"
	// ReasonImageCheckFailed: the check's Job failed (the program exited non-zero, or its deadline
	// passed).
	ReasonImageCheckFailed = "ImageCheckFailed"
)

// imageTarget is a StatefulSet whose image is checked.
type imageTarget struct {
	component string // render.ComponentDatabase or render.ComponentCache
	name      string // the StatefulSet's name
	container string // its container's name (render)
	field     string // the spec field that sets the image, for messages
}

// imageCheckJob is what the cache shows of an image check's Job and its pod.
type imageCheckJob struct {
	Name             string
	Complete, Failed bool
	// Reason and Message say why it does not complete: the pod's problem (podstatus), or the Job's
	// failure.
	Reason, Message string
}

// imageCheckFacts are what one StatefulSet's image check is decided from.
type imageCheckFacts struct {
	StatefulSet, Field string
	// Live is the image the live StatefulSet runs, "" when there is none (a first creation, or a
	// StatefulSet the operator applied as it renders it: no change).
	Live string
	// Want is the image the render gives it.
	Want string
	// Checked is the image status.checkedImages records for it ("" none).
	Checked string
	// JobName is the name of Want's check Job; Job what the cache shows of it (nil: none).
	JobName string
	Job     *imageCheckJob
}

// imageCheckDecision is what to do with one StatefulSet.
type imageCheckDecision struct {
	// Hold leaves the StatefulSet as it is live.
	Hold bool
	// Run wants Want's check Job (applied, or kept as it is); not wanted, it is pruned.
	Run bool
	// Passed records Want in status.checkedImages.
	Passed bool
	// Reason and Message are ImageCheckPending's, when Hold.
	Reason, Message string
}

// decideImageCheck is the image check's decision for one StatefulSet (pure).
func decideImageCheck(f imageCheckFacts) imageCheckDecision {
	switch {
	case f.Want == "":
		return imageCheckDecision{}
	case f.Job != nil && f.Job.Complete:
		if f.Checked == f.Want {
			return imageCheckDecision{} // recorded, and the cache shows it: the Job goes
		}
		// Passed: the StatefulSet changes; the Job stays until the record is in the cache, so
		// that a reconcile that starts before it shows the record does not check again.
		return imageCheckDecision{Run: true, Passed: true}
	case f.Live == "" || f.Live == f.Want || f.Checked == f.Want:
		// Nothing to check: a first creation, the image as it runs (a typo removed cancels its
		// check), or an image already proven.
		return imageCheckDecision{}
	}
	d := imageCheckDecision{Hold: true, Run: true, Reason: ReasonImageCheckRunning}
	why := "its check Job " + f.JobName + " runs"
	switch {
	case f.Job == nil:
		why = "its check Job " + f.JobName + " is created"
	case f.Job.Failed:
		d.Reason = ReasonImageCheckFailed
		if f.Job.Reason != "" {
			d.Reason = f.Job.Reason
		}
		why = "its check Job " + f.JobName + " failed, and is not retried (set another image, or the one running, to go on)"
		if f.Job.Message != "" {
			why += ": " + f.Job.Message
		}
	case f.Job.Reason != "":
		d.Reason = f.Job.Reason
		why = "its check Job " + f.JobName + " cannot run it (fix the image, or set back the one running, to go on)"
		if f.Job.Message != "" {
			why += ": " + f.Job.Message
		}
	}
	d.Message = fmt.Sprintf("StatefulSet %s keeps image %s: the new image %s (%s) has not been proven to pull and start; %s",
		f.StatefulSet, f.Live, f.Want, f.Field, why)
	return d
}

// imageChecks is the image check's part of a reconcile's renderGate.
type imageChecks struct {
	// jobs are the check Jobs wanted (applied after the other children, kept from the prune).
	jobs []*batchv1ac.JobApplyConfiguration
	// checked is status.checkedImages to write (nil: as it was).
	checked []tiledv1alpha1.CheckedImage
	// reason and message are ImageCheckPending's ("" message: none waits).
	reason, message string
}

// imageTargets are the StatefulSets of the instance whose image is checked.
func imageTargets(spec *tiledv1alpha1.TiledInstance, external bool) []imageTarget {
	n := names.For(spec.Namespace, spec.Name)
	var out []imageTarget
	if db := spec.Spec.Database; !external && db != nil && db.Managed != nil {
		out = append(out, imageTarget{component: render.ComponentDatabase, name: n.Postgres, container: "postgres", field: "spec.database.managed.image"})
	}
	if render.ManagedCacheEnabled(spec) {
		out = append(out, imageTarget{component: render.ComponentCache, name: n.Cache, container: "cache", field: "spec.streaming.managed.image"})
	}
	return out
}

// targetImage is the image the expanded spec gives target's StatefulSet.
func targetImage(spec *tiledv1alpha1.TiledInstance, t imageTarget) string {
	switch t.component {
	case render.ComponentDatabase:
		return spec.Spec.Database.Managed.Image
	case render.ComponentCache:
		return spec.Spec.Streaming.Managed.Image
	}
	return ""
}

// gateImages adds to g the StatefulSets whose new image waits for its check, and the check Jobs to
// apply. It reads the cache (the check Jobs and their pods, the StatefulSets as trimmed) and, only
// for a StatefulSet whose intent differs from the live one's and whose new image is not proven yet,
// the live StatefulSet past the cache (one request: the cache keeps only the Tiled container's
// image).
func (r *TiledInstanceReconciler) gateImages(ctx context.Context, cur *instanceState, in instanceInputs, want *desired.Children, g *renderGate) error {
	ti, spec := cur.ti, in.spec
	targets := imageTargets(spec, in.external)
	prev := ti.Status.CheckedImages
	if len(targets) == 0 && len(prev) == 0 {
		return nil
	}
	n := names.For(ti.Namespace, spec.Name)
	checked := map[string]string{}
	for _, c := range prev {
		checked[c.StatefulSet] = c.Image
	}
	var records []tiledv1alpha1.CheckedImage
	var messages []string
	for _, t := range targets {
		f := imageCheckFacts{StatefulSet: t.name, Field: t.field, Want: targetImage(spec, t), Checked: checked[t.name]}
		if f.Want == "" {
			continue
		}
		check := render.ImageCheck{Component: t.component, Image: f.Want}
		f.JobName = render.ImageCheckJobName(n, check)
		job, err := r.imageCheckJob(ctx, cur, f.JobName)
		if err != nil {
			return err
		}
		f.Job = job
		idx := -1
		key := stsKey(ti.Namespace, t.name)
		for i := range want.Len() {
			if want.Prepared(i).Key == key {
				idx = i
			}
		}
		var live *appsv1.StatefulSet
		if idx >= 0 && (f.Job == nil || !f.Job.Complete) && f.Checked != f.Want && !r.Applier.Holds(want.Prepared(idx)) {
			if live = cur.statefulSet(ctx, key); live != nil && applier.IntentOf(live) != want.Prepared(idx).Annotation() {
				if f.Live, err = r.liveImage(ctx, ti.Namespace, t.name, t.container); err != nil {
					return err
				}
			}
		}
		d := decideImageCheck(f)
		if d.Hold && idx >= 0 && live != nil {
			g.skips = append(g.skips, gateSkip{idx: idx, generation: live.Generation})
			messages = append(messages, d.Message)
			if g.images.reason == "" {
				g.images.reason = d.Reason
			}
		}
		if d.Run {
			ac, err := render.ImageCheckJob(spec, n, check)
			if err != nil {
				return renderStall(err)
			}
			ac.WithOwnerReferences(metav1ac.OwnerReference().
				WithAPIVersion(tiledv1alpha1.GroupVersion.String()).WithKind("TiledInstance").
				WithName(ti.Name).WithUID(ti.UID).WithController(true).WithBlockOwnerDeletion(true))
			g.images.jobs = append(g.images.jobs, ac)
		}
		if d.Passed {
			now := metav1.Now().Rfc3339Copy()
			records = append(records, tiledv1alpha1.CheckedImage{StatefulSet: t.name, Image: f.Want, Time: &now})
		}
	}
	g.images.message = strings.Join(messages, "; ")
	// status.checkedImages: the new records, and the previous ones of the StatefulSets the instance
	// still has.
	out := slices.Clone(records)
	for _, c := range prev {
		if slices.ContainsFunc(out, func(o tiledv1alpha1.CheckedImage) bool { return o.StatefulSet == c.StatefulSet }) ||
			!slices.ContainsFunc(targets, func(t imageTarget) bool { return t.name == c.StatefulSet }) {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b tiledv1alpha1.CheckedImage) int { return strings.Compare(a.StatefulSet, b.StatefulSet) })
	if out == nil {
		out = []tiledv1alpha1.CheckedImage{}
	}
	g.images.checked = out
	return nil
}

// imageCheckJob is what the cache shows of the check Job name and its pod (nil: no such Job).
func (r *TiledInstanceReconciler) imageCheckJob(ctx context.Context, cur *instanceState, name string) (*imageCheckJob, error) {
	j := &batchv1.Job{}
	if err := cur.c.Get(ctx, client.ObjectKey{Namespace: cur.ti.Namespace, Name: name}, j); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(j); ref == nil || ref.UID != cur.ti.UID || j.DeletionTimestamp != nil {
		return nil, nil
	}
	st, failure := jobConditions(j)
	out := &imageCheckJob{Name: name, Complete: st.Complete, Failed: st.Failed}
	var pods corev1.PodList
	if err := cur.c.List(ctx, &pods, client.InNamespace(cur.ti.Namespace), client.MatchingFields{podInstanceIndex: cur.ti.Name},
		client.MatchingLabels{batchv1.JobNameLabel: name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	if out.Complete {
		return out, nil
	}
	if p, _ := podstatus.Diagnose(pods.Items, time.Now(), DefaultProbeGrace); p != nil {
		out.Reason, out.Message = p.Reason, p.Message
	}
	if out.Failed {
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil {
					out.Message = strings.TrimSpace(fmt.Sprintf("exit code %d %s %s", t.ExitCode, t.Reason, podstatus.LastLine(t.Message)))
				}
			}
		}
		if out.Message == "" {
			out.Message = failure
		}
	}
	return out, nil
}

// liveImage reads the StatefulSet name past the cache (which keeps only the Tiled container's
// image) and returns the image of its container: a list of the one object, as templateDiff reads
// it (the operator's role lists StatefulSets and gets none).
func (r *TiledInstanceReconciler) liveImage(ctx context.Context, namespace, name, container string) (string, error) {
	var list appsv1.StatefulSetList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{"metadata.name": name}); err != nil {
		return "", fmt.Errorf("reading StatefulSet %s/%s to compare its image: %w", namespace, name, err)
	}
	if len(list.Items) != 1 {
		return "", nil // gone meanwhile: made again, never held
	}
	return containerImage(&list.Items[0], container), nil
}

// applyImageChecks applies the check Jobs the gate wants, each as the cache shows it, and records
// them applied, so that the prune keeps them; every other check Job of the instance is pruned.
func (r *TiledInstanceReconciler) applyImageChecks(ctx context.Context, cur *instanceState, g renderGate, rec *childset.Record) error {
	for _, ac := range g.images.jobs {
		p, err := applier.Prepare(ac)
		if err != nil {
			return err
		}
		current, err := cur.child(ctx, p.Key)
		if err != nil {
			return err
		}
		res, err := r.Applier.Apply(ctx, ac, current, applier.Group(client.ObjectKeyFromObject(cur.ti).String()))
		if err != nil {
			return err
		}
		rec.Applied[res.Key] = res.Generation
		if res.Recheck > 0 && (rec.Recheck == 0 || res.Recheck < rec.Recheck) {
			rec.Recheck = res.Recheck
		}
	}
	return nil
}

// imageCheckRunning says whether an instance's image check runs and has not failed: its
// ImageCheckPending condition is True with reason ImageCheckRunning (the check pod's own reasons,
// such as ImagePullBackOff, and ImageCheckFailed say it fails). The cluster's rollout counts such an
// instance against its budget (tiledcluster_plan.go).
func imageCheckRunning(ti *tiledv1alpha1.TiledInstance) bool {
	c := meta.FindStatusCondition(ti.Status.Conditions, ConditionImageCheckPending)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonImageCheckRunning
}
