// Command runlocal is what `make run` runs when there is no cluster to talk to: it starts a local
// control plane (kube-apiserver, etcd and kube-controller-manager, built by hack/controlplane.sh),
// installs the CRDs, applies the samples, prints the kubeconfig and the commands to try next, and runs
// the operator against it until interrupted. Ctrl-C stops the operator and every process it started.
// The control plane has no node, so no pod starts; its banner says so, and that `make cluster`
// starts a real one.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bluesky/tiled-operator/operator"
	"github.com/bluesky/tiled-operator/test/support/testenv"
	"github.com/bluesky/tiled-operator/webhooks"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(os.Getenv("TILED_OPERATOR_DEBUG") != "")))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	fmt.Println("Starting a local control plane (kube-apiserver, etcd, kube-controller-manager)...")
	env, err := testenv.Start(testenv.Options{ControllerManager: true})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the local control plane...")
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "error: stopping the control plane: %v\n", err)
		}
	}()

	samples := filepath.Join(testenv.RepoRoot(), "config", "samples")
	// The admission webhooks run too, with the manager's own CA (its Secret in the namespace
	// "default"), which it rotates and publishes in webhook configurations that call it on loopback.
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	mgr, err := operator.NewManager(env.Config, operator.ManagerOptions{
		MetricsBindAddress:     envOr("METRICS_BIND_ADDRESS", "127.0.0.1:8080"),
		HealthProbeBindAddress: envOr("HEALTH_PROBE_BIND_ADDRESS", "127.0.0.1:8081"),
		Webhooks: &webhooks.Options{
			Host: "127.0.0.1", Port: port, CertMode: webhooks.CertSelf,
			Certs: webhooks.CertOptions{URL: fmt.Sprintf("https://127.0.0.1:%d", port)},
		},
	})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()
	// The samples go in once the webhooks answer, so the standalone instance is expanded at admission.
	// Their readiness check dials the webhook server only once it has a certificate to present: each
	// handshake before would be refused, and logged by the server.
	if err := waitForWebhooks(ctx, env.Client, mgr.Webhooks.Ready, errc); err != nil {
		return err
	}
	var applyErr error
	for range 50 {
		if applyErr = applySamples(ctx, env.Client, samples); applyErr == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // the webhook configurations are being published
	}
	if applyErr != nil {
		return applyErr
	}
	fmt.Printf(`
The local control plane is up, with the CRDs and the samples of %s applied.
Use it from another shell:

  export KUBECONFIG=%s
  kubectl get tiled
  kubectl get tiledprofiles
  kubectl get ti -l tiled.blueskyproject.io/cluster=nsls2
  kubectl explain tiledcluster.spec.instances
  kubectl get ti tst-standalone -o yaml      # expanded by the mutating webhook, with provenance

This control plane has no node: the operator creates the instances' objects (StatefulSets,
Services, claims), but no pod can start, so no instance becomes Ready (READY 0 in kubectl get tc).
For a real node that runs Tiled's pods: 'make cluster' (docs/real-node.md).

Press Ctrl-C to stop the operator and the control plane.
`, samples, env.Kubeconfig)
	fmt.Println("operator running")
	return <-errc
}

// waitForWebhooks waits until the webhook server serves TLS and its configurations are published
// with a CA bundle, or the manager stops.
func waitForWebhooks(ctx context.Context, c client.Client, started healthz.Checker, errc <-chan error) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if started(req) == nil &&
			c.Get(ctx, client.ObjectKey{Name: webhooks.MutatingConfigurationName}, m) == nil && len(m.Webhooks) > 0 && len(m.Webhooks[0].ClientConfig.CABundle) > 0 &&
			c.Get(ctx, client.ObjectKey{Name: webhooks.ValidatingConfigurationName}, v) == nil && len(v.Webhooks) > 0 && len(v.Webhooks[0].ClientConfig.CABundle) > 0 {
			return nil
		}
		select {
		case err := <-errc:
			return fmt.Errorf("the operator stopped while starting: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// applySamples applies every sample with server-side apply into the default namespace: profiles
// first, as the clusters and instances select them.
func applySamples(ctx context.Context, c client.Client, dir string) error {
	var paths []string
	for _, kind := range []string{"tiledprofile", "tiledcluster", "tiledinstance"} {
		p, err := filepath.Glob(filepath.Join(dir, "tiled_v1alpha1_"+kind+"*.yaml"))
		if err != nil {
			return err
		}
		paths = append(paths, p...)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			u.SetNamespace("default")
			if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil { //nolint:staticcheck // unstructured apply
				_ = f.Close()
				return fmt.Errorf("applying sample %s: %w", p, err)
			}
		}
		_ = f.Close()
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
