package render

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// RunAsUser is the uid (and gid and fsGroup) the PostgreSQL pods run as, and the Tiled pods when
// their spec sets none (the built-in defaults set 999 too).
const RunAsUser int64 = 999

// DatabaseWaitSeconds bounds how long the migrate init container waits for the database to accept
// connections (logging a line every ten seconds) before it fails; a managed PostgreSQL normally takes
// seconds, a first start with initdb under load well under a minute.
const DatabaseWaitSeconds = 300

// entrypointPath is where the Tiled containers find entrypoint.py (the ConfigMap's EntrypointKey).
const entrypointPath = ConfigDir + "/" + EntrypointKey

// ServeCommand is the command of the Tiled container: `tiled serve config --host 0.0.0.0 --port 8000
// --scalable`, run inside entrypoint.py (see Entrypoint), which hands Tiled the API key and the
// connection checks first.
func ServeCommand() []string {
	return []string{"python", entrypointPath, "serve", "config", "--host", "0.0.0.0", "--port", fmt.Sprint(Port), "--scalable"}
}

// MigrateCommand is the command of the init container: entrypoint.py waits up to DatabaseWaitSeconds
// for the database, then, under a PostgreSQL advisory lock so that one replica at a time does it,
// creates or upgrades the catalog database and, when authentication keeps sessions in a database, the
// auth database. URIs reference secrets only as ${VAR}, which the entrypoint expands from the
// container's environment.
//
// `tiled catalog init --if-not-exists` is idempotent and stamps a new database at the latest
// revision, so it runs first and `upgrade-database` then migrates an older one; a failing upgrade
// fails the pod instead of being masked. `tiled admin initialize-database` refuses an initialized
// database and `tiled admin upgrade-database` an empty one, hence upgrade, else initialize, there.
func MigrateCommand(ti *v1alpha1.TiledInstance, in Inputs) ([]string, error) {
	u, err := uris(ti, in)
	if err != nil {
		return nil, err
	}
	cmd := []string{"python", entrypointPath, "migrate", "--wait", fmt.Sprint(DatabaseWaitSeconds), "--catalog", u.catalog}
	if u.auth != "" {
		cmd = append(cmd, "--auth", u.auth)
	}
	return cmd, nil
}

// restrictedContainerSecurityContext is the security context of every container; the uid and gids
// are the pod's (podSecurityContext).
func restrictedContainerSecurityContext() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithRunAsNonRoot(true).
		WithAllowPrivilegeEscalation(false).
		WithReadOnlyRootFilesystem(true).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

// podIdentity is the uid and groups of a pod.
type podIdentity struct {
	uid, gid, fsGroup int64
	supplemental      []int64
}

// tiledIdentity is the identity of the Tiled pods: the spec's, RunAsUser where it sets none.
func tiledIdentity(t *v1alpha1.TiledServerSpec) podIdentity {
	id := podIdentity{uid: RunAsUser, gid: RunAsUser, fsGroup: RunAsUser}
	if t.RunAsUser != nil {
		id.uid = *t.RunAsUser
	}
	if t.RunAsGroup != nil {
		id.gid = *t.RunAsGroup
	}
	if t.FSGroup != nil {
		id.fsGroup = *t.FSGroup
	}
	id.supplemental = t.SupplementalGroups
	return id
}

func restrictedPodSecurityContext(id podIdentity) *corev1ac.PodSecurityContextApplyConfiguration {
	sc := corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(id.uid).
		WithRunAsGroup(id.gid).
		WithFSGroup(id.fsGroup).
		WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
	if len(id.supplemental) > 0 {
		sc.WithSupplementalGroups(id.supplemental...)
	}
	return sc
}

// pullSecrets converts image pull secret references.
func pullSecrets(refs []v1alpha1.LocalObjectReference) []*corev1ac.LocalObjectReferenceApplyConfiguration {
	out := make([]*corev1ac.LocalObjectReferenceApplyConfiguration, 0, len(refs))
	for _, r := range refs {
		out = append(out, corev1ac.LocalObjectReference().WithName(r.Name))
	}
	return out
}

