// Command runlocal is what `make run` runs when there is no cluster to talk to: it starts a local
// control plane (kube-apiserver, etcd and kube-controller-manager, built by hack/controlplane.sh),
// installs the CRDs, applies the samples, prints the kubeconfig and the commands to try next, and runs
// the operator against it until interrupted. Ctrl-C stops the operator and every process it started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bluesky/tiled-operator/controllers"
	"github.com/bluesky/tiled-operator/hack/testenv"
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
	if err := applySamples(ctx, env.Client, samples); err != nil {
		return err
	}

	mgr, err := controllers.NewManager(env.Config, controllers.ManagerOptions{
		MetricsBindAddress:     envOr("METRICS_BIND_ADDRESS", "127.0.0.1:8080"),
		HealthProbeBindAddress: envOr("HEALTH_PROBE_BIND_ADDRESS", "127.0.0.1:8081"),
	})
	if err != nil {
		return err
	}
	fmt.Printf(`
The local control plane is up, with the CRDs and the samples of %s applied.
Use it from another shell:

  export KUBECONFIG=%s
  kubectl get tiled
  kubectl get tiledprofiles
  kubectl get ti -l tiled.blueskyproject.io/cluster=nsls2
  kubectl explain tiledcluster.spec.instances

Press Ctrl-C to stop the operator and the control plane.
`, samples, env.Kubeconfig)
	fmt.Println("operator running")
	return mgr.Start(ctx)
}

// applySamples applies every sample with server-side apply into the default namespace.
func applySamples(ctx context.Context, c client.Client, dir string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "tiled_*.yaml"))
	if err != nil {
		return err
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
