package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{ControllerManager: true}, &env))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createNamespace makes a namespace of its own for a test.
func createNamespace(t *testing.T, g Gomega, prefix string) string {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"generateName": prefix + "-"},
	}}
	g.Expect(env.Client.Create(ctxT(t), ns)).To(Succeed())
	return ns.GetName()
}

// decodeAll reads every YAML document of a file into unstructured objects.
func decodeAll(g Gomega, path string) []*unstructured.Unstructured {
	f, err := os.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			g.Expect(err.Error()).To(Equal("EOF"))
			return out
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func parse(g Gomega, doc string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	g.Expect(yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&u.Object)).To(Succeed())
	return u
}

func TestCRDsAreEstablished(t *testing.T) {
	g := NewWithT(t)
	for _, name := range []string{"tiledprofiles", "tiledclusters", "tiledinstances"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Name: name + ".tiled.blueskyproject.io"}, crd)).To(Succeed())
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		g.Expect(established).To(BeTrue(), "CRD %s is not established", name)
		g.Expect(crd.Spec.Names.Categories).To(ContainElement("tiled"))
		g.Expect(crd.Spec.Names.ShortNames).NotTo(BeEmpty())
	}
}

func TestSamplesAreAccepted(t *testing.T) {
	g := NewWithT(t)
	ns := createNamespace(t, g, "samples")
	paths, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "tiled_*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]bool{}
	for _, p := range paths {
		for _, obj := range decodeAll(g, p) {
			obj.SetNamespace(ns)
			g.Expect(env.Client.Create(ctxT(t), obj, client.FieldValidation("Strict"))).To(Succeed(), "sample %s", filepath.Base(p))
			kinds[obj.GetKind()] = true
		}
	}
	g.Expect(kinds).To(HaveKey("TiledProfile"))
	g.Expect(kinds).To(HaveKey("TiledCluster"))
	g.Expect(kinds).To(HaveKey("TiledInstance"))

	// The typed client reads them back with every field the API types know.
	cluster := &tiledv1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "nsls2"}, cluster)).To(Succeed())
	g.Expect(cluster.Spec.Instances).To(HaveLen(5))
	g.Expect(cluster.Spec.Instances[3].Overrides.Storage.Data.Size).To(Equal("2Ti"))
}

