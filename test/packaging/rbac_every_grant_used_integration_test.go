package packaging

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/names"
	"github.com/bluesky/tiled-operator/render"
	"github.com/bluesky/tiled-operator/test/support/fleet"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// apiCall is one request the manager sent, as the API server authorizes it.
type apiCall struct {
	verb, group, resource, namespace, name string
	status                                 int
}

func (c apiCall) String() string {
	return fmt.Sprintf("%s %s %s ns=%q name=%q -> %d", c.verb, c.group, c.resource, c.namespace, c.name, c.status)
}

// recorder records every request of a client configuration, parsed the way the API server's
// authorization sees it (verb, group, resource/subresource, namespace, name), with the response
// status. A server-side apply that creates its object answers 201: the API server authorized it as
// a create as well as a patch.
type recorder struct {
	mu    sync.Mutex
	calls []apiCall
	info  *request.RequestInfoFactory
}

func newRecorder() *recorder {
	return &recorder{info: &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}}
}

func (r *recorder) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return roundTripper{rt: rt, r: r} })
	return cfg
}

type roundTripper struct {
	rt http.RoundTripper
	r  *recorder
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	info, ierr := t.r.info.NewRequestInfo(req)
	if ierr != nil || !info.IsResourceRequest {
		return resp, err
	}
	c := apiCall{verb: info.Verb, group: info.APIGroup, resource: info.Resource, namespace: info.Namespace, name: info.Name}
	if info.Subresource != "" {
		c.resource += "/" + info.Subresource
	}
	if resp != nil {
		c.status = resp.StatusCode
	}
	t.r.mu.Lock()
	t.r.calls = append(t.r.calls, c)
	if c.verb == "patch" && c.status == http.StatusCreated {
		created := c
		created.verb = "create"
		t.r.calls = append(t.r.calls, created)
	}
	t.r.mu.Unlock()
	return resp, err
}

func (r *recorder) snapshot() []apiCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// grant is one verb on one resource that a role bound to the manager gives it.
type grant struct {
	role                  string
	verb, group, resource string
	namespace             string // for a Role; "" cluster-wide
	resourceNames         []string
}

func (g grant) String() string {
	s := fmt.Sprintf("%s: %s %s/%s", g.role, g.verb, g.group, g.resource)
	if g.namespace != "" {
		s += " in " + g.namespace
	}
	if len(g.resourceNames) > 0 {
		s += " named " + strings.Join(g.resourceNames, ",")
	}
	return s
}

// usedBy says whether c is a request g authorizes.
func (g grant) usedBy(c apiCall) bool {
	if c.status == http.StatusForbidden || c.verb != g.verb || c.group != g.group || c.resource != g.resource {
		return false
	}
	if g.namespace != "" && c.namespace != g.namespace {
		return false
	}
	return len(g.resourceNames) == 0 || slices.Contains(g.resourceNames, c.name)
}

// managerGrants lists every verb on every resource of the roles config/default binds to the
// manager's ServiceAccount (non-resource URLs aside: the manager holds none).
func managerGrants(t *testing.T, objs []*unstructured.Unstructured) []grant {
	t.Helper()
	roles := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "Role" || o.GetKind() == "ClusterRole" {
			roles[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	var out []grant
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == managerSA }) {
			continue
		}
		ns := ""
		if b.RoleRef.Kind == "Role" {
			ns = b.Namespace
		}
		role, ok := roles[b.RoleRef.Kind+"/"+ns+"/"+b.RoleRef.Name]
		if !ok {
			t.Fatalf("%s refers to %s %s, not rendered", key(o), b.RoleRef.Kind, b.RoleRef.Name)
		}
		var r rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &r); err != nil {
			t.Fatal(err)
		}
		// A ClusterRole bound by a RoleBinding grants in that namespace only.
		if o.GetKind() == "RoleBinding" {
			ns = b.Namespace
		}
		for _, rule := range r.Rules {
			if len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s grants the manager non-resource URLs %v", key(role), rule.NonResourceURLs)
			}
			for _, group := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, verb := range rule.Verbs {
						out = append(out, grant{role: key(role), verb: verb, group: group, resource: res, namespace: ns, resourceNames: rule.ResourceNames})
					}
				}
			}
		}
	}
	return out
}

