package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func withBackup(ti *v1alpha1.TiledInstance, b *v1alpha1.BackupSpec) *v1alpha1.TiledInstance {
	ti.Spec.Backup = b
	return ti
}

var (
	claimBackup = &v1alpha1.BackupSpec{Schedule: "30 2 * * *", TimeZone: "America/New_York",
		Retention: &v1alpha1.BackupRetention{Count: ptr.To[int32](14), Days: ptr.To[int32](30)},
		Claim:     &v1alpha1.BackupClaimTarget{ClaimName: "facility-backups"}}
	s3Backup = &v1alpha1.BackupSpec{Schedule: "@daily", S3: &v1alpha1.BackupS3Target{
		Endpoint: "https://s3.facility.org", Bucket: "tiled", Prefix: "nsls2/backups", Region: "eu-west-1",
		CredentialsSecret: v1alpha1.LocalObjectReference{Name: "s3-backup"}, CACertificateSecret: &v1alpha1.LocalObjectReference{Name: "s3-ca"}}}
)

// TestBackupGolden: the backup CronJob to a claim and to S3 (an external database), and the
// bootstrap Job restoring a new instance, against testdata/backup-*.yaml (-update rewrites them).
func TestBackupGolden(t *testing.T) {
	managed := Inputs{SecretData: secretData}
	external := Inputs{SecretData: secretData, ExternalSecretKeys: []string{"uri", ExternalKeyStorageURI, ExternalKeyAuthURI}, ToolsImage: goldenTools}
	for _, tc := range []struct {
		name string
		obj  func() (any, error)
	}{
		{"cronjob-claim", func() (any, error) { return BackupCronJob(withBackup(singleUserManaged(), claimBackup), managed) }},
		{"cronjob-s3-external", func() (any, error) { return BackupCronJob(withBackup(oidcExternal(), s3Backup), external) }},
		{"upgrade-backup-claim", func() (any, error) {
			return LifecycleJob(withBackup(singleUserManaged(), claimBackup), upgradeOnTarget(withBackup(singleUserManaged(), claimBackup), managed, StepBackup))
		}},
		{"upgrade-backup-s3-external", func() (any, error) {
			return LifecycleJob(withBackup(oidcExternal(), s3Backup), upgradeOnTarget(withBackup(oidcExternal(), s3Backup), external, StepBackup))
		}},
		{"upgrade-restore-claim", func() (any, error) {
			return LifecycleJob(withBackup(singleUserManaged(), claimBackup), upgradeOnTarget(withBackup(singleUserManaged(), claimBackup), managed, StepRestore))
		}},
		{"bootstrap", func() (any, error) {
			b := *claimBackup
			b.RestoreFrom = "latest"
			in := managed
			in.Lifecycle = &Lifecycle{Stopped: true, Step: &Step{Kind: StepBootstrap, Backup: "latest", FromVersion: "0.2.20"}, ToolsImage: goldenTools}
			return LifecycleJob(withBackup(singleUserManaged(), &b), in)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, err := tc.obj()
			g.Expect(err).NotTo(HaveOccurred())
			// The program is dbtool.sh, tested on its own (render/conformance): the golden file
			// shows where it goes, not its text.
			var pod *corev1ac.PodSpecApplyConfiguration
			switch o := obj.(type) {
			case *batchv1ac.CronJobApplyConfiguration:
				pod = o.Spec.JobTemplate.Spec.Template.Spec
			case *batchv1ac.JobApplyConfiguration:
				pod = o.Spec.Template.Spec
			}
			g.Expect(pod.Containers[0].Command[2]).To(Equal(DBTool))
			pod.Containers[0].Command[2] = "<dbtool.sh>"
			b, err := yaml.Marshal(obj)
			g.Expect(err).NotTo(HaveOccurred())
			got := string(b)
			path := filepath.Join("testdata", "backup-"+tc.name+".yaml")
			if *update {
				g.Expect(os.WriteFile(path, []byte(got), 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(path)
			g.Expect(err).NotTo(HaveOccurred(), "run go test ./render -update to create it")
			g.Expect(got).To(Equal(string(want)))
		})
	}
}

func cronEnv(c *batchv1ac.CronJobApplyConfiguration) map[string]string {
	out := map[string]string{}
	for _, e := range c.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env {
		if e.Value != nil {
			out[*e.Name] = *e.Value
		} else {
			out[*e.Name] = "secret:" + *e.ValueFrom.SecretKeyRef.Name + "/" + *e.ValueFrom.SecretKeyRef.Key
		}
	}
	return out
}

func TestBackupCronJob(t *testing.T) {
	in := Inputs{SecretData: secretData}
	for _, tc := range []struct {
		name  string
		b     *v1alpha1.BackupSpec
		in    Inputs
		check func(g Gomega, c *batchv1ac.CronJobApplyConfiguration)
	}{
		{"no backup: none", nil, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) { g.Expect(c).To(BeNil()) }},
		{"restoreFrom without a target (refused at admission): none", &v1alpha1.BackupSpec{RestoreFrom: "latest"}, in,
			func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) { g.Expect(c).To(BeNil()) }},
		{"a claim: its schedule, time zone, retention, the directory of the instance", claimBackup, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) {
			g.Expect(*c.Name).To(Equal("nsls2-csx-backup"))
			g.Expect(*c.Spec.Schedule).To(Equal("30 2 * * *"))
			g.Expect(*c.Spec.TimeZone).To(Equal("America/New_York"))
			g.Expect(*c.Spec.Suspend).To(BeFalse())
			g.Expect(*c.Spec.ConcurrencyPolicy).To(Equal(batchv1.ForbidConcurrent))
			expectTryAgainOnly(g, jobOf(g, batchv1ac.Job("x", "y").WithSpec(c.Spec.JobTemplate.Spec)).Spec)
			env := cronEnv(c)
			g.Expect(env).To(HaveKeyWithValue("RETAIN_COUNT", "14"))
			g.Expect(env).To(HaveKeyWithValue("RETAIN_DAYS", "30"))
			g.Expect(env).To(HaveKeyWithValue("TARGET", "dir"))
			g.Expect(env).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled-backups/beamlines/nsls2-csx"))
			g.Expect(env).To(HaveKeyWithValue("TILED_VERSION", "0.2.20"))
			g.Expect(c.Spec.JobTemplate.Spec.Template.Spec.Volumes).To(ContainElement(*claimVolume("target", "facility-backups", false)))
			g.Expect(c.Spec.JobTemplate.Labels).To(HaveKeyWithValue(v1alpha1.LabelStep, LabelStepScheduledBackup))
			g.Expect(c.Spec.JobTemplate.Spec.Template.Labels).To(HaveKeyWithValue(v1alpha1.LabelAppInstance, "nsls2-csx"))
		}},
		{"no schedule: suspended, daily", &v1alpha1.BackupSpec{Claim: claimBackup.Claim}, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) {
			g.Expect(*c.Spec.Schedule).To(Equal("@daily"))
			g.Expect(*c.Spec.Suspend).To(BeTrue())
			g.Expect(cronEnv(c)).To(HaveKeyWithValue("RETAIN_COUNT", "7"))
			g.Expect(cronEnv(c)).NotTo(HaveKey("RETAIN_DAYS"))
		}},
		{"suspend: suspended", &v1alpha1.BackupSpec{Schedule: "@hourly", Suspend: ptr.To(true), Claim: claimBackup.Claim}, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) {
			g.Expect(*c.Spec.Suspend).To(BeTrue())
		}},
		{"an upgrade checks or backs up the databases: suspended", claimBackup,
			Inputs{SecretData: secretData, Lifecycle: &Lifecycle{ServingImage: oldImage, SuspendBackups: true, Step: &Step{Kind: StepCheck, Image: newImage}}},
			func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) { g.Expect(*c.Spec.Suspend).To(BeTrue()) }},
		{"an upgrade's step that neither stops Tiled nor suspends backups: not suspended", claimBackup,
			Inputs{SecretData: secretData, Lifecycle: &Lifecycle{ServingImage: oldImage, Step: &Step{Kind: StepCheck, Image: newImage}}},
			func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) { g.Expect(*c.Spec.Suspend).To(BeFalse()) }},
		{"Tiled stopped (a restore or a migration): suspended", claimBackup,
			Inputs{SecretData: secretData, Lifecycle: &Lifecycle{Stopped: true, Step: &Step{Kind: StepBootstrap, Backup: "latest"}}},
			func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) { g.Expect(*c.Spec.Suspend).To(BeTrue()) }},
		{"a path in the claim", &v1alpha1.BackupSpec{Claim: &v1alpha1.BackupClaimTarget{ClaimName: "nfs", Path: "tiled/prod"}}, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) {
			g.Expect(cronEnv(c)).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled/prod/beamlines/nsls2-csx"))
		}},
		{"S3: endpoint, bucket, prefix of the instance, region, credentials, CA", s3Backup, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) {
			env := cronEnv(c)
			g.Expect(env).To(HaveKeyWithValue("TARGET", "s3"))
			g.Expect(env).To(HaveKeyWithValue("S3_ENDPOINT", "https://s3.facility.org"))
			g.Expect(env).To(HaveKeyWithValue("S3_BUCKET", "tiled"))
			g.Expect(env).To(HaveKeyWithValue("S3_PREFIX", "nsls2/backups/beamlines/nsls2-csx"))
			g.Expect(env).To(HaveKeyWithValue("S3_REGION", "eu-west-1"))
			g.Expect(env).To(HaveKeyWithValue(S3KeyAccessKeyID, "secret:s3-backup/"+S3KeyAccessKeyID))
			g.Expect(env).To(HaveKeyWithValue(S3KeySecretAccessKey, "secret:s3-backup/"+S3KeySecretAccessKey))
			g.Expect(env).To(HaveKeyWithValue("CURL_CA_BUNDLE", "/etc/tiled-operator/s3-ca/ca.crt"))
			g.Expect(c.Spec.JobTemplate.Spec.Template.Spec.Volumes).To(ContainElement(*corev1ac.Volume().WithName("s3-ca").
				WithSecret(corev1ac.SecretVolumeSource().WithSecretName("s3-ca").WithItems(corev1ac.KeyToPath().WithKey(S3KeyCA).WithPath(S3KeyCA)))))
		}},
		{"S3 defaults: prefix and region", &v1alpha1.BackupSpec{S3: &v1alpha1.BackupS3Target{Endpoint: "http://s3:7070", Bucket: "b",
			CredentialsSecret: v1alpha1.LocalObjectReference{Name: "c"}}}, in, func(g Gomega, c *batchv1ac.CronJobApplyConfiguration) {
			g.Expect(cronEnv(c)).To(HaveKeyWithValue("S3_PREFIX", "tiled-backups/beamlines/nsls2-csx"))
			g.Expect(cronEnv(c)).To(HaveKeyWithValue("S3_REGION", "us-east-1"))
			g.Expect(cronEnv(c)).NotTo(HaveKey("CURL_CA_BUNDLE"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := BackupCronJob(withBackup(singleUserManaged(), tc.b), tc.in)
			g.Expect(err).NotTo(HaveOccurred())
			tc.check(g, c)
			o, err := Render(withBackup(singleUserManaged(), tc.b), tc.in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(o.BackupCronJob).To(Equal(c), "Render carries the same CronJob")
		})
	}
}

func TestBackupTarget(t *testing.T) {
	g := NewWithT(t)
	g.Expect(BackupTarget(singleUserManaged())).To(BeEmpty())
	g.Expect(BackupTarget(withBackup(singleUserManaged(), claimBackup))).To(Equal("claim:facility-backups/tiled-backups/beamlines/nsls2-csx"))
	g.Expect(BackupTarget(withBackup(singleUserManaged(), s3Backup))).To(Equal("s3://tiled/nsls2/backups/beamlines/nsls2-csx at https://s3.facility.org"))
}

func TestBootstrapJob(t *testing.T) {
	g := NewWithT(t)
	b := *claimBackup
	b.RestoreFrom = "20261203T023000Z"
	in := Inputs{SecretData: secretData, Lifecycle: &Lifecycle{Stopped: true, Step: &Step{Kind: StepBootstrap, Backup: b.RestoreFrom, FromVersion: "0.2.20"}}}
	j, err := LifecycleJob(withBackup(singleUserManaged(), &b), in)
	g.Expect(err).NotTo(HaveOccurred())
	c := j.Spec.Template.Spec.Containers[0]
	g.Expect(c.Command).To(Equal([]string{"sh", "-c", DBTool, "dbtool.sh", "restore"}))
	env := map[string]string{}
	for _, e := range c.Env {
		if e.Value != nil {
			env[*e.Name] = *e.Value
		}
	}
	g.Expect(env).To(HaveKeyWithValue("BACKUP", b.RestoreFrom))
	g.Expect(env).To(HaveKeyWithValue("RESTORE_IF_EMPTY", "1"))
	g.Expect(env).To(HaveKeyWithValue("TILED_VERSION", "0.2.20"))
	g.Expect(env).To(HaveKeyWithValue("BACKUP_ROOT", "/target/tiled-backups/beamlines/nsls2-csx"))
	g.Expect(j.Labels[v1alpha1.LabelStep]).To(Equal(string(StepBootstrap)))
	// Tiled does not run while the restore does.
	sts, err := StatefulSet(withBackup(singleUserManaged(), &b), in, "h")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*sts.Spec.Replicas).To(BeZero())
	// Without a target the step cannot render.
	_, err = LifecycleJob(singleUserManaged(), in)
	g.Expect(err).To(MatchError(ContainSubstring("spec.backup: a claim or s3 target is required")))
	// An external database without a tools image cannot either.
	ext := withBackup(oidcExternal(), claimBackup)
	_, err = BackupCronJob(ext, Inputs{SecretData: secretData, ExternalSecretKeys: []string{"uri"}})
	g.Expect(err).To(MatchError(ContainSubstring("no PostgreSQL image")))
}

