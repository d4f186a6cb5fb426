package render

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The old and new images of the upgrade fixtures, the backup they take and the tools image the
// controller gives for an external database.
const (
	oldImage      = "ghcr.io/bluesky/tiled:0.2.14"
	newImage      = "ghcr.io/bluesky/tiled:0.2.20"
	goldenBackup  = "pre-upgrade-20261203-031500"
	goldenTools   = "docker.io/library/postgres:16"
	lifecycleStem = "lifecycle-"
)

// lifecycleIn is in with the Lifecycle of one step of the upgrade (the old image serving).
func lifecycleIn(in Inputs, stopped bool, step *Step) Inputs {
	in.Lifecycle = &Lifecycle{ServingImage: oldImage, Stopped: stopped, Step: step, BackupClaim: true, ToolsImage: goldenTools}
	return in
}

// lifecycleFixtures are the Jobs of every step for the managed-database fixture, and the backup of
// the external-database one.
func lifecycleFixtures() []fixture {
	managed := Inputs{SecretData: secretData}
	external := Inputs{SecretData: secretData, ExternalSecretKeys: []string{"uri", ExternalKeyStorageURI, ExternalKeyAuthURI}}
	return []fixture{
		{"check", singleUserManaged, lifecycleIn(managed, false, &Step{Kind: StepCheck, Image: newImage})},
		{"backup", singleUserManaged, lifecycleIn(managed, false, &Step{Kind: StepBackup, Backup: goldenBackup, FromVersion: "0.2.14"})},
		{"migrate", singleUserManaged, lifecycleIn(managed, true, &Step{Kind: StepMigrate, Image: newImage})},
		{"restore", singleUserManaged, lifecycleIn(managed, true, &Step{Kind: StepRestore, Backup: goldenBackup})},
		{"backup-external", oidcExternal, lifecycleIn(external, false, &Step{Kind: StepBackup, Backup: goldenBackup, FromVersion: "0.2.14"})},
	}
}

// jobYAML serializes a Job as objectsYAML does one object.
func jobYAML(j *batchv1ac.JobApplyConfiguration) ([]byte, error) {
	b, err := yaml.Marshal(j)
	if err != nil {
		return nil, err
	}
	return append([]byte("---\n"), b...), nil
}