// applyConfiguration converts a core type to its apply configuration through JSON, which both
// share field for field (affinity, topology spread constraints).
func applyConfiguration[T any](in any) (*T, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, err
	}
	return out, nil
}

// placement adds what every pod on the Tiled image takes from spec.tiled (the server's and the
// upgrade's check and migrate Jobs'): pull secrets, node selector, tolerations, priority class,
// service account, affinity and topology spread constraints.
func placement(podSpec *corev1ac.PodSpecApplyConfiguration, t *v1alpha1.TiledServerSpec) error {
	if len(t.ImagePullSecrets) > 0 {
		podSpec.WithImagePullSecrets(pullSecrets(t.ImagePullSecrets)...)
	}
	if len(t.NodeSelector) > 0 {
		podSpec.WithNodeSelector(t.NodeSelector)
	}
	for i := range t.Tolerations {
		podSpec.WithTolerations(toleration(t.Tolerations[i]))
	}
	if t.PriorityClassName != "" {
		podSpec.WithPriorityClassName(t.PriorityClassName)
	}
	if t.ServiceAccountName != "" {
		podSpec.WithServiceAccountName(t.ServiceAccountName)
	}
	if t.Affinity != nil {
		a, err := applyConfiguration[corev1ac.AffinityApplyConfiguration](t.Affinity)
		if err != nil {
			return fmt.Errorf("spec.tiled.affinity: %w", err)
		}
		podSpec.WithAffinity(a)
	}
	for i := range t.TopologySpreadConstraints {
		c, err := applyConfiguration[corev1ac.TopologySpreadConstraintApplyConfiguration](&t.TopologySpreadConstraints[i])
		if err != nil {
			return fmt.Errorf("spec.tiled.topologySpreadConstraints[%d]: %w", i, err)
		}
		podSpec.WithTopologySpreadConstraints(c)
	}
	return nil
}

func secretEnv(name, secret, key string) *corev1ac.EnvVarApplyConfiguration {
	return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
		WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(secret).WithKey(key)))
}

// tiledEnv is the environment of the Tiled init and server containers: the operator's variables,
// then the spec's extra variables (which cannot replace the operator's).
func tiledEnv(ti *v1alpha1.TiledInstance, n names.Objects, in Inputs) []*corev1ac.EnvVarApplyConfiguration {
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(EnvConfig).WithValue(ConfigDir),
		corev1ac.EnvVar().WithName("HOME").WithValue("/tmp"),
		secretEnv(EnvSecretKeys, n.Secret, SecretKeySecretKeys),
	}
	if modeOf(ti) == authSingleUser {
		if apiKeyFromRef(ti) {
			r := ti.Spec.Auth.SingleUserAPIKey.SecretRef
			env = append(env, secretEnv(EnvAPIKey, r.Name, keyOr(r.Key, SecretKeyAPIKey)))
		} else {
			env = append(env, secretEnv(EnvAPIKey, n.Secret, SecretKeyAPIKey))
		}
	} else {
		for _, p := range ti.Spec.Auth.OIDC.Providers {
			if r := p.ClientSecretRef; r != nil {
				env = append(env, secretEnv(oidcSecretEnv(p.Name), r.Name, keyOr(r.Key, "client-secret")))
			}
		}
	}
	if db := ti.Spec.Database; db != nil {
		switch {
		case db.Managed != nil:
			env = append(env,
				corev1ac.EnvVar().WithName(EnvDatabaseUser).WithValue(DatabaseUser),
				secretEnv(EnvDatabasePassword, n.Secret, SecretKeyDatabasePassword))
		case db.External != nil && db.External.URISecretRef != nil:
			r := db.External.URISecretRef
			env = append(env, secretEnv(EnvCatalogURI, r.Name, keyOr(r.Key, ExternalKeyURI)))
			if in.hasExternalKey(ExternalKeyStorageURI) {
				env = append(env, secretEnv(EnvStorageURI, r.Name, ExternalKeyStorageURI))
			}
			if in.hasExternalKey(ExternalKeyAuthURI) {
				env = append(env, secretEnv(EnvAuthURI, r.Name, ExternalKeyAuthURI))
			}
		}
	}
	env = append(env, cacheEnv(ti, n)...)
	reserved := map[string]bool{}
	for _, e := range env {
		reserved[*e.Name] = true
	}
	if t := ti.Spec.Tiled; t != nil {
		for _, e := range t.Env {
			if reserved[e.Name] {
				continue
			}
			ev := corev1ac.EnvVar().WithName(e.Name)
			switch {
			case e.Value != nil:
				ev.WithValue(*e.Value)
			case e.ValueFrom != nil:
				ev.WithValueFrom(envSource(e.ValueFrom))
			}
			env = append(env, ev)
		}
	}
	return env
}