// targetBackup is the golden upgrade's backup on spec.backup's target.
const targetBackup = "20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20"

// upgradeOnTarget is in with the Lifecycle of the upgrade's backup or restore step on spec.backup's
// target (the old image serving; Tiled stopped for the restore).
func upgradeOnTarget(ti *v1alpha1.TiledInstance, in Inputs, kind StepKind) Inputs {
	s := &Step{Kind: kind, Backup: targetBackup, Target: BackupTarget(ti)}
	if kind == StepBackup {
		s.FromVersion = "0.2.14"
	}
	in.Lifecycle = &Lifecycle{ServingImage: oldImage, Stopped: kind == StepRestore, SuspendBackups: kind == StepBackup, Step: s, ToolsImage: goldenTools}
	return in
}

// TestUpgradeJobsOnTarget: the upgrade's backup and restore on spec.backup's target run dbtool.sh as
// the CronJob's Jobs do (the same target, environment and retention), with the upgrade's backup
// named, its version recorded, and no backup claim; the Job keeps its step's name, labels and
// annotation.
func TestUpgradeJobsOnTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *v1alpha1.BackupSpec
	}{{"claim", claimBackup}, {"s3", s3Backup}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ti := withBackup(singleUserManaged(), tc.b)
			in := Inputs{SecretData: secretData}
			cj, err := BackupCronJob(ti, in)
			g.Expect(err).NotTo(HaveOccurred())
			scheduled := cj.Spec.JobTemplate.Spec.Template.Spec
			cronEnv := cronEnv(cj)
			for _, kind := range []StepKind{StepBackup, StepRestore} {
				in := upgradeOnTarget(ti, in, kind)
				j, err := LifecycleJob(ti, in)
				g.Expect(err).NotTo(HaveOccurred())
				job := jobOf(g, j)
				g.Expect(job.Name).To(Equal(in.Lifecycle.Step.JobName(ti, in)))
				g.Expect(job.Labels).To(HaveKeyWithValue(v1alpha1.LabelStep, string(kind)))
				g.Expect(job.Annotations).To(HaveKeyWithValue(AnnotationBackup, targetBackup))
				pod := job.Spec.Template.Spec
				c := pod.Containers[0]
				g.Expect(c.Name).To(Equal(string(kind)))
				g.Expect(c.Command).To(Equal([]string{"sh", "-c", DBTool, "dbtool.sh", string(kind)}))
				g.Expect(*scheduled.Containers[0].Image).To(Equal(c.Image), "the scheduled backups' image")
				env := map[string]string{}
				for _, e := range c.Env {
					if e.ValueFrom != nil {
						env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
					} else {
						env[e.Name] = e.Value
					}
				}
				g.Expect(env).To(HaveKeyWithValue("BACKUP", targetBackup))
				g.Expect(env).NotTo(HaveKey("RESTORE_IF_EMPTY"), "a restore replaces the databases the migration changed")
				for k, v := range cronEnv {
					switch k {
					case "TILED_VERSION":
						if kind == StepBackup {
							g.Expect(env).To(HaveKeyWithValue(k, "0.2.14"), "the version the databases are at")
						} else {
							g.Expect(env).NotTo(HaveKey(k))
						}
					case "RETAIN_COUNT", "RETAIN_DAYS":
						if kind == StepBackup {
							g.Expect(env).To(HaveKeyWithValue(k, v), "the scheduled backups' retention")
						} else {
							g.Expect(env).NotTo(HaveKey(k))
						}
					default:
						g.Expect(env).To(HaveKeyWithValue(k, v), "the scheduled backups' target and databases")
					}
				}
				var volumes []string
				for _, v := range pod.Volumes {
					volumes = append(volumes, v.Name)
					if v.PersistentVolumeClaim != nil {
						g.Expect(v.PersistentVolumeClaim.ClaimName).NotTo(Equal("nsls2-csx-backups"), "not the backup claim")
					}
				}
				var want []string
				for _, v := range scheduled.Volumes {
					want = append(want, *v.Name)
				}
				g.Expect(volumes).To(Equal(want))
				o, err := Render(ti, in)
				g.Expect(err).NotTo(HaveOccurred())
				for _, claim := range o.Claims {
					g.Expect(*claim.Name).NotTo(Equal(o.Names.BackupClaim), "no backup claim")
				}
			}
		})
	}
}

