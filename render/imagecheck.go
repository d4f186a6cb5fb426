package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
)

// ComponentImageCheck labels the image check Jobs (and their pods): a new image of the managed
// PostgreSQL or streaming cache StatefulSet run once, with a command that only proves it starts,
// before the StatefulSet's pod is replaced by one running it. Its own component: no NetworkPolicy
// lets it reach anything (it needs no network).
const ComponentImageCheck = "image-check"

// AnnotationCheckedImage on an image check Job names the image it checks, and
// AnnotationCheckedStatefulSet the StatefulSet that waits for it.
const (
	AnnotationCheckedImage       = "tiled.blueskyproject.io/checked-image"
	AnnotationCheckedStatefulSet = "tiled.blueskyproject.io/checked-statefulset"
)

// ImageCheckDeadlineSeconds bounds an image check Job: past it the Job fails (an image that takes
// longer to pull than this is reported as failing its check).
const ImageCheckDeadlineSeconds = 1800

// ImageCheck is a check of a new image of one of an instance's managed StatefulSets.
type ImageCheck struct {
	// Component is the StatefulSet's: ComponentDatabase (PostgreSQL) or ComponentCache (the
	// streaming cache).
	Component string
	// Image is the new image.
	Image string
}

// imageCheckCommand is what each component's check runs: the program its StatefulSet's pod runs,
// asked for its version (it starts, prints and exits; no data, no network, no root).
func imageCheckCommand(component string) ([]string, error) {
	switch component {
	case ComponentDatabase:
		return []string{"postgres", "--version"}, nil
	case ComponentCache:
		// The cache's pod runs redis-server (CacheScript); valkey's images install it too.
		return []string{"redis-server", "--version"}, nil
	}
	return nil, fmt.Errorf("no image check for component %q", component)
}

// ImageCheckJobName is the name of the Job that checks image for component: the component and a
// short hash of the image, so that each image is checked by a Job of its own (a new image is a new
// Job, never a retry of the old one).
func ImageCheckJobName(n names.Objects, c ImageCheck) string {
	sum := sha256.Sum256([]byte(c.Image))
	what := "dbcheck"
	if c.Component == ComponentCache {
		what = "cachecheck"
	}
	return n.Job(what, hex.EncodeToString(sum[:])[:8])
}

// ImageCheckJob renders the Job that checks c for the instance ti (expanded; n its objects' names):
// one pod, never retried, restricted like the StatefulSet's own, placed like it (its pull secrets,
// node selector and tolerations: the same registry credentials and the same nodes), running c's
// image with the component's version command. It mounts nothing and needs no network.
func ImageCheckJob(ti *v1alpha1.TiledInstance, n names.Objects, c ImageCheck) (*batchv1ac.JobApplyConfiguration, error) {
	cmd, err := imageCheckCommand(c.Component)
	if err != nil {
		return nil, err
	}
	if c.Image == "" {
		return nil, fmt.Errorf("no image to check for component %q", c.Component)
	}
	sts := n.Postgres
	var secrets []v1alpha1.LocalObjectReference
	var nodeSelector map[string]string
	var tolerations []corev1.Toleration
	switch c.Component {
	case ComponentDatabase:
		if db := ti.Spec.Database; db != nil && db.Managed != nil {
			secrets, nodeSelector, tolerations = db.Managed.ImagePullSecrets, db.Managed.NodeSelector, db.Managed.Tolerations
		}
	case ComponentCache:
		sts = n.Cache
		if m := managedCache(ti); m != nil {
			secrets, nodeSelector, tolerations = m.ImagePullSecrets, m.NodeSelector, m.Tolerations
		}
	}
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	container := corev1ac.Container().
		WithName("check").
		WithImage(c.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(cmd...).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(small).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainerSecurityContext())
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPodSecurityContext(podIdentity{uid: RunAsUser, gid: RunAsUser, fsGroup: RunAsUser})).
		WithContainers(container).
		WithRestartPolicy(corev1.RestartPolicyNever)
	podPlacement(pod, secrets, nodeSelector, tolerations)
	labels := Labels(ti, ComponentImageCheck)
	return batchv1ac.Job(ImageCheckJobName(n, c), ti.Namespace).
		WithLabels(labels).
		WithAnnotations(map[string]string{AnnotationCheckedImage: c.Image, AnnotationCheckedStatefulSet: sts}).
		WithSpec(batchv1ac.JobSpec().
			WithBackoffLimit(0). // a failed check is reported, never retried: a new image is a new Job
			WithActiveDeadlineSeconds(ImageCheckDeadlineSeconds).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(pod))), nil
}