func envSource(s *corev1.EnvVarSource) *corev1ac.EnvVarSourceApplyConfiguration {
	out := corev1ac.EnvVarSource()
	if r := s.SecretKeyRef; r != nil {
		sel := corev1ac.SecretKeySelector().WithName(r.Name).WithKey(r.Key)
		if r.Optional != nil {
			sel.WithOptional(*r.Optional)
		}
		out.WithSecretKeyRef(sel)
	}
	if r := s.ConfigMapKeyRef; r != nil {
		sel := corev1ac.ConfigMapKeySelector().WithName(r.Name).WithKey(r.Key)
		if r.Optional != nil {
			sel.WithOptional(*r.Optional)
		}
		out.WithConfigMapKeyRef(sel)
	}
	if r := s.FieldRef; r != nil {
		out.WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath(r.FieldPath))
	}
	if r := s.ResourceFieldRef; r != nil {
		rf := corev1ac.ResourceFieldSelector().WithContainerName(r.ContainerName).WithResource(r.Resource)
		if !r.Divisor.IsZero() {
			rf.WithDivisor(r.Divisor)
		}
		out.WithResourceFieldRef(rf)
	}
	return out
}

func keyOr(k, def string) string {
	if k != "" {
		return k
	}
	return def
}

func resources(r *corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	out := corev1ac.ResourceRequirements()
	if r == nil {
		return out
	}
	if len(r.Requests) > 0 {
		out.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		out.WithLimits(r.Limits)
	}
	return out
}

// healthProbe probes Tiled's /healthz (which answers without touching the database): the startup
// probe, so that start-up is judged on Tiled answering at all, and the liveness probe, so that a lost
// database or cache never restarts Tiled (a new process would not do better).
func healthProbe(period, failures int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/healthz").WithPort(intstr.FromString(PortName))).
		WithPeriodSeconds(period).
		WithTimeoutSeconds(5).
		WithFailureThreshold(failures)
}

// The readiness probe's timing, in one place. ready.py costs a Python start (without the site
// module), one catalog query through Tiled and, with streaming, one connection to the cache: 0.02
// CPU seconds of its own process (0.07 s under OIDC without anonymous access, where it imports
// asyncpg; the conformance suite logs it), plus Tiled's search and the kubelet's exec through the
// container runtime, paid by every Tiled pod every period. On the e2e node's two cores with tens of
// Tiled pods a period of 10 s keeps that to a few percent of one core (the managed caches' own
// exec probes run every 2 s), and a failure (two in a row, so that one slow answer under load does
// not take a pod out of its Service) is seen within 20 s; a repair within 10 s. ready.py bounds each of its network steps
// to 3 s and all of them to 8 s (render/ready.py STEP_SECONDS, BUDGET_SECONDS), so that it ends with
// its own line before the timeout; the kubelet's own timeout on exec probes is not enforced
// promptly, and says only "command timed out".
const (
	ReadyPeriodSeconds    = 10
	ReadyTimeoutSeconds   = 10
	ReadyFailureThreshold = 2
	readyPath             = ConfigDir + "/" + ReadyScriptKey
)

// ReadyCommand is the readiness probe's command: ready.py from the ConfigMap, run by the image's
// Python without the site module (-S: it needs only the standard library, and starts faster). No
// secret on it: ready.py reads the API key and the cache's password from the container's
// environment.
func ReadyCommand() []string { return []string{"python", "-S", readyPath} }