// Every permission the manager holds is used, and it is refused nothing. The manager runs as its
// ServiceAccount with the RBAC of config/default, against its own control plane, through a
// scenario that exercises everything it does: leader election, its webhook CA (created, rotated),
// the caBundle, the authenticated metrics endpoint, a cluster stamped out with every optional child
// (Ingress, PodDisruptionBudget, ServiceMonitor, NFS PersistentVolumes, a managed database), then
// pruned (optional children turned off, the database made external, a beamline dropped). Each
// request it sends is recorded; each verb on each resource of its roles must match one.
// docs/rbac.md says what each permission is for.
func TestManagerUsesEveryPermission(t *testing.T) {
	g := NewWithT(t)
	e, err := testenv.Start(testenv.Options{SkipCRDs: true, APIServerFlags: map[string]string{"service-cluster-ip-range": serviceCIDR}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = e.Stop() }) // after the manager's cleanup, which is registered later
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Install as a user would; prometheus-operator's CRD (a stand-in) first, since the manager
	// looks for it when it starts.
	sm := &unstructured.Unstructured{Object: standInCRD("ServiceMonitor")}
	_, stderr, err := kubectlIn(ctx, e, toYAML(t, []*unstructured.Unstructured{sm}), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	out, stderr, err := e.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(HaveOccurred(), "%s%s", out, stderr)
	for _, r := range []string{"tiledprofiles", "tiledclusters", "tiledinstances"} {
		g.Expect(e.WaitForResource(ctx, schema.GroupVersionResource{Group: "tiled.blueskyproject.io", Version: "v1alpha1", Resource: r})).To(Succeed())
	}
	g.Expect(e.WaitForResource(ctx, schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"})).To(Succeed())
	svc, err := e.Clientset.CoreV1().Services(namespace).Get(ctx, webhookService, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	fwd := newForwarder(t, net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port)))

	rec := newRecorder()
	m := startManager(t, "rbac", rec.wrap(serviceAccountConfig(ctx, t, e, namespace, managerSA)), namespace, time.Second, true)
	fwd.use(fmt.Sprintf("127.0.0.1:%d", m.webhookPort))
	g.Eventually(m.ready).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

	// The metrics endpoint: Prometheus's token is reviewed, and its access to /metrics checked.
	scrape(ctx, t, g, e, m)

	// A fleet with every optional child.
	const ns = "beamlines"
	apply := func(doc string) {
		t.Helper()
		out, stderr, err := kubectlIn(ctx, e, []byte(doc), "apply", "--server-side", "--force-conflicts", "-f", "-")
		g.Expect(err).NotTo(HaveOccurred(), "%s%s\n%s", out, stderr, doc)
	}
	apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n")
	apply(`apiVersion: v1
kind: Secret
metadata: {name: catalog, namespace: beamlines}
stringData: {uri: "postgresql://tiled:secret@db.example.org:5432/catalog"}
`)
	apply(profileDoc(true))
	apply(clusterDoc([]string{"a", "b", "c"}, false))
	// get fails when the object is absent or being deleted (a claim waits on its protection
	// finalizer, which no kube-controller-manager removes here).
	get := func(resource, name string) error {
		out, stderr, err := e.Kubectl(ctx, "get", resource, name, "-n", ns, "-o", "jsonpath={.metadata.deletionTimestamp}")
		if err != nil {
			return fmt.Errorf("%s %s: %v %s", resource, name, err, stderr)
		}
		if out != "" {
			return fmt.Errorf("%s %s is being deleted", resource, name)
		}
		return nil
	}
	names := func(inst string) names.Objects {
		return fleet.NamesOf(&tiledv1alpha1.TiledInstance{ObjectMeta: metav1.ObjectMeta{Name: inst, Namespace: ns}})
	}
	for _, inst := range []string{"fleet-a", "fleet-b", "fleet-c"} {
		n := names(inst)
		for r, name := range map[string]string{
			"statefulset/tiled": n.Tiled, "statefulset/postgres": n.Postgres, "ingress": n.Tiled, "poddisruptionbudget": n.Tiled,
			"servicemonitors.monitoring.coreos.com": n.Tiled, "configmap": n.ConfigMap, "secret": n.Secret, "service": n.Tiled,
			"persistentvolumeclaim": n.DatabaseClaim, "horizontalpodautoscaler": n.Tiled, "statefulset/cache": n.Cache,
			"service/cache": n.Cache,
		} {
			r, _, _ = strings.Cut(r, "/")
			g.Eventually(func() error { return get(r, name) }).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "%s %s", r, name)
		}
	}
	pvs := func() int { // not being deleted
		out, _, _ := e.Kubectl(ctx, "get", "pv", "-l", "app.kubernetes.io/managed-by=tiled-operator", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
		n := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 1 {
				n++
			}
		}
		return n
	}
	g.Eventually(pvs).WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically(">=", 3), "NFS PersistentVolumes")
	before := pvs()

	// Prune: the optional children off, beamline b's database external, then beamline a dropped.
	apply(profileDoc(false))
	apply(clusterDoc([]string{"a", "b", "c"}, true))
	for _, inst := range []string{"fleet-a", "fleet-b"} {
		n := names(inst)
		for _, r := range []string{"ingress", "poddisruptionbudget", "servicemonitors.monitoring.coreos.com", "horizontalpodautoscaler"} {
			g.Eventually(func() error { return get(r, n.Tiled) }).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred(), "%s %s pruned", r, n.Tiled)
		}
		for _, r := range []string{"statefulset", "service"} {
			g.Eventually(func() error { return get(r, n.Cache) }).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred(), "streaming off: %s %s pruned", r, n.Cache)
		}
	}
	b := names("fleet-b")
	for r, name := range map[string]string{"statefulset": b.Postgres, "service": b.Postgres, "configmap": b.PostgresInit, "persistentvolumeclaim": b.DatabaseClaim} {
		g.Eventually(func() error { return get(r, name) }).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred(), "b's managed database: %s %s pruned", r, name)
	}
	apply(clusterDoc([]string{"b", "c"}, true))
	g.Eventually(func() error { return get("tiledinstance", "fleet-a") }).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred(), "beamline a dropped")
	g.Eventually(pvs).WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically("<", before), "a's NFS PersistentVolumes deleted")
	// A second beamline dropped: the cluster's event repeats, and the recorder counts it in a
	// series (a patch of the event).
	apply(clusterDoc([]string{"b"}, true))
	g.Eventually(func() error { return get("tiledinstance", "fleet-c") }).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred(), "beamline c dropped")

	// A Tiled version change starts the upgrade procedure: its check Job is created (apply); the
	// image set back cancels it, and the Job is pruned with its pods.
	checkJobs := func() int {
		out, _, _ := e.Kubectl(ctx, "get", "jobs", "-n", ns, "-l", tiledv1alpha1.LabelStep+"=check", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
		n := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 1 {
				n++
			}
		}
		return n
	}
	apply(strings.ReplaceAll(profileDoc(false), "tiled:0.2.20", "tiled:0.2.19"))
	g.Eventually(checkJobs).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(1), "the upgrade's check Job")
	apply(profileDoc(false))
	g.Eventually(checkJobs).WithContext(ctx).WithTimeout(time.Minute).Should(BeZero(), "the check Job pruned once the upgrade is cancelled")

	// A backup target makes each instance's backup CronJob (create); a new schedule changes it
	// (patch); no target prunes it (delete).
	cronJob := func() string {
		out, _, _ := e.Kubectl(ctx, "get", "cronjob", "-n", ns, names("fleet-b").BackupCronJob, "-o", "jsonpath={.spec.schedule}")
		return out
	}
	withBackup := func(schedule string) string {
		return profileDoc(false) + "  backup: {schedule: \"" + schedule + "\", claim: {claimName: backups}}\n"
	}
	apply(withBackup("30 2 * * *"))
	g.Eventually(cronJob).WithContext(ctx).WithTimeout(time.Minute).Should(Equal("30 2 * * *"), "the backup CronJob")
	apply(withBackup("0 3 * * *"))
	g.Eventually(cronJob).WithContext(ctx).WithTimeout(time.Minute).Should(Equal("0 3 * * *"), "the backup CronJob's new schedule")
	apply(profileDoc(false))
	g.Eventually(cronJob).WithContext(ctx).WithTimeout(time.Minute).Should(BeEmpty(), "the backup CronJob pruned without a target")

	// A Tiled pod stuck on an older revision of its StatefulSet (no StatefulSet controller or
	// kubelet runs here: the test writes the pod, its status and the StatefulSet's revisions) is
	// deleted.
	stuck := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names("fleet-b").Tiled + "-0", Labels: map[string]string{
			tiledv1alpha1.LabelManagedBy: tiledv1alpha1.ManagedByValue, tiledv1alpha1.LabelAppInstance: "fleet-b",
			tiledv1alpha1.LabelAppComponent: render.ComponentServer, appsv1.ControllerRevisionHashLabelKey: "old",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "tiled", Image: "example.org/tiled:typo"}}},
	}
	stuck, err = e.Clientset.CoreV1().Pods(ns).Create(ctx, stuck, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error {
		sts, err := e.Clientset.AppsV1().StatefulSets(ns).Get(ctx, names("fleet-b").Tiled, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, CurrentRevision: "old", UpdateRevision: "new"}
		_, err = e.Clientset.AppsV1().StatefulSets(ns).UpdateStatus(ctx, sts, metav1.UpdateOptions{})
		return err
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	// The failure last, so that the instance's Stalled transition and the deletion come in one
	// reconcile.
	stuck.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "tiled",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}}
	_, err = e.Clientset.CoreV1().Pods(ns).UpdateStatus(ctx, stuck, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		_, err := e.Clientset.CoreV1().Pods(ns).Get(ctx, stuck.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "the stuck pod deleted")

	// The webhook CA rotates: the CA Secret is updated.
	g.Expect(m.op.Webhooks.Certs.Rotate(ctx)).To(Succeed())

	calls := rec.snapshot()
	m.stop()
	g.Expect(m.err).NotTo(HaveOccurred(), "the manager stopped cleanly")
	var refused []string
	for _, c := range calls {
		if c.status == http.StatusForbidden {
			refused = append(refused, c.String())
		}
	}
	g.Expect(refused).To(BeEmpty(), "requests of the manager its RBAC refuses")

	rendered, err := decodeAll(kustomize(t, "config/default"))
	g.Expect(err).NotTo(HaveOccurred())
	grants := managerGrants(t, rendered)
	var unused []string
	for _, gr := range grants {
		if !slices.ContainsFunc(calls, gr.usedBy) {
			unused = append(unused, gr.String())
		}
	}
	sort.Strings(unused)
	t.Logf("%d requests recorded; %d grants, %d unused", len(calls), len(grants), len(unused))
	if len(unused) > 0 {
		seen := map[string]bool{}
		var kinds []string
		for _, c := range calls {
			k := c.verb + " " + c.group + "/" + c.resource
			if !seen[k] {
				seen[k] = true
				kinds = append(kinds, k)
			}
		}
		sort.Strings(kinds)
		t.Errorf("permissions the manager holds but never used:\n  %s\nrequests it sent:\n  %s", strings.Join(unused, "\n  "), strings.Join(kinds, "\n  "))
	}
}

