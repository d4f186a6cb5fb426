package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
)

// annotationInstantiate marks a Job created by hand from a CronJob, as kubectl create job --from sets it.
const annotationInstantiate = "cronjob.kubernetes.io/instantiate"

// clientFor is the client of the commands that read the live cluster with typed objects (backup,
// backups): client-go's kinds and the operator's, able to watch. Tests replace it.
var clientFor = func(config *genericclioptions.ConfigFlags) (client.WithWatch, error) {
	cfg, err := config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// liveClient is the namespace the command works in (--namespace, else the kubeconfig's) and a
// client of the cluster.
func liveClient(config *genericclioptions.ConfigFlags) (string, client.WithWatch, error) {
	ns, _, err := namespaceOf(config)
	if err != nil {
		return "", nil, err
	}
	c, err := clientFor(config)
	return ns, c, err
}

// clock is what ages are measured against; tests fix it.
var clock = time.Now

type backupOptions struct {
	*options
	wait    bool
	timeout time.Duration
}

func newBackupCommand(opts *options) *cobra.Command {
	o := &backupOptions{options: opts, timeout: 30 * time.Minute}
	cmd := &cobra.Command{
		Use:   "backup INSTANCE",
		Short: "Take a backup of an instance's databases now",
		Long: `Take a backup of a TiledInstance's databases now, as its schedule would: create a Job from the
instance's backup CronJob, exactly as "kubectl create job --from=cronjob/<instance>-backup" does.
The operator creates that CronJob when spec.backup sets a target (claim or s3), with or without a
schedule. The Job is named <cronjob>-manual-<unix seconds> (cut to 63 characters), carries the
labels and annotations of the CronJob's jobTemplate and cronjob.kubernetes.io/instantiate=manual,
and is controlled by the CronJob: the operator records its result in the instance's status.backup
as it records a scheduled backup's. Its name is printed.

With --wait, the command then waits until the Job completes or fails, at most --timeout, and
prints the backup's name, size and how long the dumps took, from the manifest the backup's pod
leaves as its termination message. A failed backup prints the pod's termination message (the
error) and exits 1; so does a timeout, which leaves the Job running.

INSTANCE is the TiledInstance's name (nsls2-chx) or, when no TiledInstance has that name, its
short name (chx). The command gets the CronJob and creates the Job; with --wait it also watches the
Job and lists its pods. It reads the TiledInstance only to say why there is no CronJob.`,
		Example: `  # Take a backup of chx now
  kubectl tiled backup nsls2-chx -n nsls2

  # Take one before a risky change, and wait for it (at most 10 minutes)
  kubectl tiled backup chx -n nsls2 --wait --timeout 10m`,
		ValidArgsFunction: completeInstances(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf(cmd, "expected INSTANCE, got %d argument(s)", len(args))
			}
			if cmd.Flags().Changed("timeout") && !o.wait {
				return usageErrorf(cmd, "--timeout is how long --wait waits: give --wait too")
			}
			if o.timeout <= 0 {
				return usageErrorf(cmd, "--timeout must be positive, got %s", o.timeout)
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Wait until the backup Job completes or fails, and print the backup's result.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", o.timeout, "How long --wait waits for the Job to finish (it keeps running after).")
	return cmd
}

func (o *backupOptions) run(ctx context.Context, instance string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ns, c, err := liveClient(o.config)
	if err != nil {
		return err
	}
	cj, instanceName, err := backupCronJob(ctx, c, ns, instance)
	if err != nil {
		return err
	}
	ti := &v1alpha1.TiledInstance{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: instanceName}, ti); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if err := backupRefusal(ti); err != nil {
			return err
		}
	}
	job := jobFromCronJob(cj, time.Now())
	if err := c.Create(ctx, job); err != nil {
		return fmt.Errorf("creating a backup Job from CronJob %s/%s: %w", ns, cj.Name, err)
	}
	fmt.Fprintf(o.streams.Out, "job.batch/%s created\n", job.Name)
	if !o.wait {
		return nil
	}

	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	done, err := waitForJob(waitCtx, c, job)
	if err != nil {
		if waitCtx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("timed out after %s waiting for job.batch/%s to finish; it keeps running (kubectl get job %s -n %s)",
				o.timeout, job.Name, job.Name, ns)
		}
		return err
	}
	// Without the right to list pods, the Job's condition and the instance's status tell what they can.
	pods, _ := jobPods(ctx, c, done)
	if failed := jobCondition(done, batchv1.JobFailed); failed != nil {
		return backupFailure(done, failed, pods)
	}
	if m := manifestOf(pods); m != nil {
		fmt.Fprintf(o.streams.Out, "backup %s: %s (%d bytes) in %ds\n", m.Name, humanBytes(m.bytes()), m.bytes(), m.Seconds)
		return nil
	}
	// The pod is gone (or left no manifest): the operator's record of the Job, if it has one yet.
	ti = &v1alpha1.TiledInstance{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: instanceName}, ti); err == nil && ti.Status.Backup != nil {
		if l := ti.Status.Backup.Last; l != nil && l.Job == done.Name && l.Result == "Succeeded" {
			fmt.Fprintf(o.streams.Out, "backup %s: %s (%d bytes) in %ds\n", l.Name, humanBytes(l.Bytes), l.Bytes, l.Seconds)
			return nil
		}
	}
	fmt.Fprintf(o.streams.Out, "job.batch/%s complete; its pod left no manifest (kubectl tiled backups %s -n %s lists the backups)\n",
		done.Name, instanceName, ns)
	return nil
}