// TestUpgradeJobTargetMismatch: a step on a target spec.backup no longer names is not rendered (the
// upgrade stalls or begins the backup again before it would be).
func TestUpgradeJobTargetMismatch(t *testing.T) {
	g := NewWithT(t)
	ti := withBackup(singleUserManaged(), claimBackup)
	in := upgradeOnTarget(ti, Inputs{SecretData: secretData}, StepRestore)
	_, err := LifecycleJob(withBackup(singleUserManaged(), s3Backup), in)
	g.Expect(err).To(MatchError(ContainSubstring("is on claim:facility-backups/tiled-backups/beamlines/nsls2-csx, and spec.backup names \"s3://")))
	_, err = LifecycleJob(singleUserManaged(), in)
	g.Expect(err).To(MatchError(ContainSubstring(`and spec.backup names ""`)))
}

// TestRestoreInPlaceJobs: a restore in place's steps are the upgrade's steps on the target, with
// Jobs of their own per request; its backup prunes nothing (it must not prune the backup it is about
// to restore), and its restore refuses a backup from a newer Tiled than the one that serves.
func TestRestoreInPlaceJobs(t *testing.T) {
	g := NewWithT(t)
	ti := withBackup(singleUserManaged(), claimBackup)
	envOf := func(in Inputs) map[string]string {
		j, err := LifecycleJob(ti, in)
		g.Expect(err).NotTo(HaveOccurred())
		env := map[string]string{}
		for _, e := range jobOf(g, j).Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		return env
	}
	upgradeBackup := upgradeOnTarget(ti, Inputs{SecretData: secretData}, StepBackup)
	keep := upgradeOnTarget(ti, Inputs{SecretData: secretData}, StepBackup)
	s := *keep.Lifecycle.Step
	s.Request, s.Keep = "r1", true
	keep.Lifecycle = &Lifecycle{Step: &s, SuspendBackups: true, ToolsImage: goldenTools}
	g.Expect(envOf(upgradeBackup)).To(HaveKey("RETAIN_COUNT"))
	g.Expect(envOf(keep)).NotTo(HaveKey("RETAIN_COUNT"))
	g.Expect(envOf(keep)).NotTo(HaveKey("RETAIN_DAYS"))
	g.Expect(s.JobName(ti, keep)).NotTo(Equal(upgradeBackup.Lifecycle.Step.JobName(ti, upgradeBackup)), "a request's Job is its own")

	upgradeRestore := upgradeOnTarget(ti, Inputs{SecretData: secretData}, StepRestore)
	r := *upgradeRestore.Lifecycle.Step
	r.Request, r.FromVersion = "r1", "0.2.20"
	restore := Inputs{SecretData: secretData, Lifecycle: &Lifecycle{Stopped: true, Step: &r, ToolsImage: goldenTools}}
	g.Expect(envOf(restore)).To(HaveKeyWithValue("TILED_VERSION", "0.2.20"))
	g.Expect(envOf(restore)).NotTo(HaveKey("RESTORE_IF_EMPTY"), "the databases are replaced")
	g.Expect(envOf(upgradeRestore)).NotTo(HaveKey("TILED_VERSION"), "the upgrade's restore is as it was")
	r2 := r
	r2.Request = "r2"
	g.Expect(r.JobName(ti, restore)).NotTo(Equal(r2.JobName(ti, restore)), "the same backup restored again is another Job")
}