// TestLifecycleGolden: the Job of each step, against testdata/lifecycle-<step>.yaml (go test
// ./render -update rewrites them, as TestGolden's).
func TestLifecycleGolden(t *testing.T) {
	for _, f := range lifecycleFixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			j, err := LifecycleJob(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(j).NotTo(BeNil())
			// dbtool.sh is tested on its own (render/conformance): the golden file shows where it
			// goes, not its text.
			shown, err := LifecycleJob(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			if cmd := shown.Spec.Template.Spec.Containers[0].Command; len(cmd) > 2 && cmd[2] == DBTool {
				cmd[2] = "<dbtool.sh>"
			}
			got, err := jobYAML(shown)
			g.Expect(err).NotTo(HaveOccurred())
			path := filepath.Join("testdata", lifecycleStem+f.name+".yaml")
			if *update {
				g.Expect(os.WriteFile(path, got, 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(path)
			g.Expect(err).NotTo(HaveOccurred(), "run go test ./render -update to create it")
			g.Expect(string(got)).To(Equal(string(want)))

			// Render carries the same Job, last.
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			all := o.All()
			g.Expect(all[len(all)-1]).To(Equal(j))
		})
	}
}

// jobOf converts a rendered Job into the core type.
func jobOf(g Gomega, j *batchv1ac.JobApplyConfiguration) batchv1.Job {
	b, err := json.Marshal(j)
	g.Expect(err).NotTo(HaveOccurred())
	var out batchv1.Job
	g.Expect(json.Unmarshal(b, &out)).To(Succeed())
	return out
}

// TestLifecycleJobs: what every step's Job holds, whatever the step.
func TestLifecycleJobs(t *testing.T) {
	for _, f := range lifecycleFixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := f.ti()
			j, err := LifecycleJob(ti, f.in)
			g.Expect(err).NotTo(HaveOccurred())
			job := jobOf(g, j)
			step := f.in.Lifecycle.Step
			g.Expect(job.Name).To(Equal(step.JobName(ti, f.in)))
			g.Expect(job.Namespace).To(Equal(ti.Namespace))
			expectTryAgainOnly(g, job.Spec)
			g.Expect(job.Spec.ActiveDeadlineSeconds).NotTo(BeNil())
			g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(JobDeadlineSeconds)))
			g.Expect(job.Spec.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
			for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
				g.Expect(labels).To(HaveKeyWithValue(v1alpha1.LabelStep, string(step.Kind)))
				g.Expect(labels).To(HaveKeyWithValue(v1alpha1.LabelAppComponent, ComponentJob))
				g.Expect(labels).To(HaveKeyWithValue(v1alpha1.LabelAppInstance, ti.Name))
				g.Expect(labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))
			}
			if step.Backup != "" {
				g.Expect(job.Annotations).To(HaveKeyWithValue(AnnotationBackup, step.Backup))
			} else {
				g.Expect(job.Annotations).NotTo(HaveKey(AnnotationBackup))
			}
			pod := job.Spec.Template.Spec
			g.Expect(pod.Containers).To(HaveLen(1))
			c := pod.Containers[0]
			g.Expect(c.Name).To(Equal(string(step.Kind)))
			g.Expect(c.TerminationMessagePolicy).To(Equal(corev1.TerminationMessageFallbackToLogsOnError))
			g.Expect(strings.Join(append(c.Command, c.Args...), " ")).NotTo(ContainSubstring("golden0"), "no secret in a command")
			g.Expect(restrictedViolations(g, &job.Spec.Template.ObjectMeta, &pod)).To(BeEmpty())

			switch step.Kind {
			case StepCheck, StepMigrate:
				g.Expect(c.Image).To(Equal(newImage), "the new image checks and migrates")
				g.Expect(c.Command[:3]).To(Equal([]string{"python", entrypointPath, map[StepKind]string{StepCheck: "revisions", StepMigrate: "migrate"}[step.Kind]}))
				mig, err := MigrateCommand(ti, f.in)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c.Command[3:]).To(Equal(mig[3:]), "the migrate init container's arguments")
			case StepBackup, StepRestore:
				want := goldenTools
				if db := ti.Spec.Database; db.Managed != nil {
					want = db.Managed.Image
				}
				g.Expect(c.Image).To(Equal(want), "PostgreSQL's own tools")
				g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "BACKUP", Value: step.Backup}))
				g.Expect(c.VolumeMounts).To(ContainElement(HaveField("MountPath", BackupMount)))
				var claims []string
				for _, v := range pod.Volumes {
					if v.PersistentVolumeClaim != nil {
						claims = append(claims, v.PersistentVolumeClaim.ClaimName)
					}
				}
				g.Expect(claims).To(Equal([]string{f.in.names(ti).BackupClaim}))
			}
		})
	}
}

