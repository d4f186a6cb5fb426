package main

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// provisioner stands in for a cluster's storage provisioner, as a static one would: for every
// PersistentVolumeClaim that waits for a volume (no volumeName), it creates a PersistentVolume of
// the claim's class, size and access modes, pre-bound to the claim; kube-controller-manager's
// persistentvolume-binder then binds the pair, and the claim's status changes as in a real cluster.
// The volumes are hostPath volumes no kubelet ever mounts. It runs in the harness, under the
// harness's User-Agent, so that its requests are not counted as the operator's.
type provisioner struct {
	c     client.Client
	queue workqueue.TypedRateLimitingInterface[client.ObjectKey]
	mu    sync.Mutex
	done  map[client.ObjectKey]bool
	cache cache.Cache
}

func startProvisioner(ctx context.Context, c client.Client, informers cache.Cache) error {
	p := &provisioner{c: c, cache: informers, done: map[client.ObjectKey]bool{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[client.ObjectKey]())}
	inf, err := informers.GetInformer(ctx, &corev1.PersistentVolumeClaim{})
	if err != nil {
		return err
	}
	enqueue := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Spec.VolumeName == "" {
			p.queue.Add(client.ObjectKeyFromObject(pvc))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		go func() {
			for {
				key, shutdown := p.queue.Get()
				if shutdown {
					return
				}
				if err := p.provision(ctx, key); err != nil {
					p.queue.AddRateLimited(key)
				} else {
					p.queue.Forget(key)
				}
				p.queue.Done(key)
			}
		}()
	}
	go func() { <-ctx.Done(); p.queue.ShutDown() }()
	return nil
}

func (p *provisioner) provision(ctx context.Context, key client.ObjectKey) error {
	p.mu.Lock()
	seen := p.done[key]
	p.mu.Unlock()
	if seen {
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := p.cache.Get(ctx, key, pvc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
		return nil
	}
	size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + string(pvc.UID)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/bench-volumes/" + string(pvc.UID)}},
		},
	}
	if pvc.Spec.VolumeMode != nil {
		pv.Spec.VolumeMode = pvc.Spec.VolumeMode
	}
	if err := p.c.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("provisioning a volume for %s: %w", key, err)
	}
	p.mu.Lock()
	p.done[key] = true
	p.mu.Unlock()
	return nil
}