// readyProbe is the Tiled container's readiness probe: Tiled answers its catalog and reaches its
// streaming cache (ReadyScript).
func readyProbe() *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithExec(corev1ac.ExecAction().WithCommand(ReadyCommand()...)).
		WithPeriodSeconds(ReadyPeriodSeconds).
		WithTimeoutSeconds(ReadyTimeoutSeconds).
		WithFailureThreshold(ReadyFailureThreshold)
}

// servingReplicas is the Tiled StatefulSet's replicas: none while the upgrade procedure has Tiled
// stopped; else the spec's, or nil while an autoscaler sets them (the field is then left to it).
func servingReplicas(ti *v1alpha1.TiledInstance, in Inputs) *int32 {
	if stopped(in) {
		return ptr.To[int32](0)
	}
	if Autoscaled(ti) {
		return nil
	}
	return ptr.To(replicas(ti))
}

func replicas(ti *v1alpha1.TiledInstance) int32 {
	if t := ti.Spec.Tiled; t != nil && t.Replicas != nil {
		return *t.Replicas
	}
	return 1
}

// MaxReplicas is the most Tiled pods the instance runs: the autoscaler's maximum, or the replicas.
func MaxReplicas(ti *v1alpha1.TiledInstance) int32 {
	if Autoscaled(ti) {
		_, hi := AutoscalingBounds(ti)
		return hi
	}
	return replicas(ti)
}

// Retained reports whether the instance's data and database claims outlive it (the Retain policy,
// the default): the controller then applies them without an owner reference.
func Retained(ti *v1alpha1.TiledInstance) bool {
	return ti.Spec.Storage == nil || ti.Spec.Storage.Retention != v1alpha1.RetentionDelete
}