// backupRefusal says why a backup of ti taken now would be wrong, nil when it may be taken: while
// an upgrade or a restore in place changes its databases (the operator suspends the scheduled
// backups then, and takes the backup the step needs itself: a dump beside it would race the
// migration or the restore, and its pruning could delete the backup the step restores), and while
// its catalog is lost (the database is empty or not the one it had: the dump would be of nothing,
// and its pruning could delete the backups that would restore it). An upgrade that failed and was
// undone (the old version serves again) and a restore that ended do not refuse.
func backupRefusal(ti *v1alpha1.TiledInstance) error {
	id := ti.Namespace + "/" + ti.Name
	if u := ti.Status.Upgrade; u != nil && u.Phase != v1alpha1.UpgradeFailed {
		return fmt.Errorf("TiledInstance %s is upgrading from %s to %s (status.upgrade.phase %s): its backups wait until the upgrade ends, and the upgrade takes its own backup before it migrates; take one after it (kubectl tiled status %s -n %s)",
			id, cmp.Or(u.FromVersion, u.FromImage), cmp.Or(u.ToVersion, u.ToImage), u.Phase, ti.Name, ti.Namespace)
	}
	if r := ti.Status.InPlaceRestore; r != nil {
		switch r.Phase {
		case v1alpha1.InPlaceRestoreBackingUp, v1alpha1.InPlaceRestoreStopping, v1alpha1.InPlaceRestoreRestoring, v1alpha1.InPlaceRestoreStarting:
			return fmt.Errorf("TiledInstance %s is being restored in place (status.inPlaceRestore.phase %s): its backups wait until the restore ends, and the restore takes its own backup first; take one after it (kubectl tiled status %s -n %s)",
				id, r.Phase, ti.Name, ti.Namespace)
		}
	}
	if l := ti.Status.CatalogLost; l != nil && l.Phase != v1alpha1.CatalogLostRestored {
		return fmt.Errorf("TiledInstance %s has lost its catalog (status.catalogLost.phase %s): a backup now would dump the database that replaced it, and its pruning could delete the backups that restore it; restore first (kubectl tiled status %s -n %s names the backup)",
			id, l.Phase, ti.Name, ti.Namespace)
	}
	return nil
}