func TestLifecycleNoStepNoJob(t *testing.T) {
	g := NewWithT(t)
	for _, in := range []Inputs{{}, {Lifecycle: &Lifecycle{ServingImage: oldImage, Stopped: true, BackupClaim: true}}} {
		j, err := LifecycleJob(singleUserManaged(), in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j).To(BeNil())
		o, err := Render(singleUserManaged(), in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(o.Job).To(BeNil())
	}
	_, err := LifecycleJob(singleUserManaged(), Inputs{Lifecycle: &Lifecycle{Step: &Step{Kind: "bogus"}}})
	g.Expect(err).To(MatchError(ContainSubstring("bogus")))
	ti := singleUserManaged()
	ti.Spec.Database = nil
	_, err = LifecycleJob(ti, Inputs{Lifecycle: &Lifecycle{Step: &Step{Kind: StepBackup, Backup: goldenBackup}}})
	g.Expect(err).To(MatchError(ContainSubstring("spec.database")))
}

// tiledContainer is the tiled container of the rendered StatefulSet (the first; the metrics sidecar,
// when there is one, follows it), and its migrate init container.
func tiledContainers(g Gomega, o *Objects) (server, migrate corev1.Container) {
	p := podTemplates(g, o)["tiled"]
	g.Expect(len(p.Spec.Containers)).To(BeNumerically(">=", 1))
	g.Expect(p.Spec.Containers[0].Name).To(Equal("tiled"))
	g.Expect(p.Spec.InitContainers).To(HaveLen(1))
	return p.Spec.Containers[0], p.Spec.InitContainers[0]
}

// TestLifecycleStatefulSet: the Tiled StatefulSet runs Lifecycle.ServingImage, with no replicas when
// Stopped; without a Lifecycle (or with no serving image) it runs spec.tiled.image.
func TestLifecycleStatefulSet(t *testing.T) {
	cases := []struct {
		name     string
		l        *Lifecycle
		image    string
		replicas int32
	}{
		{name: "no upgrade", image: newImage, replicas: 3},
		{name: "old image serving", l: &Lifecycle{ServingImage: oldImage}, image: oldImage, replicas: 3},
		{name: "stopped", l: &Lifecycle{ServingImage: oldImage, Stopped: true}, image: oldImage, replicas: 0},
		{name: "no serving image: the spec's", l: &Lifecycle{Stopped: true}, image: newImage, replicas: 0},
		{name: "a step does not change the StatefulSet", l: &Lifecycle{ServingImage: oldImage, Step: &Step{Kind: StepCheck, Image: newImage}}, image: oldImage, replicas: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := nfsScaled() // three replicas
			ti.Spec.Tiled.Autoscaling = nil
			g.Expect(ti.Spec.Tiled.Image).To(Equal(newImage))
			o, err := Render(ti, Inputs{SecretData: secretData, Lifecycle: tc.l})
			g.Expect(err).NotTo(HaveOccurred())
			server, migrate := tiledContainers(g, o)
			g.Expect(server.Image).To(Equal(tc.image))
			g.Expect(migrate.Image).To(Equal(tc.image))
			// The metrics sidecar (nfsScaled asks for a ServiceMonitor) runs the serving image too.
			sidecar := podTemplates(g, o)["tiled"].Spec.Containers[1]
			g.Expect(sidecar.Name).To(Equal(MetricsContainerName))
			g.Expect(sidecar.Image).To(Equal(tc.image))
			g.Expect(*o.StatefulSet.Spec.Replicas).To(Equal(tc.replicas))
		})
	}
}

// TestLifecycleBackupClaim: the backup claim is rendered only with BackupClaim, on the database's
// storage class and size; under the instance's retention policy like the other claims.
func TestLifecycleBackupClaim(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	ti.Spec.Database.Managed.StorageClassName = ptr.To("ssd")
	backupClaim := func(in Inputs) []string {
		o, err := Render(ti, in)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, c := range o.Claims {
			if *c.Name == o.Names.BackupClaim {
				out = append(out, *c.Name)
				g.Expect(c.Labels).To(HaveKeyWithValue(v1alpha1.LabelAppComponent, ComponentBackups))
				g.Expect(c.Annotations).To(HaveKeyWithValue(AnnotationRetention, "Retain"))
				g.Expect(*c.Spec.StorageClassName).To(Equal("ssd"))
				g.Expect(c.Spec.Resources.Requests.Storage().String()).To(Equal("20Gi"))
				g.Expect(c.Spec.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))
			}
		}
		return out
	}
	g.Expect(backupClaim(Inputs{})).To(BeEmpty())
	g.Expect(backupClaim(Inputs{Lifecycle: &Lifecycle{ServingImage: oldImage, Step: &Step{Kind: StepBackup, Backup: goldenBackup}}})).To(BeEmpty())
	g.Expect(backupClaim(Inputs{Lifecycle: &Lifecycle{BackupClaim: true}})).To(Equal([]string{"nsls2-csx-backups"}))

	// An external database: 10Gi on the default storage class.
	o, err := Render(oidcExternal(), Inputs{ExternalSecretKeys: []string{"uri", ExternalKeyAuthURI}, Lifecycle: &Lifecycle{BackupClaim: true}})
	g.Expect(err).NotTo(HaveOccurred())
	c := o.Claims[len(o.Claims)-1]
	g.Expect(*c.Name).To(Equal(o.Names.BackupClaim))
	g.Expect(c.Spec.StorageClassName).To(BeNil())
	g.Expect(c.Spec.Resources.Requests.Storage().String()).To(Equal("10Gi"))
}