// TestInvalidObjectsAreRefused checks each OpenAPI and CEL rule of the CRDs against the real
// apiserver: the object is refused, the message names the field, and nothing is stored.
func TestInvalidObjectsAreRefused(t *testing.T) {
	const (
		profile  = "apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledProfile\nmetadata: {name: bad}\n"
		cluster  = "apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledCluster\nmetadata: {name: bad}\n"
		instance = "apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledInstance\nmetadata: {name: bad}\n"
	)
	cases := []struct {
		name string
		doc  string
		want []string // substrings of the apiserver's error, field path first
	}{
		{"cluster without profileSelector", cluster + "spec: {instances: [{name: amx}]}",
			[]string{"spec.profileSelector", "Required value"}},
		{"cluster with null profileSelector", cluster + "spec: {profileSelector: null, instances: [{name: amx}]}",
			[]string{"spec.profileSelector", "Required value"}},
		{"instance name not a DNS label", cluster + "spec: {profileSelector: {}, instances: [{name: Bad_Name}]}",
			[]string{"spec.instances[0].name", "should match"}},
		{"instance name too long", cluster + "spec: {profileSelector: {}, instances: [{name: " + strings.Repeat("a", 64) + "}]}",
			[]string{"spec.instances[0].name", "Too long"}},
		{"duplicate instance names", cluster + "spec: {profileSelector: {}, instances: [{name: amx}, {name: amx}]}",
			[]string{"spec.instances[1]", "Duplicate value"}},
		{"zero replicas", profile + "spec: {tiled: {replicas: 0}}",
			[]string{"spec.tiled.replicas", "greater than or equal to 1"}},
		{"zero data size", profile + "spec: {storage: {data: {size: '0'}}}",
			[]string{"spec.storage.data", "size must be a positive quantity"}},
		{"negative database size", profile + "spec: {database: {managed: {size: -5Gi}}}",
			[]string{"spec.database.managed", "size must be a positive quantity"}},
		{"managed and external database", profile + "spec: {database: {managed: {image: 'postgres:16'}, external: {uriSecretRef: {name: db}}}}",
			[]string{"spec.database", "managed and external are mutually exclusive"}},
		{"nfs and existing claim", instance + "spec: {storage: {data: {existingClaimName: x, nfs: {server: nfs}}}}",
			[]string{"spec.storage.data", "nfs, existingClaimName and storageClassName are mutually exclusive"}},
		{"path and pathExpression", profile + "spec: {storage: {readOnlyMounts: [{name: p, nfs: {server: s, path: /a, pathExpression: \"'/b'\"}}]}}",
			[]string{"spec.storage.readOnlyMounts[0].nfs", "path and pathExpression are mutually exclusive"}},
		{"relative nfs path", profile + "spec: {storage: {data: {nfs: {server: s, path: data/x}}}}",
			[]string{"spec.storage.data.nfs.path", "path must be absolute"}},
		{"relative mountPath", profile + "spec: {storage: {readOnlyMounts: [{name: p, mountPath: data}]}}",
			[]string{"spec.storage.readOnlyMounts[0].mountPath", "mountPath must be absolute"}},
		{"api key and oidc", profile + "spec: {auth: {singleUserAPIKey: {}, oidc: {providers: [{name: orcid}]}}}",
			[]string{"spec.auth", "singleUserAPIKey and oidc are mutually exclusive"}},
		{"oidc over plain http", profile + "spec: {auth: {oidc: {providers: [{name: orcid, wellKnownURI: 'http://x/.well-known'}]}}}",
			[]string{"spec.auth.oidc.providers[0].wellKnownURI", "must be an https:// URL"}},
		{"host and hostExpression", cluster + "spec: {profileSelector: {}, template: {expose: {ingress: {host: a.b, hostExpression: \"'a.b'\"}}}}",
			[]string{"spec.template.expose.ingress", "host and hostExpression are mutually exclusive"}},
		{"ingress host not a DNS name", profile + "spec: {expose: {ingress: {host: 'Not A Host'}}}",
			[]string{"spec.expose.ingress.host", "should match"}},
		{"unknown pull policy", profile + "spec: {tiled: {imagePullPolicy: Sometimes}}",
			[]string{"spec.tiled.imagePullPolicy", "Unsupported value"}},
		{"unknown retention", cluster + "spec: {profileSelector: {}, instances: [{name: chx, overrides: {storage: {retention: Keep}}}]}",
			[]string{"spec.instances[0].overrides.storage.retention", "Unsupported value"}},
		{"priority out of range", profile + "spec: {priority: 5000}",
			[]string{"spec.priority", "less than or equal to 1000"}},
		{"maxUnavailable zero", cluster + "spec: {profileSelector: {}, rollout: {maxUnavailable: 0}}",
			[]string{"spec.rollout.maxUnavailable", "maxUnavailable must be a positive number or a percentage"}},
		{"maxUnavailable over 100%", cluster + "spec: {profileSelector: {}, rollout: {maxUnavailable: '150%'}}",
			[]string{"spec.rollout.maxUnavailable", "maxUnavailable must be a positive number or a percentage"}},
		{"env value and expression", profile + "spec: {tiled: {env: [{name: A, value: x, valueExpression: \"'y'\"}]}}",
			[]string{"spec.tiled.env[0]", "value, valueExpression and valueFrom are mutually exclusive"}},
		{"env without name", profile + "spec: {tiled: {env: [{value: x}]}}",
			[]string{"spec.tiled.env[0].name", "Required value"}},
		{"service type ExternalName", profile + "spec: {expose: {service: {type: ExternalName}}}",
			[]string{"spec.expose.service.type", "Unsupported value"}},
		{"scrape interval not a duration", profile + "spec: {monitoring: {interval: 5 minutes}}",
			[]string{"spec.monitoring.interval", "should match"}},
		{"DNS port zero", profile + "spec: {networkPolicy: {egress: {restricted: true, dnsPorts: [53, 0]}}}",
			[]string{"spec.networkPolicy.egress.dnsPorts[1]", "greater than or equal to 1"}},
		{"no DNS port", profile + "spec: {networkPolicy: {egress: {restricted: true, dnsPorts: []}}}",
			[]string{"spec.networkPolicy.egress.dnsPorts", "at least 1 items"}},
		{"ingress controller namespace not a DNS label", profile + "spec: {networkPolicy: {ingressControllerNamespace: Ingress_NGINX}}",
			[]string{"spec.networkPolicy.ingressControllerNamespace", "should match"}},
		{"maintenance window duration not a duration", profile + "spec: {maintenance: {windows: [{schedule: '0 8 * * 2', duration: 4 hours}]}}",
			[]string{"spec.maintenance.windows[0].duration", "must be a duration of at least one minute"}},
		{"maintenance window of seconds", cluster + "spec: {profileSelector: {}, template: {maintenance: {windows: [{schedule: '@daily', duration: 59s}]}}}",
			[]string{"spec.template.maintenance.windows[0].duration", "must be a duration of at least one minute"}},
		{"maintenance window without a schedule", instance + "spec: {maintenance: {windows: [{duration: 4h}]}}",
			[]string{"spec.maintenance.windows[0].schedule", "Required value"}},
		{"maintenance schedule with its zone", profile + "spec: {maintenance: {windows: [{schedule: 'TZ=UTC 0 8 * * 2', duration: 4h}]}}",
			[]string{"spec.maintenance.windows[0].schedule", "must not name a time zone"}},
		{"maintenance exclusion ending before it starts", cluster + "spec: {profileSelector: {}, instances: [{name: chx, overrides: {maintenance: {exclusions: [{name: run, start: '2026-12-10T00:00:00Z', end: '2026-12-09T00:00:00Z'}]}}}]}",
			[]string{"spec.instances[0].overrides.maintenance.exclusions[0]", "end must be after start"}},
		{"maintenance exclusions of one name", profile + "spec: {maintenance: {exclusions: [{name: run, start: '2026-12-10T00:00:00Z', end: '2026-12-11T00:00:00Z'}, {name: run, start: '2026-12-12T00:00:00Z', end: '2026-12-13T00:00:00Z'}]}}",
			[]string{"spec.maintenance.exclusions[1]", "Duplicate value"}},
		{"unknown field (strict validation)", profile + "spec: {storage: {data: {sizee: 5Gi}}}",
			[]string{"unknown field", "spec.storage.data.sizee"}},
	}
	g := NewWithT(t)
	ns := createNamespace(t, g, "invalid")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := parse(g, tc.doc)
			obj.SetNamespace(ns)
			err := env.Client.Create(ctxT(t), obj, client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred(), "the apiserver accepted %s", tc.name)
			g.Expect(apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "unexpected error kind: %v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			// Nothing invalid is stored.
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			getErr := env.Client.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "bad"}, got)
			g.Expect(apierrors.IsNotFound(getErr)).To(BeTrue(), "an invalid object was stored: %v", getErr)
		})
	}
	g.Expect(len(cases)).To(BeNumerically(">=", 15))
}