// backupCronJob gets the backup CronJob of instance (a TiledInstance's name, else a short name) in
// ns, and the name of its TiledInstance. When there is none, the error says why: no such instance, no
// backup target, or the operator has not created it.
func backupCronJob(ctx context.Context, c client.Client, ns, instance string) (*batchv1.CronJob, string, error) {
	get := func(instance string) (*batchv1.CronJob, error) {
		cj := &batchv1.CronJob{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.For(ns, instance).BackupCronJob}, cj)
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, err
		case cj.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue:
			return nil, fmt.Errorf("CronJob %s/%s is not the operator's backup CronJob (it has no label %s=%s)",
				ns, cj.Name, v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue)
		}
		return cj, nil
	}
	cj, err := get(instance)
	if err != nil {
		return nil, "", err
	}
	if cj != nil {
		return cj, cmp.Or(cj.Labels[v1alpha1.LabelAppInstance], instance), nil
	}
	ti, err := liveInstance(ctx, c, ns, instance)
	if err != nil {
		return nil, "", err
	}
	if ti.Name != instance {
		if cj, err := get(ti.Name); err != nil || cj != nil {
			return cj, ti.Name, err
		}
	}
	if !render.HasBackupTarget(ti) {
		return nil, "", fmt.Errorf("TiledInstance %s/%s has no backup target: its spec.backup sets neither claim nor s3, so the operator takes no backups of it", ns, ti.Name)
	}
	return nil, "", fmt.Errorf("TiledInstance %s/%s has a backup target but no backup CronJob (%s): the operator has not created it (yet); see kubectl describe tiledinstance %s -n %s",
		ns, ti.Name, names.For(ns, ti.Name).BackupCronJob, ti.Name, ns)
}

// openInstance is a live client of the configured cluster and the TiledInstance instance names in
// the configured namespace (liveInstance: its name, or its short name).
func openInstance(ctx context.Context, config *genericclioptions.ConfigFlags, instance string) (client.WithWatch, *v1alpha1.TiledInstance, error) {
	ns, c, err := liveClient(config)
	if err != nil {
		return nil, nil, err
	}
	ti, err := liveInstance(ctx, c, ns, instance)
	return c, ti, err
}

// liveInstance gets the TiledInstance named name in ns or, when there is none, the one whose short
// name (label tiled.blueskyproject.io/instance) it is.
func liveInstance(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.TiledInstance, error) {
	ti := &v1alpha1.TiledInstance{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ti)
	switch {
	case err == nil:
		return ti, nil
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	notFound := fmt.Errorf("TiledInstance %q not found in namespace %q", name, ns)
	if len(validation.IsValidLabelValue(name)) > 0 {
		return nil, notFound
	}
	var list v1alpha1.TiledInstanceList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelInstance: name}); err != nil {
		return nil, err
	}
	switch len(list.Items) {
	case 0:
		return nil, notFound
	case 1:
		return &list.Items[0], nil
	}
	var found []string
	for _, in := range list.Items {
		found = append(found, in.Name)
	}
	slices.Sort(found)
	return nil, fmt.Errorf("instance %q is ambiguous in namespace %q: name one of %s", name, ns, strings.Join(found, ", "))
}

// manualJobName is the name of a Job created by hand from CronJob cronJob at t:
// <cronJob>-manual-<unix seconds>, shortened by names.Object to a label value's length (the Job's
// name labels its pods).
func manualJobName(cronJob string, t time.Time) string {
	return names.Object(cronJob, fmt.Sprintf("manual-%d", t.Unix()), names.MaxLabelValueLength)
}

// jobFromCronJob is the Job kubectl create job --from=cronjob/<name> creates (k8s.io/kubectl's
// createJobFromCronJob): the jobTemplate's spec, labels and annotations, the annotation
// cronjob.kubernetes.io/instantiate=manual (the template's own annotations win), and a controller
// reference to the CronJob without blockOwnerDeletion (which would need the cronjobs/finalizers
// permission).
func jobFromCronJob(cj *batchv1.CronJob, t time.Time) *batchv1.Job {
	annotations := map[string]string{annotationInstantiate: "manual"}
	maps.Copy(annotations, cj.Spec.JobTemplate.Annotations)
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        manualJobName(cj.Name, t),
			Namespace:   cj.Namespace,
			Labels:      maps.Clone(cj.Spec.JobTemplate.Labels),
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: batchv1.SchemeGroupVersion.String(),
				Kind:       "CronJob",
				Name:       cj.Name,
				UID:        cj.UID,
				Controller: ptr.To(true),
			}},
		},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
}