// TestLifecycleJobNames: a new target or a new backup is a new Job (a Job's pod template cannot
// change); a name fits a label value even for the longest instance name.
func TestLifecycleJobNames(t *testing.T) {
	g := NewWithT(t)
	ti := singleUserManaged()
	in := Inputs{}
	name := func(s Step) string { return s.JobName(ti, in) }
	check := name(Step{Kind: StepCheck, Image: newImage})
	g.Expect(check).To(HavePrefix(ti.Name + "-check-"))
	g.Expect(name(Step{Kind: StepCheck, Image: newImage})).To(Equal(check), "stable")
	g.Expect(name(Step{Kind: StepCheck, Image: oldImage})).NotTo(Equal(check), "another image")
	g.Expect(name(Step{Kind: StepMigrate, Image: newImage})).NotTo(Equal(check), "another step")
	backup := name(Step{Kind: StepBackup, Backup: goldenBackup})
	g.Expect(backup).To(HavePrefix(ti.Name + "-backup-"))
	g.Expect(name(Step{Kind: StepBackup, Backup: "pre-upgrade-20261203-031501"})).NotTo(Equal(backup), "another backup")
	g.Expect(name(Step{Kind: StepBackup, Backup: goldenBackup, FromVersion: "0.2.15"})).To(Equal(backup), "the version is only recorded")
	g.Expect(name(Step{Kind: StepRestore, Backup: goldenBackup})).NotTo(Equal(backup))
	// On spec.backup's target: the target in the name, another target another Job; a step on the
	// backup claim keeps the name it had before targets existed.
	onTarget := name(Step{Kind: StepBackup, Backup: goldenBackup, Target: "claim:a/tiled-backups/beamlines/nsls2-csx"})
	g.Expect(onTarget).To(HavePrefix(ti.Name + "-backup-"))
	g.Expect(onTarget).NotTo(Equal(backup))
	g.Expect(name(Step{Kind: StepBackup, Backup: goldenBackup, Target: "claim:b/tiled-backups/beamlines/nsls2-csx"})).NotTo(Equal(onTarget), "another target")
	g.Expect(backup).To(Equal("nsls2-csx-backup-04cda4"), "as before targets (testdata/lifecycle-backup.yaml)")

	long := singleUserManaged()
	long.Name = strings.Repeat("x", 61) + "-y"
	g.Expect(long.Name).To(HaveLen(63))
	seen := map[string]bool{}
	for _, s := range []Step{
		{Kind: StepCheck, Image: newImage}, {Kind: StepCheck, Image: oldImage}, {Kind: StepMigrate, Image: newImage},
		{Kind: StepBackup, Backup: goldenBackup}, {Kind: StepRestore, Backup: goldenBackup},
	} {
		n := s.JobName(long, in)
		g.Expect(len(n)).To(BeNumerically("<=", 63), n)
		g.Expect(n).To(ContainSubstring("-"+string(s.Kind)+"-"), "the step still shows")
		g.Expect(seen).NotTo(HaveKey(n), "distinct")
		seen[n] = true
		j, err := LifecycleJob(long, Inputs{Lifecycle: &Lifecycle{Step: &s, ToolsImage: goldenTools}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*j.Name).To(Equal(n))
	}
}
