package render

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// Objects are all the objects of one instance. Optional ones are nil when not wanted; the
// controller prunes objects it owns that are no longer rendered.
type Objects struct {
	Names      names.Objects
	ConfigHash string

	ConfigMap       *corev1ac.ConfigMapApplyConfiguration
	Secret          *corev1ac.SecretApplyConfiguration
	MetricsSecret   *corev1ac.SecretApplyConfiguration // nil unless a ServiceMonitor is asked for
	StatefulSet     *appsv1ac.StatefulSetApplyConfiguration
	Service         *corev1ac.ServiceApplyConfiguration
	HeadlessService *corev1ac.ServiceApplyConfiguration
	Ingress         *networkingv1ac.IngressApplyConfiguration                  // nil unless enabled
	PDB             *policyv1ac.PodDisruptionBudgetApplyConfiguration          // nil unless replicas > 1
	Volumes         []Volume                                                   // NFS PersistentVolumes and claims
	Claims          []*corev1ac.PersistentVolumeClaimApplyConfiguration        // data and database claims (retention-bound)
	PostgresInit    *corev1ac.ConfigMapApplyConfiguration                      // nil for an external database
	PostgresService *corev1ac.ServiceApplyConfiguration                        // nil for an external database
	Postgres        *appsv1ac.StatefulSetApplyConfiguration                    // nil for an external database
	ServiceMonitor  *unstructured.Unstructured                                 // nil unless asked for and possible
	Job             *batchv1ac.JobApplyConfiguration                           // the upgrade step's Job, nil when none
	BackupCronJob   *batchv1ac.CronJobApplyConfiguration                       // nil without spec.backup's target
	CacheService    *corev1ac.ServiceApplyConfiguration                        // nil without a managed streaming cache
	Cache           *appsv1ac.StatefulSetApplyConfiguration                    // nil without a managed streaming cache
	HPA             *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration // nil unless autoscaling
	NetworkPolicies NetworkPolicies                                            // all nil unless spec.networkPolicy.enabled
}

// Render renders every object of the instance. The Secret holds in.SecretData as given: callers
// merge GenerateSecretData's values into the existing data first.
func Render(ti *v1alpha1.TiledInstance, in Inputs) (*Objects, error) {
	if db := ti.Spec.Database; db != nil && db.Managed != nil && db.Managed.Image == "" {
		return nil, fmt.Errorf("spec.database.managed.image is empty: the instance is not expanded")
	}
	cm, hash, err := ConfigMap(ti, in)
	if err != nil {
		return nil, err
	}
	sts, err := StatefulSet(ti, in, hash)
	if err != nil {
		return nil, err
	}
	o := &Objects{
		Names:           in.names(ti),
		ConfigHash:      hash,
		ConfigMap:       cm,
		Secret:          Secret(ti, in),
		MetricsSecret:   MetricsSecret(ti, in),
		StatefulSet:     sts,
		Service:         Service(ti, in),
		HeadlessService: HeadlessService(ti, in),
		Ingress:         Ingress(ti, in),
		PDB:             PodDisruptionBudget(ti, in),
		Volumes:         NFSVolumes(ti, in),
		Claims:          Claims(ti, in),
		ServiceMonitor:  ServiceMonitor(ti, in),
	}
	o.PostgresInit, o.PostgresService, o.Postgres = Postgres(ti, in)
	o.CacheService, o.Cache = StreamingCache(ti, in)
	o.HPA = HorizontalPodAutoscaler(ti, in)
	if o.NetworkPolicies, err = InstanceNetworkPolicies(ti, in); err != nil {
		return nil, err
	}
	if o.Job, err = LifecycleJob(ti, in); err != nil {
		return nil, err
	}
	if o.BackupCronJob, err = BackupCronJob(ti, in); err != nil {
		return nil, err
	}
	return o, nil
}

// All returns every rendered object, nil ones left out, in the order they are applied: the
// NetworkPolicies first (no database or cache pod is ever up without the policy that guards it), then
// what a pod needs (Secret, ConfigMap, claims, volumes) before the workloads that mount it. Each is a typed apply
// configuration, or *unstructured.Unstructured for the ServiceMonitor.
func (o *Objects) All() []any {
	var out []any
	add := func(v any, isNil bool) {
		if !isNil {
			out = append(out, v)
		}
	}
	for _, p := range o.NetworkPolicies.All() {
		add(p, false)
	}
	add(o.Secret, o.Secret == nil)
	add(o.MetricsSecret, o.MetricsSecret == nil)
	add(o.ConfigMap, o.ConfigMap == nil)
	for _, c := range o.Claims {
		add(c, c == nil)
	}
	for _, v := range o.Volumes {
		add(v.PersistentVolume, v.PersistentVolume == nil)
		add(v.PersistentVolumeClaim, v.PersistentVolumeClaim == nil)
	}
	add(o.PostgresInit, o.PostgresInit == nil)
	add(o.PostgresService, o.PostgresService == nil)
	add(o.Postgres, o.Postgres == nil)
	add(o.CacheService, o.CacheService == nil)
	add(o.Cache, o.Cache == nil)
	add(o.HeadlessService, o.HeadlessService == nil)
	add(o.Service, o.Service == nil)
	add(o.StatefulSet, o.StatefulSet == nil)
	add(o.Ingress, o.Ingress == nil)
	add(o.PDB, o.PDB == nil)
	add(o.HPA, o.HPA == nil)
	if o.ServiceMonitor != nil {
		add(o.ServiceMonitor, false)
	}
	add(o.Job, o.Job == nil)
	add(o.BackupCronJob, o.BackupCronJob == nil)
	return out
}