// jobCondition is the Job's condition of type t when it is true, else nil.
func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func jobFinished(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobComplete) != nil || jobCondition(job, batchv1.JobFailed) != nil
}

// waitForJob watches job until it completes or fails, and returns it then; the watch is opened
// again when the API server ends it.
func waitForJob(ctx context.Context, c client.WithWatch, job *batchv1.Job) (*batchv1.Job, error) {
	key := client.ObjectKeyFromObject(job)
	for {
		cur := &batchv1.Job{}
		if err := c.Get(ctx, key, cur); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("job.batch/%s was deleted before it finished", key.Name)
			}
			return nil, err
		}
		if jobFinished(cur) {
			return cur, nil
		}
		w, err := c.Watch(ctx, &batchv1.JobList{}, client.InNamespace(key.Namespace),
			client.MatchingFields{"metadata.name": key.Name},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: cur.ResourceVersion}})
		if err != nil {
			return nil, err
		}
		done, err := watchJob(ctx, w, key.Name)
		w.Stop()
		if done != nil || err != nil {
			return done, err
		}
		// The watch ended (its timeout, a compaction): get the Job again and watch from there, after
		// a pause, so that a server refusing watches is not asked in a loop.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// watchJob reads w until the Job named name finishes (returned), is deleted (an error), or the watch
// ends (nil, nil).
func watchJob(ctx context.Context, w watch.Interface, name string) (*batchv1.Job, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, nil
			}
			j, isJob := ev.Object.(*batchv1.Job)
			switch {
			case ev.Type == watch.Error:
				return nil, nil
			case !isJob || j.Name != name:
			case ev.Type == watch.Deleted:
				return nil, fmt.Errorf("job.batch/%s was deleted before it finished", name)
			case jobFinished(j):
				return j, nil
			}
		}
	}
}

// jobPods are the pods of job, newest first.
func jobPods(ctx context.Context, c client.Client, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		ref := metav1.GetControllerOf(&p)
		return job.UID != "" && ref != nil && ref.UID != job.UID
	})
	slices.SortStableFunc(out, func(a, b corev1.Pod) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), strings.Compare(b.Name, a.Name))
	})
	return out, nil
}

// terminations are the termination states of a pod's containers: the current and the last state
// of each init container, then of each container.
func terminations(p *corev1.Pod) []*corev1.ContainerStateTerminated {
	var out []*corev1.ContainerStateTerminated
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil {
				out = append(out, t)
			}
		}
	}
	return out
}

// backupManifest is a backup's manifest.json, which its pod leaves as its termination message.
// Fields it does not know are ignored.
type backupManifest struct {
	Name         string `json:"name"`
	Instance     string `json:"instance"`
	TiledVersion string `json:"tiledVersion"`
	Time         string `json:"time"`
	Seconds      int64  `json:"seconds"`
	// Bytes, when the manifest gives it, is the backup's size; else the files' sizes add up to it.
	Bytes *int64 `json:"bytes"`
	Files []struct {
		Database string `json:"database"`
		File     string `json:"file"`
		Bytes    int64  `json:"bytes"`
		SHA256   string `json:"sha256"`
	} `json:"files"`
}

func (m *backupManifest) bytes() int64 {
	if m.Bytes != nil {
		return *m.Bytes
	}
	var n int64
	for _, f := range m.Files {
		n += f.Bytes
	}
	return n
}

// parseManifest reads a termination message as a backup's manifest; nil when it is none.
func parseManifest(msg string) *backupManifest {
	m := &backupManifest{}
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), m); err != nil || m.Name == "" {
		return nil
	}
	return m
}

