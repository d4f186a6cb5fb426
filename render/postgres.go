package render

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

const (
	pgMount = "/var/lib/postgresql/data"
	// pgData is a subdirectory of the volume: initdb refuses a non-empty directory, and a fresh
	// volume's root may hold lost+found.
	pgData = pgMount + "/pgdata"
	// postgresInitKey is the script the postgres image runs once, when it initializes PGDATA.
	postgresInitKey = "10-tiled-databases.sql"
)

// PostgresInitSQL creates the storage and auth databases beside the catalog database that
// POSTGRES_DB creates. The auth database is created even without OIDC, so that switching to OIDC
// later needs no manual step.
func PostgresInitSQL() string {
	return fmt.Sprintf("CREATE DATABASE %s OWNER %s;\nCREATE DATABASE %s OWNER %s;\n",
		StorageDatabase, DatabaseUser, AuthDatabase, DatabaseUser)
}

// Postgres returns the managed PostgreSQL objects (init ConfigMap, Service, StatefulSet), or nils
// when the database is external.
func Postgres(ti *v1alpha1.TiledInstance, in Inputs) (*corev1ac.ConfigMapApplyConfiguration, *corev1ac.ServiceApplyConfiguration, *appsv1ac.StatefulSetApplyConfiguration) {
	db := ti.Spec.Database
	if db == nil || db.Managed == nil {
		return nil, nil, nil
	}
	m := db.Managed
	n := in.names(ti)
	labels := Labels(ti, ComponentDatabase)
	sel := SelectorLabels(ti, ComponentDatabase)

	cm := corev1ac.ConfigMap(n.PostgresInit, ti.Namespace).
		WithLabels(labels).
		WithData(map[string]string{postgresInitKey: PostgresInitSQL()})

	svc := corev1ac.Service(n.Postgres, ti.Namespace).
		WithLabels(labels).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(sel).
			WithPorts(corev1ac.ServicePort().WithName("postgresql").WithPort(PostgresPort).
				WithTargetPort(intstr.FromString("postgresql")).WithProtocol(corev1.ProtocolTCP)))

	image := m.Image
	// pg_isready over TCP: the image's first-start initialisation runs on a socket-only server, so the
	// probes pass only once the real server accepts connections. The startup probe checks every second
	// (up to five minutes for initdb), so that the database is Ready about a second after it accepts
	// connections; then readiness every five seconds (unready 15 s into an outage) and liveness, which
	// the startup probe holds back, every twenty.
	isReady := func() *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithExec(corev1ac.ExecAction().
			WithCommand("pg_isready", "-h", "127.0.0.1", "-U", DatabaseUser, "-d", CatalogDatabase))
	}
	startup := isReady().WithPeriodSeconds(1).WithTimeoutSeconds(5).WithFailureThreshold(300)
	ready := isReady().WithPeriodSeconds(5).WithTimeoutSeconds(5).WithFailureThreshold(3)
	live := isReady().WithPeriodSeconds(20).WithTimeoutSeconds(5).WithFailureThreshold(6)
	c := corev1ac.Container().
		WithName("postgres").
		WithImage(image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithPorts(corev1ac.ContainerPort().WithName("postgresql").WithContainerPort(PostgresPort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(
			corev1ac.EnvVar().WithName("POSTGRES_USER").WithValue(DatabaseUser),
			corev1ac.EnvVar().WithName("POSTGRES_DB").WithValue(CatalogDatabase),
			secretEnv("POSTGRES_PASSWORD", n.Secret, SecretKeyDatabasePassword),
			corev1ac.EnvVar().WithName("PGDATA").WithValue(pgData),
		).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("pgdata").WithMountPath(pgMount),
			corev1ac.VolumeMount().WithName("run").WithMountPath("/var/run/postgresql"),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
			corev1ac.VolumeMount().WithName("init").WithMountPath("/docker-entrypoint-initdb.d").WithReadOnly(true),
		).
		WithResources(resources(m.Resources)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithStartupProbe(startup).
		WithReadinessProbe(ready).
		WithLivenessProbe(live).
		WithSecurityContext(restrictedContainerSecurityContext())

	podSpec := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(podIdentity{uid: RunAsUser, gid: RunAsUser, fsGroup: RunAsUser})).
		WithContainers(c).
		WithVolumes(
			claimVolume("pgdata", n.DatabaseClaim, false),
			corev1ac.Volume().WithName("run").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("init").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(n.PostgresInit)),
		)
	databasePlacement(podSpec, m)
	sts := appsv1ac.StatefulSet(n.Postgres, ti.Namespace).
		WithLabels(labels).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(1).
			WithServiceName(n.Postgres).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(podSpec)))
	return cm, svc, sts
}

// databasePlacement adds what every pod on the managed database's image takes from its spec (the
// database's, and the upgrade's backup and restore Jobs'): pull secrets, node selector, tolerations.
func databasePlacement(podSpec *corev1ac.PodSpecApplyConfiguration, m *v1alpha1.ManagedDatabase) {
	podPlacement(podSpec, m.ImagePullSecrets, m.NodeSelector, m.Tolerations)
}

// podPlacement adds pull secrets, a node selector and tolerations to a pod of the managed database or
// the managed streaming cache (Tiled's own pods have placement, which takes more).
func podPlacement(podSpec *corev1ac.PodSpecApplyConfiguration, secrets []v1alpha1.LocalObjectReference, nodeSelector map[string]string, tolerations []corev1.Toleration) {
	if len(secrets) > 0 {
		podSpec.WithImagePullSecrets(pullSecrets(secrets)...)
	}
	if len(nodeSelector) > 0 {
		podSpec.WithNodeSelector(nodeSelector)
	}
	for i := range tolerations {
		podSpec.WithTolerations(toleration(tolerations[i]))
	}
}