func TestPreRestoreBackupName(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 12, 7, 4, 30, 0, 0, time.FixedZone("EST", -5*3600))
	n := PreRestoreBackupName(at)
	g.Expect(n).To(Equal("20261207T093000Z-pre-restore"))
	g.Expect(n).To(MatchRegexp(restoreFromPattern), "spec.backup.restoreFrom names it")
	when, ok := BackupTime(n)
	g.Expect(ok).To(BeTrue())
	g.Expect(when).To(Equal(at.UTC()))
	_, ok = BackupTime("20261207T093000Z-pre-restorex")
	g.Expect(ok).To(BeFalse())
}

func TestPreUpgradeBackupName(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 12, 2, 22, 15, 0, 0, time.FixedZone("EST", -5*3600))
	n := PreUpgradeBackupName(at, "0.2.14", "0.2.20")
	g.Expect(n).To(Equal("20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20"))
	g.Expect(n).To(MatchRegexp(restoreFromPattern), "spec.backup.restoreFrom names it")
	when, ok := BackupTime(n)
	g.Expect(ok).To(BeTrue())
	g.Expect(when).To(Equal(at.UTC()))
	// Listed and pruned by the time it began: after an older scheduled backup, before a newer one.
	g.Expect(n > "20261203T023000Z").To(BeTrue())
	g.Expect(n < "20261203T031501Z").To(BeTrue())

	odd := PreUpgradeBackupName(at, "", "0.3.0a12.dev4+g1234abcd.d20261203")
	g.Expect(odd).To(Equal("20261203T031500Z-pre-upgrade-unknown-to-0.3.0a12.dev4_g"))
	g.Expect(len(PreUpgradeBackupName(at, strings.Repeat("9", 40), strings.Repeat("8", 40)))).To(BeNumerically("<=", 64))
	g.Expect(odd).To(MatchRegexp(restoreFromPattern))

	for _, name := range []string{"20261203T023000Z", "20261203T031500Z-pre-upgrade-0.2.14-to-0.2.20"} {
		_, ok := BackupTime(name)
		g.Expect(ok).To(BeTrue(), name)
	}
	for _, name := range []string{"", "latest", "pre-upgrade-20261203-031500", "20261203T023000Zx", "2026120T023000Z"} {
		_, ok := BackupTime(name)
		g.Expect(ok).To(BeFalse(), name)
	}
}

// restoreFromPattern is spec.backup.restoreFrom's.
var restoreFromPattern = func() string {
	b, err := os.ReadFile(filepath.Join("..", "apis", "v1alpha1", "template_types.go"))
	if err != nil {
		panic(err)
	}
	i := strings.Index(string(b), "RestoreFrom string")
	j := strings.LastIndex(string(b)[:i], "validation:Pattern=`")
	p := string(b)[j+len("validation:Pattern=`"):]
	end, _, _ := strings.Cut(p, "`")
	return end
}()