// manifestOf is the manifest the newest pod that left one left, nil when none did.
func manifestOf(pods []corev1.Pod) *backupManifest {
	for i := range pods {
		for _, t := range terminations(&pods[i]) {
			if t.ExitCode != 0 {
				continue
			}
			if m := parseManifest(t.Message); m != nil {
				return m
			}
		}
	}
	return nil
}

// backupFailure is the error of a failed backup Job: the termination message of the newest pod that
// failed with one, else the Job's Failed condition's.
func backupFailure(job *batchv1.Job, failed *batchv1.JobCondition, pods []corev1.Pod) error {
	head := fmt.Sprintf("backup failed: job.batch/%s", job.Name)
	if failed.Reason != "" {
		head += " (" + failed.Reason + ")"
	}
	msg := ""
	for i := range pods {
		for _, t := range terminations(&pods[i]) {
			if t.ExitCode != 0 && strings.TrimSpace(t.Message) != "" && msg == "" {
				msg = strings.TrimSpace(t.Message)
			}
		}
	}
	if msg == "" {
		msg = cmp.Or(failed.Message, "its pods left no message")
	}
	if strings.Contains(msg, "\n") {
		return errors.New(head + ":\n" + msg)
	}
	return errors.New(head + ": " + msg)
}

type backupsOptions struct {
	*options
	output string
}

