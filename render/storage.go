package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Volume is a PersistentVolume and the claim bound to it, for an NFS export. The restricted Pod
// Security Standard forbids inline nfs volumes, so the pod mounts the claim instead.
type Volume struct {
	PersistentVolume      *corev1ac.PersistentVolumeApplyConfiguration
	PersistentVolumeClaim *corev1ac.PersistentVolumeClaimApplyConfiguration
}

// nominalNFSSize is the capacity recorded on NFS volumes without a size; NFS does not enforce it.
var nominalNFSSize = resource.MustParse("1Gi")

func nfsVolume(ti *v1alpha1.TiledInstance, pvName, claimName string, nfs *v1alpha1.NFSVolumeSource,
	size resource.Quantity, mode corev1.PersistentVolumeAccessMode, readOnly bool, reclaim corev1.PersistentVolumeReclaimPolicy) Volume {
	src := corev1ac.NFSVolumeSource().WithServer(nfs.Server).WithPath(nfs.Path)
	if readOnly {
		src.WithReadOnly(true)
	}
	pv := corev1ac.PersistentVolume(pvName).
		WithLabels(Labels(ti, ComponentData)).
		WithSpec(corev1ac.PersistentVolumeSpec().
			WithCapacity(corev1.ResourceList{corev1.ResourceStorage: size}).
			WithAccessModes(mode).
			WithPersistentVolumeReclaimPolicy(reclaim).
			WithStorageClassName("").
			WithNFS(src).
			WithClaimRef(corev1ac.ObjectReference().
				WithAPIVersion("v1").WithKind("PersistentVolumeClaim").
				WithNamespace(ti.Namespace).WithName(claimName)))
	pvc := corev1ac.PersistentVolumeClaim(claimName, ti.Namespace).
		WithLabels(Labels(ti, ComponentData)).
		WithSpec(corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(mode).
			WithStorageClassName("").
			WithVolumeName(pvName).
			WithResources(corev1ac.VolumeResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceStorage: size})))
	return Volume{PersistentVolume: pv, PersistentVolumeClaim: pvc}
}

// NFSVolumes returns a PersistentVolume and claim for the NFS data volume (ReadWriteMany) and for
// each read-only mount on NFS (ReadOnlyMany, mounted read-only), in spec order. The volumes are
// Retain-ed: removing the operator's objects never touches the export's files.
func NFSVolumes(ti *v1alpha1.TiledInstance, in Inputs) []Volume {
	s := ti.Spec.Storage
	if s == nil {
		return nil
	}
	n := in.names(ti)
	var out []Volume
	if d := s.Data; d != nil && d.NFS != nil && d.ExistingClaimName == "" {
		out = append(out, nfsVolume(ti, n.DataVolume, n.DataClaim, d.NFS, quantity(d.Size, nominalNFSSize),
			corev1.ReadWriteMany, false, corev1.PersistentVolumeReclaimRetain))
	}
	for _, m := range s.ReadOnlyMounts {
		if m.NFS == nil || m.ExistingClaimName != "" {
			continue
		}
		out = append(out, nfsVolume(ti, n.ReadOnlyVolumeName(ti.Namespace, m.Name), n.ReadOnlyClaimName(m.Name), m.NFS,
			nominalNFSSize, corev1.ReadOnlyMany, true, corev1.PersistentVolumeReclaimRetain))
	}
	return out
}

// Claims returns the claims the operator creates on a storage class: the data volume's (unless it is
// on NFS or an existing claim) and the managed database's. Whether they outlive the instance is the
// retention policy's business (see Retained); they carry the annotation AnnotationRetention saying so.
func Claims(ti *v1alpha1.TiledInstance, in Inputs) []*corev1ac.PersistentVolumeClaimApplyConfiguration {
	n := in.names(ti)
	policy := string(v1alpha1.RetentionRetain)
	if !Retained(ti) {
		policy = string(v1alpha1.RetentionDelete)
	}
	ann := map[string]string{AnnotationRetention: policy}
	var out []*corev1ac.PersistentVolumeClaimApplyConfiguration
	var data *v1alpha1.DataVolume
	if s := ti.Spec.Storage; s != nil {
		data = s.Data
	}
	if data == nil || (data.NFS == nil && data.ExistingClaimName == "") {
		out = append(out, corev1ac.PersistentVolumeClaim(n.DataClaim, ti.Namespace).
			WithLabels(Labels(ti, ComponentData)).
			WithAnnotations(ann).
			WithSpec(claimSpec(data)))
	}
	if db := ti.Spec.Database; db != nil && db.Managed != nil {
		m := db.Managed
		spec := corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithResources(corev1ac.VolumeResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceStorage: quantity(m.Size, resource.MustParse("10Gi"))}))
		if m.StorageClassName != nil && *m.StorageClassName != "" {
			spec.WithStorageClassName(*m.StorageClassName)
		}
		out = append(out, corev1ac.PersistentVolumeClaim(n.DatabaseClaim, ti.Namespace).
			WithLabels(Labels(ti, ComponentDatabase)).
			WithAnnotations(ann).
			WithSpec(spec))
	}
	if l := in.Lifecycle; l != nil && l.BackupClaim {
		out = append(out, corev1ac.PersistentVolumeClaim(n.BackupClaim, ti.Namespace).
			WithLabels(Labels(ti, ComponentBackups)).
			WithAnnotations(ann).
			WithSpec(backupClaimSpec(ti)))
	}
	return out
}

// AnnotationRetention on a claim records the retention policy it was created under (Retain, Delete).
const AnnotationRetention = "tiled.blueskyproject.io/retention"