// StatefulSet returns the Tiled StatefulSet. configHash is the hash ConfigMap returned.
func StatefulSet(ti *v1alpha1.TiledInstance, in Inputs, configHash string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	n := in.names(ti)
	migrate, err := MigrateCommand(ti, in)
	if err != nil {
		return nil, err
	}
	t := ti.Spec.Tiled
	if t == nil {
		t = &v1alpha1.TiledServerSpec{}
	}
	image := servingImage(ti, in)
	if image == "" {
		// The version lives in one place, the expansion engine's built-in defaults.
		return nil, fmt.Errorf("spec.tiled.image is empty: the instance is not expanded")
	}
	pull := t.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	env := tiledEnv(ti, n, in)

	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		corev1ac.VolumeMount().WithName("data").WithMountPath(DataPath),
	}
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(n.ConfigMap)),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	var data *v1alpha1.DataVolume
	if s := ti.Spec.Storage; s != nil {
		data = s.Data
	}
	if data != nil && data.ExistingClaimName != "" {
		volumes = append(volumes, claimVolume("data", data.ExistingClaimName, false))
	} else {
		// The operator's own claim (see Claims), shared by every replica, so that the data outlives
		// the StatefulSet as the retention policy says and can be resized.
		volumes = append(volumes, claimVolume("data", n.DataClaim, false))
	}
	if s := ti.Spec.Storage; s != nil {
		for _, m := range s.ReadOnlyMounts {
			claim := m.ExistingClaimName
			if claim == "" {
				claim = n.ReadOnlyClaimName(m.Name)
			}
			vol := "ro-" + m.Name
			volumes = append(volumes, claimVolume(vol, claim, true))
			mounts = append(mounts, corev1ac.VolumeMount().WithName(vol).WithMountPath(mountPath(m)).WithReadOnly(true))
		}
	}

	serverCommand, serverEnv, serverMounts := ServeCommand(), env, mounts
	if Monitored(ti) {
		vol, mount := metricsVolumeAndMount()
		volumes = append(volumes, vol)
		serverCommand = MetricsServeCommand()
		serverEnv = withMetricsDir(env)
		serverMounts = append(append([]*corev1ac.VolumeMountApplyConfiguration{}, mounts...), mount)
	}

	initC := corev1ac.Container().
		WithName("migrate").
		WithImage(image).
		WithImagePullPolicy(pull).
		WithCommand(migrate...).
		WithEnv(env...).
		WithVolumeMounts(mounts[:2]...).
		WithResources(resources(t.Resources)).
		// The kubelet keeps the log's tail as the termination message of a failed container, so that
		// the instance's conditions can quote its last line without reading logs.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainerSecurityContext())
	server := corev1ac.Container().
		WithName("tiled").
		WithImage(image).
		WithImagePullPolicy(pull).
		WithCommand(serverCommand...).
		WithPorts(corev1ac.ContainerPort().WithName(PortName).WithContainerPort(Port).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(serverEnv...).
		WithVolumeMounts(serverMounts...).
		WithResources(resources(t.Resources)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		// Started within two seconds of answering, up to five minutes to start; then Ready while it
		// answers its catalog and reaches its cache (readyProbe).
		WithStartupProbe(healthProbe(2, 150)).
		WithReadinessProbe(readyProbe()).
		WithLivenessProbe(healthProbe(20, 3)).
		WithSecurityContext(restrictedContainerSecurityContext())

	podLabels := map[string]string{}
	for k, v := range t.PodLabels {
		podLabels[k] = v
	}
	for k, v := range Labels(ti, ComponentServer) {
		podLabels[k] = v
	}
	podAnn := map[string]string{}
	for k, v := range t.PodAnnotations {
		podAnn[k] = v
	}
	podAnn[ConfigHashAnnotation] = configHash
	if k, v, ok := BuildPodAnnotation(); ok {
		podAnn[k] = v
	}

	podSpec := corev1ac.PodSpec().
		WithEnableServiceLinks(false). // Service links would add TILED_* variables Tiled's settings read
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(tiledIdentity(t))).
		WithInitContainers(initC).
		WithContainers(server).
		WithVolumes(volumes...)
	if Monitored(ti) {
		podSpec.WithContainers(MetricsSidecar(n, image, pull))
	}
	if err := placement(podSpec, t); err != nil {
		return nil, err
	}

	spec := appsv1ac.StatefulSetSpec()
	if r := servingReplicas(ti, in); r != nil {
		spec.WithReplicas(*r)
	}
	spec.WithServiceName(n.HeadlessService).
		WithPodManagementPolicy(appsv1.ParallelPodManagement).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(ti, ComponentServer))).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(podLabels).
			WithAnnotations(podAnn).
			WithSpec(podSpec))
	return appsv1ac.StatefulSet(n.Tiled, ti.Namespace).
		WithLabels(Labels(ti, ComponentServer)).
		WithSpec(spec), nil
}

func toleration(t corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	out := corev1ac.Toleration()
	if t.Key != "" {
		out.WithKey(t.Key)
	}
	if t.Operator != "" {
		out.WithOperator(t.Operator)
	}
	if t.Value != "" {
		out.WithValue(t.Value)
	}
	if t.Effect != "" {
		out.WithEffect(t.Effect)
	}
	if t.TolerationSeconds != nil {
		out.WithTolerationSeconds(*t.TolerationSeconds)
	}
	return out
}

func claimVolume(name, claim string, readOnly bool) *corev1ac.VolumeApplyConfiguration {
	src := corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(claim)
	if readOnly {
		src.WithReadOnly(true)
	}
	return corev1ac.Volume().WithName(name).WithPersistentVolumeClaim(src)
}

var defaultSize = resource.MustParse("10Gi")

func claimSpec(d *v1alpha1.DataVolume) *corev1ac.PersistentVolumeClaimSpecApplyConfiguration {
	size := defaultSize
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	var class *string
	if d != nil {
		size = quantity(d.Size, size)
		if len(d.AccessModes) > 0 {
			modes = d.AccessModes
		}
		class = d.StorageClassName
	}
	s := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(modes...).
		WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: size}))
	if class != nil && *class != "" {
		s.WithStorageClassName(*class)
	}
	return s
}

// quantity parses s (validated as a quantity by the CRD), falling back to def when empty or invalid.
func quantity(s string, def resource.Quantity) resource.Quantity {
	if q, err := resource.ParseQuantity(s); err == nil && s != "" {
		return q
	}
	return def
}