// scrape reads m's metrics as Prometheus would: with a ServiceAccount token bound to the
// metrics-reader ClusterRole. The manager reviews the token and checks the access.
func scrape(ctx context.Context, t *testing.T, g Gomega, e *testenv.Env, m *running) {
	t.Helper()
	_, stderr, err := kubectlIn(ctx, e, []byte(`apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-tiled-operator-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tiled-operator-metrics-reader}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: default}]
`), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	token := serviceAccountConfig(ctx, t, e, "default", "prometheus").BearerToken
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the manager's metrics certificate is self-signed
	g.Eventually(func(g Gomega) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+m.metrics+"/metrics", nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "scraping the metrics with an authorized token")
}

// profileDoc is a profile whose instances have every optional child (with optional) or none.
func profileDoc(optional bool) string {
	extra := `
  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", replicas: 1}
  expose: {ingress: {enabled: false}}
  monitoring: {serviceMonitor: false}
  streaming: {enabled: false}`
	if optional {
		extra = `
  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", replicas: 2, autoscaling: {enabled: true, maxReplicas: 3}}
  expose: {ingress: {enabled: true, className: nginx, hostExpression: "instance.name + '.example.org'"}}
  monitoring: {serviceMonitor: true}`
	}
	return `apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata: {name: facility, namespace: beamlines, labels: {facility: test}}
spec:` + extra + `
  storage:
    data: {size: 1Gi, accessModes: [ReadWriteMany]}
    readOnlyMounts:
    - name: raw
      mountPath: /raw
      nfs: {server: nfs.example.org, pathExpression: "'/raw/' + instance.name"}
    retention: Delete
  database:
    managed: {image: "postgres:16", size: 1Gi}
`
}

// clusterDoc is a cluster of the named beamlines; with external, b's database is external.
func clusterDoc(names []string, external bool) string {
	var b strings.Builder
	b.WriteString(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: fleet, namespace: beamlines}
spec:
  profileSelector: {matchLabels: {facility: test}}
  instances:
`)
	for _, n := range names {
		if n == "b" && external {
			b.WriteString("  - {name: b, overrides: {database: {external: {uriSecretRef: {name: catalog, key: uri}}}}}\n")
		} else {
			fmt.Fprintf(&b, "  - {name: %s}\n", n)
		}
	}
	return b.String()
}

// kubectlIn runs kubectl against e with stdin.
func kubectlIn(ctx context.Context, e *testenv.Env, stdin []byte, args ...string) (string, string, error) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return "", "", fmt.Errorf("kubectl is not on PATH: %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// The usage check can fail: a grant no request matches is unused, and the matching respects the
// namespace of a Role, resource names, subresources, and refusals.
func TestGrantMatching(t *testing.T) {
	g := NewWithT(t)
	secretByName := grant{verb: "update", resource: "secrets", namespace: "ns", resourceNames: []string{"ca"}}
	for _, tc := range []struct {
		grant grant
		call  apiCall
		used  bool
	}{
		{secretByName, apiCall{verb: "update", resource: "secrets", namespace: "ns", name: "ca", status: 200}, true},
		{secretByName, apiCall{verb: "update", resource: "secrets", namespace: "other", name: "ca", status: 200}, false},
		{secretByName, apiCall{verb: "update", resource: "secrets", namespace: "ns", name: "x", status: 200}, false},
		{secretByName, apiCall{verb: "update", resource: "secrets", namespace: "ns", name: "ca", status: 403}, false},
		{secretByName, apiCall{verb: "patch", resource: "secrets", namespace: "ns", name: "ca", status: 200}, false},
		{grant{verb: "patch", group: "tiled.blueskyproject.io", resource: "tiledclusters/status"},
			apiCall{verb: "patch", group: "tiled.blueskyproject.io", resource: "tiledclusters", status: 200}, false},
		{grant{verb: "list", resource: "configmaps"}, apiCall{verb: "list", resource: "configmaps", namespace: "any", status: 200}, true},
	} {
		g.Expect(tc.grant.usedBy(tc.call)).To(Equal(tc.used), "%s by %s", tc.grant, tc.call)
	}
	// A rendered role with one verb more than used: managerGrants lists it.
	objs, err := decodeAll([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r, namespace: ns}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, delete]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: b, namespace: ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}
subjects: [{kind: ServiceAccount, name: ` + managerSA + `, namespace: ns}]
`))
	g.Expect(err).NotTo(HaveOccurred())
	grants := managerGrants(t, objs)
	g.Expect(grants).To(HaveLen(2))
	calls := []apiCall{{verb: "get", resource: "configmaps", namespace: "ns", name: "x", status: 200}}
	var unused []string
	for _, gr := range grants {
		if !slices.ContainsFunc(calls, gr.usedBy) {
			unused = append(unused, gr.verb)
		}
	}
	g.Expect(unused).To(Equal([]string{"delete"}))
}