func TestKubectlSeesTheKinds(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxT(t)
	ns := createNamespace(t, g, "kubectl")
	for _, p := range []string{"tiled_v1alpha1_tiledprofile.yaml", "tiled_v1alpha1_tiledcluster.yaml"} {
		for _, obj := range decodeAll(g, filepath.Join(testenv.RepoRoot(), "config", "samples", p)) {
			obj.SetNamespace(ns)
			g.Expect(env.Client.Create(ctx, obj)).To(Succeed())
		}
	}
	// The printer columns show status once the operator writes it.
	tc := &tiledv1alpha1.TiledCluster{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nsls2"}, tc)).To(Succeed())
	tc.Status = tiledv1alpha1.TiledClusterStatus{
		ObservedGeneration: tc.Generation,
		Profiles:           []tiledv1alpha1.SelectedProfile{{Name: "nsls2-defaults", UID: "u1", Generation: 1}, {Name: "nsls2-mx", UID: "u2", Generation: 1, Priority: 10}},
		ProfileNames:       "nsls2-defaults,nsls2-mx",
		Instances:          5,
		ReadyInstances:     3,
		InstanceSelector:   tiledv1alpha1.LabelCluster + "=nsls2",
	}
	g.Expect(env.Client.Status().Update(ctx, tc)).To(Succeed())

	out, stderr, err := env.Kubectl(ctx, "get", "tiled", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("tiledprofile.tiled.blueskyproject.io/nsls2-defaults"))
	g.Expect(out).To(ContainSubstring("tiledcluster.tiled.blueskyproject.io/nsls2"))

	out, stderr, err = env.Kubectl(ctx, "get", "tc", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2))
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "PROFILES", "INSTANCES", "READY", "HELD", "PENDING", "AGE"}))
	g.Expect(strings.Fields(lines[1])[:4]).To(Equal([]string{"nsls2", "nsls2-defaults,nsls2-mx", "5", "3"}))

	// No instance ready (and none listed): READY and INSTANCES show 0, not a blank. The status is
	// written from the Go type, as the operator writes it.
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nsls2"}, tc)).To(Succeed())
	tc.Status.ReadyInstances = 0
	g.Expect(env.Client.Status().Update(ctx, tc)).To(Succeed())
	out, stderr, err = env.Kubectl(ctx, "get", "tc", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2))
	g.Expect(strings.Fields(lines[1])[:6]).To(Equal([]string{"nsls2", "nsls2-defaults,nsls2-mx", "5", "0", "0", "0"}), out)
	tc.Status.Instances = 0
	g.Expect(env.Client.Status().Update(ctx, tc)).To(Succeed())
	out, stderr, err = env.Kubectl(ctx, "get", "tc", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])[:6]).To(Equal([]string{"nsls2", "nsls2-defaults,nsls2-mx", "0", "0", "0", "0"}), out)

	out, stderr, err = env.Kubectl(ctx, "get", "tp", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(strings.Fields(strings.Split(out, "\n")[0])).To(Equal([]string{"NAME", "PRIORITY", "VALID", "CLUSTERS", "INSTANCES", "AGE"}))
	out, stderr, err = env.Kubectl(ctx, "explain", "tiledprofile.status")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("SelectedByClusters is the number of TiledClusters"))
	g.Expect(out).To(ContainSubstring("SelectedByInstances is the number of standalone TiledInstances"))

	_, stderr, err = env.Kubectl(ctx, "get", "ti", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(stderr).To(ContainSubstring("No resources found"))

	out, stderr, err = env.Kubectl(ctx, "explain", "tiledcluster.spec.instances")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("Instances are the Tiled instances of the cluster"))
	for _, field := range []string{"name", "labels", "profileSelector", "overrides"} {
		g.Expect(out).To(MatchRegexp(`(?m)^\s+` + field + `\s`))
	}
	out, stderr, err = env.Kubectl(ctx, "explain", "tiledprofile.spec.storage.readOnlyMounts.nfs.pathExpression")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("CEL expression returning the path per instance"))
	// The pods' identity and placement, and the profiles' allowances, are explained like any field.
	for field, want := range map[string]string{
		"tiledinstance.spec.tiled.runAsUser":                   "It must not be 0",
		"tiledcluster.spec.template.tiled.supplementalGroups":  "further gids of the Tiled containers",
		"tiledprofile.spec.tiled.affinity.podAntiAffinity":     "anti-affinity",
		"tiledprofile.spec.tiled.topologySpreadConstraints":    "matchLabelKeys: [app.kubernetes.io/instance]",
		"tiledprofile.spec.database.managed.imagePullSecrets":  "registry of the PostgreSQL image",
		"tiledprofile.spec.allowedNFS.pathPrefix":              "/nsls2/data allows /nsls2/data/chx/proposals",
		"tiledprofile.spec.allowedUserIDs":                     "ranges of uids",
		"tiledinstance.status.inPlaceRestore":                  "set by `kubectl tiled restore`): who asked, which backup",
		"tiledinstance.status.inPlaceRestore.preRestoreBackup": "restore it (`kubectl tiled restore INSTANCE --from NAME`) to undo this restore",
	} {
		out, stderr, err = env.Kubectl(ctx, "explain", field)
		g.Expect(err).NotTo(HaveOccurred(), stderr)
		g.Expect(strings.Join(strings.Fields(out), " ")).To(ContainSubstring(want), field) // kubectl wraps lines
	}
}

// TestGarbageCollection checks that kube-controller-manager runs beside the apiserver: an instance
// controller-owned by a cluster goes when the cluster goes.
func TestGarbageCollection(t *testing.T) {
	g := NewWithT(t)
	ctx := ctxT(t)
	ns := createNamespace(t, g, "gc")
	owner := &tiledv1alpha1.TiledCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"},
		Spec:       tiledv1alpha1.TiledClusterSpec{ProfileSelector: &metav1.LabelSelector{}},
	}
	g.Expect(env.Client.Create(ctx, owner)).To(Succeed())
	yes := true
	child := &tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: "owner-amx",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: tiledv1alpha1.GroupVersion.String(), Kind: "TiledCluster",
			Name: owner.Name, UID: owner.UID, Controller: &yes, BlockOwnerDeletion: &yes,
		}},
	}}
	g.Expect(env.Client.Create(ctx, child)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(child), &tiledv1alpha1.TiledInstance{})
		return apierrors.IsNotFound(err)
	}, 60*time.Second, 250*time.Millisecond).Should(BeTrue(), "the garbage collector did not delete the owned instance:\n%s", env.ControllerManagerLog())
}