func newBackupsCommand(opts *options) *cobra.Command {
	o := &backupsOptions{options: opts, output: "table"}
	cmd := &cobra.Command{
		Use:   "backups INSTANCE",
		Short: "List an instance's backups",
		Long: `List the whole backups of a TiledInstance on its backup target, newest first, as the operator
recorded them in its status.backup after the last backup's pruning (at most 100): NAME (the UTC
time the backup began, which "spec.backup.restoreFrom" takes; an upgrade's backup before its
migration adds -pre-upgrade-<from>-to-<to>), AGE and SIZE (of its dumps). Above
the table: the target, the schedule, the last backup (its result, when it ended, and why it failed),
the last whole one when the last failed, and the restore the instance's database started from.

-o json or -o yaml prints status.backup as it is. INSTANCE is the TiledInstance's name (nsls2-chx)
or, when no TiledInstance has that name, its short name (chx). Only the TiledInstance is read.`,
		Example: `  # chx's backups
  kubectl tiled backups nsls2-chx -n nsls2

  # The newest backup's name
  kubectl tiled backups chx -n nsls2 -o json | jq -r '.available[0].name'`,
		ValidArgsFunction: completeInstances(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf(cmd, "expected INSTANCE, got %d argument(s)", len(args))
			}
			if !slices.Contains([]string{"table", "json", "yaml"}, o.output) {
				return usageErrorf(cmd, "unable to match a printer suitable for the output format %q, allowed formats are: table,json,yaml", o.output)
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "Output format. One of: (table, json, yaml).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *backupsOptions) run(ctx context.Context, instance string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	_, ti, err := openInstance(ctx, o.config, instance)
	if err != nil {
		return err
	}
	st := ti.Status.Backup
	if st == nil {
		st = &v1alpha1.BackupStatus{}
	}
	if printed, err := printDocument(o.streams.Out, o.output, st); printed {
		return err
	}
	printBackups(o.streams.Out, ti, clock())
	return nil
}

// printBackups prints the instance's backups: the lines about the target, the schedule, the last
// backups and the restore, then the table of the whole backups, newest first.
func printBackups(w io.Writer, ti *v1alpha1.TiledInstance, now time.Time) {
	st := ti.Status.Backup
	if st == nil {
		st = &v1alpha1.BackupStatus{}
	}
	line := func(key, format string, args ...any) {
		fmt.Fprintf(w, "%-17s%s\n", key+":", fmt.Sprintf(format, args...))
	}
	at := func(t metav1.Time) string {
		return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), duration.HumanDuration(now.Sub(t.Time)))
	}
	spec := ti.Spec.Backup
	switch {
	case !render.HasBackupTarget(ti):
		line("Target", "none: spec.backup sets neither claim nor s3")
	case st.Target != "":
		line("Target", "%s", st.Target)
	default:
		// Not reported yet: where the operator will write them.
		line("Target", "%s", render.BackupTarget(ti))
	}
	if render.HasBackupTarget(ti) {
		schedule := "none: on demand only (kubectl tiled backup)"
		if spec.Schedule != "" {
			schedule = spec.Schedule
			if spec.TimeZone != "" {
				schedule += " (" + spec.TimeZone + ")"
			}
			if ptr.Deref(spec.Suspend, false) {
				schedule += ", suspended"
			}
		}
		line("Schedule", "%s", schedule)
	}
	record := func(key string, r *v1alpha1.BackupRecord) {
		switch {
		case r == nil:
		case r.Result == "Succeeded":
			line(key, "Succeeded %s at %s, %s in %ds", r.Name, at(r.CompletionTime), humanBytes(r.Bytes), r.Seconds)
		default:
			msg := cmp.Or(strings.TrimSpace(r.Message), "no message")
			if strings.Contains(msg, "\n") {
				indent := strings.Repeat(" ", 19)
				msg = "\n" + indent + strings.ReplaceAll(msg, "\n", "\n"+indent)
			} else {
				msg = " " + msg
			}
			line(key, "%s at %s, job %s:%s", r.Result, at(r.CompletionTime), r.Job, msg)
		}
	}
	record("Last backup", st.Last)
	if st.Last != nil && st.Last.Result != "Succeeded" {
		record("Last successful", st.LastSuccessful)
	}
	if r := st.Restore; r != nil {
		switch r.Result {
		case "Skipped":
			line("Restore", "Skipped %s at %s: the database already held a catalog, which was kept", r.Backup, at(r.CompletionTime))
		default:
			line("Restore", "%s %s at %s in %ds", r.Result, r.Backup, at(r.CompletionTime), r.Seconds)
		}
	}
	fmt.Fprintln(w)
	if len(st.Available) == 0 {
		if render.HasBackupTarget(ti) {
			fmt.Fprintf(w, "No backups of TiledInstance %s/%s on its target yet: kubectl tiled backup %s -n %s takes one now.\n",
				ti.Namespace, ti.Name, ti.Name, ti.Namespace)
		} else {
			fmt.Fprintf(w, "No backups of TiledInstance %s/%s: it has no backup target (set spec.backup.claim or spec.backup.s3).\n", ti.Namespace, ti.Name)
		}
		return
	}
	available := slices.Clone(st.Available)
	slices.SortStableFunc(available, func(a, b v1alpha1.AvailableBackup) int { return strings.Compare(b.Name, a.Name) })
	rows := [][3]string{{"NAME", "AGE", "SIZE"}}
	for _, b := range available {
		age := "<unknown>"
		if t, ok := render.BackupTime(b.Name); ok { // a scheduled backup's name, or an upgrade's
			age = duration.HumanDuration(now.Sub(t))
		}
		size := "-"
		if b.Bytes > 0 {
			size = humanBytes(b.Bytes)
		}
		rows = append(rows, [3]string{b.Name, age, size})
	}
	var width [2]int
	for _, r := range rows {
		width[0], width[1] = max(width[0], len(r[0])), max(width[1], len(r[1]))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-*s   %-*s   %s\n", width[0], r[0], width[1], r[1], r[2])
	}
}

// humanBytes is n in binary units, one decimal: 123 B, 12.3 MiB.
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, i := float64(n)/1024, 0
	for v >= 1023.95 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// completeInstances completes INSTANCE with the names of the TiledInstances of the namespace.
func completeInstances(o *options) cobra.CompletionFunc {
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
		var list v1alpha1.TiledInstanceList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, in := range list.Items {
			if strings.HasPrefix(in.Name, toComplete) {
				out = append(out, in.Name)
			}
		}
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
