package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
)

// markDependenciesReady simulates the StatefulSet controller and the kubelet for the managed
// dependencies of the instance (its PostgreSQL and, when it streams through one, its streaming
// cache): each reports every replica ready at its current generation. A change of the Tiled pod
// template waits for them (dependencies before dependants, controllers/tiledinstance_dependencies.go),
// so a test that changes it on a serving instance makes them ready first, as they are on a node.
func markDependenciesReady(t *testing.T, g Gomega, ns, instance string) {
	n := fleet.NamesOf(getInstance(t, g, ns, instance))
	for _, name := range []string{n.Postgres, n.Cache} {
		if exists(t, &appsv1.StatefulSet{}, ns, name) {
			markReady(t, g, ns, name)
		}
	}
}

// passImageChecks plays the kubelet for the pods of the image check Jobs in ns that have not ended
// (controllers/tiledinstance_imagecheck.go: a new PostgreSQL or cache image is run once before its
// StatefulSet changes): each one's program ends with exit code 0, and the job controller completes
// its Job. It returns how many it passed.
func passImageChecks(t *testing.T, g Gomega, ns string) int {
	var pods corev1.PodList
	g.Expect(env.Client.List(ctxT(t), &pods, client.InNamespace(ns), client.MatchingLabels{tiledv1alpha1.LabelAppComponent: render.ComponentImageCheck})).To(Succeed())
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		c := p.Spec.Containers[0]
		started := metav1.NewTime(time.Now().Add(-time.Second))
		setPodStatus(t, g, p, corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: metav1.Now(),
			}},
		}}})
		n++
	}
	return n
}
