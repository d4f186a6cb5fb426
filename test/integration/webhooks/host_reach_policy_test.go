package webhooks_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

// policyNS is the namespace of the NFS policy test.
const policyNS = "policy"

// editorClient returns a client impersonating a ServiceAccount of namespace bound to the built-in
// aggregated "edit" ClusterRole, after the operator's editor role (config/rbac, aggregated into
// "edit" by kube-controller-manager) lets it write TiledClusters.
func editorClient(t *testing.T, namespace string) client.Client {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "tiled_editor_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.Unmarshal(b, role)).To(Succeed())
	g.Expect(role.Labels).To(HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-edit", "true"))
	role.Name = "tiled-operator-" + role.Name
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, role))).To(Succeed())

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "beamline-editor", Namespace: namespace}}
	g.Expect(env.Client.Create(ctx, sa)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "beamline-editor", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: namespace}},
	})).To(Succeed())

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + sa.Name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	// Ready when kube-controller-manager has aggregated the operator's role into "edit".
	g.Eventually(func() error {
		return c.List(ctx, &v1alpha1.TiledClusterList{}, client.InNamespace(namespace))
	}).WithTimeout(time.Minute).Should(Succeed())
	return c
}

// TestNFSPolicy: NFS exports and pod identity are an administrator's decision, made in TiledProfiles.
// A namespace editor (a ServiceAccount bound to the aggregated "edit" role, impersonated against the
// real API server with the webhooks running) is refused when a TiledCluster's override or a
// standalone TiledInstance names an NFS server or directory, or a uid, that no TiledProfile allows,
// and when it writes an allowance, an NFS export or a uid into a profile; the administrator allows an
// export, and the same editor may then use it.
func TestNFSPolicy(t *testing.T) {
	g := NewWithT(t)
	s := startWebhooks(t)
	ctx := context.Background()
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policyNS}})).To(Succeed())
	editor := editorClient(t, policyNS)

	// The administrator's profile: the facility's defaults, and what instances may choose.
	admin := env.Client
	profile := &v1alpha1.TiledProfile{}
	g.Expect(yaml.Unmarshal([]byte(`
metadata: {name: facility, namespace: policy, labels: {facility: nsls2}}
spec:
  storage:
    readOnlyMounts:
    - name: proposals
      nfs: {server: nfs.nsls2.bnl.gov, pathExpression: "'/nsls2/data/' + instance.name + '/proposals'"}
  allowedNFS:
  - {server: nfs.nsls2.bnl.gov, pathPrefix: /nsls2/data}
  allowedUserIDs: [{min: 50000, max: 59999}]
`), profile)).To(Succeed())
	g.Expect(admin.Create(ctx, profile)).To(Succeed())
	g.Eventually(func() error {
		return s.mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(profile), &v1alpha1.TiledProfile{})
	}).WithTimeout(30 * time.Second).Should(Succeed())

	cluster := func(name, overrides string) *v1alpha1.TiledCluster {
		c := &v1alpha1.TiledCluster{}
		g.Expect(yaml.Unmarshal([]byte(`
metadata: {name: `+name+`, namespace: policy}
spec:
  profileSelector: {matchLabels: {facility: nsls2}}
  instances:
  - name: chx
    overrides: `+overrides), c)).To(Succeed())
		return c
	}
	instance := func(name, spec string) *v1alpha1.TiledInstance {
		in := &v1alpha1.TiledInstance{}
		g.Expect(yaml.Unmarshal([]byte(`
metadata: {name: `+name+`, namespace: policy}
spec: `+spec), in)).To(Succeed())
		return in
	}
	refused := func(err error, field, value string) {
		t.Helper()
		g.Expect(err).To(HaveOccurred())
		g.Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring(field))
		g.Expect(err.Error()).To(ContainSubstring(value))
		g.Expect(err.Error()).To(ContainSubstring("none of the instance's TiledProfiles allows"))
	}

	// The editor may write clusters and instances at all: a plain cluster is created.
	g.Expect(editor.Create(ctx, cluster("plain", "{}"))).To(Succeed())

	// An unlisted server, an unlisted directory of the listed server, a uid outside the range:
	// refused, for a cluster's override and for a standalone instance alike.
	refused(editor.Create(ctx, cluster("evil", "{storage: {data: {nfs: {server: evil.example.org, path: /export}}}}")),
		"spec.storage.data.nfs", "evil.example.org:/export")
	refused(editor.Create(ctx, cluster("home", "{storage: {readOnlyMounts: [{name: home, nfs: {server: nfs.nsls2.bnl.gov, path: /nsls2/home}}]}}")),
		"spec.storage.readOnlyMounts[name=home].nfs", "nfs.nsls2.bnl.gov:/nsls2/home")
	refused(editor.Create(ctx, cluster("expr", `{storage: {data: {nfs: {server: nfs.nsls2.bnl.gov, pathExpression: "'/etc/' + instance.name"}}}}`)),
		"spec.storage.data.nfs", "nfs.nsls2.bnl.gov:/etc/chx")
	refused(editor.Create(ctx, cluster("root-ish", "{tiled: {runAsUser: 1000}}")), "spec.tiled.runAsUser", "sets 1000")
	refused(editor.Create(ctx, instance("evil", `{profileSelector: {matchLabels: {facility: nsls2}}, storage: {data: {nfs: {server: evil.example.org, path: /export}}}}`)),
		"spec.storage.data.nfs", "evil.example.org:/export")
	refused(editor.Create(ctx, instance("alone", `{storage: {data: {nfs: {server: nfs.nsls2.bnl.gov, path: /nsls2/data/x}}}}`)),
		"spec.storage.data.nfs", "they allow none")
	// Editing an admitted cluster into an unlisted export is refused the same way.
	plain := &v1alpha1.TiledCluster{}
	g.Expect(editor.Get(ctx, client.ObjectKey{Namespace: policyNS, Name: "plain"}, plain)).To(Succeed())
	plain.Spec.Instances[0].Overrides = cluster("x", "{storage: {data: {nfs: {server: evil.example.org, path: /export}}}}").Spec.Instances[0].Overrides
	refused(editor.Update(ctx, plain), "spec.storage.data.nfs", "evil.example.org:/export")

	// Within what the profile allows, the editor chooses: a directory under the prefix, a uid in
	// the range.
	g.Expect(editor.Create(ctx, cluster("allowed", "{storage: {data: {nfs: {server: nfs.nsls2.bnl.gov, path: /nsls2/data/chx/tiled}}}, tiled: {runAsUser: 51234}}"))).To(Succeed())
	g.Expect(editor.Create(ctx, instance("allowed", `{profileSelector: {matchLabels: {facility: nsls2}}, storage: {data: {nfs: {server: nfs.nsls2.bnl.gov, path: /nsls2/data/allowed}}}}`))).To(Succeed())

	// Editors may write TiledProfiles (the aggregated role), but not the host-reaching parts: an
	// allowance, an NFS export or a uid in a profile needs permission to create PersistentVolumes.
	notAdmin := func(err error, field string) {
		t.Helper()
		g.Expect(err).To(HaveOccurred())
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring(field))
		g.Expect(err.Error()).To(ContainSubstring("need permission to create PersistentVolumes, which system:serviceaccount:policy:beamline-editor does not have"))
	}
	sneaky := &v1alpha1.TiledProfile{}
	g.Expect(yaml.Unmarshal([]byte(`
metadata: {name: sneaky, namespace: policy, labels: {facility: nsls2}}
spec: {priority: 5, allowedNFS: [{server: evil.example.org, pathPrefix: /}]}`), sneaky)).To(Succeed())
	notAdmin(editor.Create(ctx, sneaky), "spec.allowedNFS")
	sneaky.Spec.AllowedNFS = nil
	sneaky.Spec.Storage = &v1alpha1.StorageSpec{ReadOnlyMounts: []v1alpha1.ReadOnlyMount{{Name: "etc", NFS: &v1alpha1.NFSVolumeSource{Server: "evil.example.org", Path: "/etc"}}}}
	notAdmin(editor.Create(ctx, sneaky), "spec.storage.readOnlyMounts[name=etc].nfs")
	sneaky.Spec.Storage = nil
	sneaky.Spec.Tiled = &v1alpha1.TiledServerSpec{RunAsUser: ptr.To[int64](1000)}
	notAdmin(editor.Create(ctx, sneaky), "spec.tiled.runAsUser")
	editable := &v1alpha1.TiledProfile{}
	g.Expect(editor.Get(ctx, client.ObjectKeyFromObject(profile), editable)).To(Succeed())
	editable.Spec.AllowedNFS = append(editable.Spec.AllowedNFS, v1alpha1.AllowedNFSExport{Server: "evil.example.org", PathPrefix: "/"})
	notAdmin(editor.Update(ctx, editable), "spec.allowedNFS")
	// Other settings of the same profile remain the editors'.
	g.Expect(editor.Get(ctx, client.ObjectKeyFromObject(profile), editable)).To(Succeed())
	editable.Spec.Tiled = &v1alpha1.TiledServerSpec{Image: "ghcr.io/bluesky/tiled:0.2.20"}
	g.Expect(editor.Update(ctx, editable)).To(Succeed())

	// The profile author (an administrator) allows the other server; the editor's cluster is then
	// admitted.
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(profile), profile)).To(Succeed())
	profile.Spec.AllowedNFS = append(profile.Spec.AllowedNFS, v1alpha1.AllowedNFSExport{Server: "evil.example.org", PathPrefix: "/export"})
	g.Expect(admin.Update(ctx, profile)).To(Succeed())
	g.Eventually(func() error {
		return editor.Create(ctx, cluster("evil", "{storage: {data: {nfs: {server: evil.example.org, path: /export}}}}"))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Taking the allowance away again while a cluster uses it is refused to the profile author
	// too, naming the cluster (the allow-conflicts annotation applies it anyway).
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(profile), profile)).To(Succeed())
	profile.Spec.AllowedNFS = profile.Spec.AllowedNFS[:1]
	err := admin.Update(ctx, profile)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("TiledCluster policy/evil would lose an allowance it uses"))
}
