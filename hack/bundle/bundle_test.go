package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	webhookconfig "github.com/bluesky/tiled-operator/config/webhook"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/testenv"
)

var root = testenv.RepoRoot()

func committed() Options {
	return Options{Root: root, Version: Version, CreatedAt: CreatedAt, Replaces: Replaces, Channel: Channel}
}

// validators are what `operator-sdk bundle validate --select-optional suite=operatorframework` runs.
var validators = interfaces.Validators{
	validation.BundleValidator,
	validation.ClusterServiceVersionValidator,
	validation.CustomResourceDefinitionValidator,
	validation.OperatorHubV2Validator,
	validation.StandardCapabilitiesValidator,
	validation.StandardCategoriesValidator,
	validation.AlphaDeprecatedAPIsValidator,
	validation.GoodPracticesValidator,
}

// validate loads a bundle folder as OLM does and runs the validators; it returns every error and
// warning, one line each.
func validate(t *testing.T, dir string) (errs, warns []string) {
	t.Helper()
	b, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		t.Fatalf("loading the bundle from %s: %v", dir, err)
	}
	if b.CSV == nil || len(b.V1CRDs) != 3 {
		t.Fatalf("bundle in %s has CSV %v and %d CRDs, want a CSV and 3 CRDs", dir, b.CSV != nil, len(b.V1CRDs))
	}
	// The minimum Kubernetes version the CSV claims: AlphaDeprecatedAPIs and OperatorHubV2 check
	// the bundle against it.
	objs := []any{b, map[string]string{"k8s-version": b.CSV.Spec.MinKubeVersion}}
	for _, r := range validators.Validate(objs...) {
		for _, e := range r.Errors {
			errs = append(errs, describe(r.Name, e))
		}
		for _, w := range r.Warnings {
			if rbacOnlyRemovedAPI(w.Error()) {
				continue
			}
			warns = append(warns, describe(r.Name, w))
		}
	}
	return errs, warns
}

// rbacOnlyRemovedAPI says whether w is the removed-APIs validator's warning about RBAC rules only:
// rules name resources (cronjobs: the backup CronJobs; horizontalpodautoscalers: the Tiled
// autoscalers) whose batch/v1beta1 and autoscaling/v2beta versions were removed in Kubernetes 1.25
// and 1.26, and RBAC rules carry no version, so the validator warns whatever version the operator
// uses (batch/v1, autoscaling/v2; minKubeVersion is 1.30). A removed API in a manifest, or any other
// resource, is still reported.
func rbacOnlyRemovedAPI(w string) bool {
	if strings.Count(w, "Migrate the API(s) for") != 1 {
		return false
	}
	_, list, _ := strings.Cut(w, "Migrate the API(s) for ")
	entries := removedAPIEntry.FindAllStringSubmatch(list, -1)
	if len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		if !rbacOnlyResources[e[1]] {
			return false
		}
		for _, path := range strings.Split(e[2], ",") {
			if !strings.HasPrefix(strings.Trim(path, `"`), "ClusterServiceVersion.Spec.InstallStrategy.StrategySpec.ClusterPermissions[") {
				return false
			}
		}
	}
	return true
}

// removedAPIEntry is one `resource: (["path", ...])` of the removed-APIs warning.
var removedAPIEntry = regexp.MustCompile(`([a-z]+): \(\[(.*?)\]\)`)

// rbacOnlyResources are the resources the operator names in RBAC rules that have a removed version.
var rbacOnlyResources = map[string]bool{"cronjobs": true, "horizontalpodautoscalers": true}

func describe(name string, e errors.Error) string {
	return name + ": " + e.Error()
}

// The committed bundle passes every validator with no error and no warning.
func TestCommittedBundleValidates(t *testing.T) {
	errs, warns := validate(t, filepath.Join(root, "bundle"))
	if len(errs) > 0 {
		t.Errorf("bundle validation errors:\n  %s", strings.Join(errs, "\n  "))
	}
	if len(warns) > 0 {
		t.Errorf("bundle validation warnings:\n  %s", strings.Join(warns, "\n  "))
	}
}

// `make bundle` is reproducible and the committed bundle is what it writes today: run `make bundle`
// and commit when this fails.
func TestCommittedBundleIsCurrent(t *testing.T) {
	files, dockerfile, err := Generate(committed())
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := Generate(committed())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if !bytes.Equal(data, again[name]) {
			t.Errorf("%s differs between two runs: the bundle is not reproducible", name)
		}
		got, err := os.ReadFile(filepath.Join(root, "bundle", name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("bundle/%s is stale or missing: run make bundle and commit", name)
		}
	}
	var onDisk []string
	_ = filepath.WalkDir(filepath.Join(root, "bundle"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(root, "bundle"), path)
			onDisk = append(onDisk, filepath.ToSlash(rel))
		}
		return nil
	})
	for _, name := range onDisk {
		if _, ok := files[name]; !ok {
			t.Errorf("bundle/%s is not generated any more: run make bundle and commit", name)
		}
	}
	got, err := os.ReadFile(filepath.Join(root, "bundle.Dockerfile"))
	if err != nil || !bytes.Equal(got, dockerfile) {
		t.Error("bundle.Dockerfile is stale or missing: run make bundle and commit")
	}
}

// A later release that replaces this one validates too, with the update edge in place.
func TestUpgradeBundleValidates(t *testing.T) {
	o := committed()
	o.Replaces, o.Version = Version, "99.0.0"
	dir := t.TempDir()
	// The image tag must match the version: generate from a copy of config/ with the tag changed.
	o.Root = copyRoot(t, dir, "99.0.0")
	files, dockerfile, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bundle")
	if err := Write(out, files, filepath.Join(dir, "bundle.Dockerfile"), dockerfile); err != nil {
		t.Fatal(err)
	}
	b, err := manifests.GetBundleFromDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if b.CSV.Spec.Replaces != "tiled-operator.v"+Version || b.CSV.Name != "tiled-operator.v99.0.0" {
		t.Errorf("CSV %s replaces %q", b.CSV.Name, b.CSV.Spec.Replaces)
	}
	errs, warns := validate(t, out)
	if len(errs)+len(warns) > 0 {
		t.Errorf("upgrade bundle: errors %v warnings %v", errs, warns)
	}
}

// What OperatorHub's reviewers look for is in the CSV, consistent with config/.
func TestCSVContents(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(root, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	csv := b.CSV
	for _, a := range []string{"capabilities", "categories", "containerImage", "createdAt", "description", "repository", "support", "alm-examples"} {
		if csv.Annotations[a] == "" {
			t.Errorf("CSV annotation %s is empty", a)
		}
	}
	if csv.Annotations["createdAt"] != CreatedAt {
		t.Errorf("createdAt %q, want the pinned %q", csv.Annotations["createdAt"], CreatedAt)
	}
	deps := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deps) != 1 || deps[0].Spec.Template.Spec.Containers[0].Image != csv.Annotations["containerImage"] {
		t.Errorf("containerImage %s does not match the Deployment's image", csv.Annotations["containerImage"])
	}
	if csv.Spec.Version.String() != Version || csv.Spec.MinKubeVersion == "" || len(csv.Spec.Icon) != 1 ||
		len(csv.Spec.Keywords) == 0 || len(csv.Spec.Maintainers) == 0 || len(csv.Spec.Links) == 0 ||
		csv.Spec.Provider.Name == "" || csv.Spec.DisplayName == "" || csv.Spec.Description == "" {
		t.Errorf("CSV lacks version, minKubeVersion, icon, keywords, maintainers, links, provider, displayName or description")
	}
	for _, owned := range csv.Spec.CustomResourceDefinitions.Owned {
		if len(owned.SpecDescriptors) == 0 || len(owned.StatusDescriptors) == 0 || owned.Description == "" {
			t.Errorf("owned CRD %s lacks descriptors or a description", owned.Name)
		}
		if !strings.Contains(csv.Annotations["alm-examples"], `"kind": "`+owned.Kind+`"`) {
			t.Errorf("alm-examples has no %s", owned.Kind)
		}
	}
	// Permissions are the generated ClusterRole's rules, and the leader-election Role's (namespaced).
	cp := csv.Spec.InstallStrategy.StrategySpec.ClusterPermissions
	if len(cp) != 1 || !slices.ContainsFunc(cp[0].Rules, func(r rbacRule) bool { return slices.Contains(r.Resources, "tiledinstances") }) {
		t.Errorf("clusterPermissions do not carry the generated manager role: %+v", cp)
	}
	if p := csv.Spec.InstallStrategy.StrategySpec.Permissions; len(p) != 1 || !slices.ContainsFunc(p[0].Rules, func(r rbacRule) bool { return slices.Contains(r.Resources, "leases") }) {
		t.Errorf("permissions do not carry the leader-election role: %+v", p)
	}
}

// A descriptor for a field the CRD does not have fails the generation.
func TestDescriptorForMissingFieldFails(t *testing.T) {
	dir := t.TempDir()
	r := copyRoot(t, dir, Version)
	base := filepath.Join(r, csvBase)
	data, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("path: tiled.image,"), []byte("path: tiled.imag,"), 1)
	if err := os.WriteFile(base, data, 0o644); err != nil {
		t.Fatal(err)
	}
	o := committed()
	o.Root = r
	if _, _, err := Generate(o); err == nil || !strings.Contains(err.Error(), "tiled.imag") {
		t.Errorf("a descriptor for a missing field gave %v, want an error naming it", err)
	}
}

// The validators can fail: a CSV without minKubeVersion and with an unknown category is reported.
func TestValidatorsCatchProblems(t *testing.T) {
	files, dockerfile, err := Generate(committed())
	if err != nil {
		t.Fatal(err)
	}
	name := "manifests/" + PackageName + ".clusterserviceversion.yaml"
	csv := string(files[name])
	csv = strings.Replace(csv, "  minKubeVersion: 1.30.0\n", "", 1)
	csv = strings.Replace(csv, "categories: Big Data", "categories: Beamlines", 1)
	files[name] = []byte(csv)
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "bundle"), files, filepath.Join(dir, "bundle.Dockerfile"), dockerfile); err != nil {
		t.Fatal(err)
	}
	errs, warns := validate(t, filepath.Join(dir, "bundle"))
	if !slices.ContainsFunc(errs, func(s string) bool { return strings.Contains(s, "Beamlines") }) {
		t.Errorf("an unknown category was not an error: %v", errs)
	}
	if !slices.ContainsFunc(warns, func(s string) bool { return strings.Contains(s, "minKubeVersion") }) {
		t.Errorf("a missing minKubeVersion was not a warning: %v", warns)
	}
}

// The CSV declares the webhooks of config/webhook as webhookdefinitions served by the manager
// Deployment (OLM creates the configurations, the Service and the certificate), and the manager runs
// with OLM's certificate and without the permissions of its own CA.
func TestCSVWebhooksAndCertificates(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(root, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	csv := b.CSV
	mutating, validating, err := webhookconfig.Configurations()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, w := range mutating.Webhooks {
		want[w.Name] = *w.ClientConfig.Service.Path
	}
	for _, w := range validating.Webhooks {
		want[w.Name] = *w.ClientConfig.Service.Path
	}
	dep := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0]
	got := map[string]string{}
	for _, d := range csv.Spec.WebhookDefinitions {
		got[d.GenerateName] = *d.WebhookPath
		if d.DeploymentName != dep.Name || d.TargetPort == nil || d.TargetPort.IntValue() != 9443 || d.ContainerPort != 443 {
			t.Errorf("webhook %s: deployment %s, port %d -> %v; want %s, 443 -> 9443", d.GenerateName, d.DeploymentName, d.ContainerPort, d.TargetPort, dep.Name)
		}
		if d.SideEffects == nil || d.FailurePolicy == nil || len(d.Rules) == 0 || len(d.AdmissionReviewVersions) == 0 {
			t.Errorf("webhook %s lacks sideEffects, failurePolicy, rules or admissionReviewVersions", d.GenerateName)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("webhookdefinitions %v, want config/webhook's %v", got, want)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--webhooks") || !slices.Contains(args, "--cert-management=olm") {
		t.Errorf("the manager's args %q lack --webhooks --cert-management=olm", args)
	}
	all := append(slices.Clone(csv.Spec.InstallStrategy.StrategySpec.ClusterPermissions), csv.Spec.InstallStrategy.StrategySpec.Permissions...)
	for _, p := range all {
		for _, r := range p.Rules {
			if slices.Contains(r.APIGroups, "admissionregistration.k8s.io") {
				t.Errorf("the CSV grants %v on webhook configurations: with OLM's certificate the manager patches none", r.Verbs)
			}
			if slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, "update") {
				t.Errorf("the CSV grants update on secrets, which only the manager's own CA needs")
			}
		}
	}
	for _, p := range csv.Spec.InstallStrategy.StrategySpec.ClusterPermissions {
		for _, r := range p.Rules {
			if slices.Contains(r.Resources, "leases") {
				t.Errorf("the CSV grants leases cluster-wide: %v", r)
			}
		}
	}
	// No webhook Service of our own: OLM makes one per webhook Deployment.
	for _, o := range b.Objects {
		if o.GetKind() == "Service" && strings.Contains(o.GetName(), "webhook") {
			t.Errorf("the bundle ships the webhook Service %s, which OLM replaces", o.GetName())
		}
	}
}

// Every install mode is supported through --watch-namespaces: the Deployment takes
// WATCH_NAMESPACES from the annotation OLM sets to the OperatorGroup's target namespaces.
func TestCSVInstallModes(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(root, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[operatorsv1alpha1.InstallModeType]bool{}
	for _, m := range b.CSV.Spec.InstallModes {
		modes[m.Type] = m.Supported
	}
	for _, m := range []operatorsv1alpha1.InstallModeType{operatorsv1alpha1.InstallModeTypeOwnNamespace, operatorsv1alpha1.InstallModeTypeSingleNamespace,
		operatorsv1alpha1.InstallModeTypeMultiNamespace, operatorsv1alpha1.InstallModeTypeAllNamespaces} {
		if !modes[m] {
			t.Errorf("install mode %s is not supported", m)
		}
	}
	c := b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0]
	if err := checkOLMDeployment(&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}); err != nil {
		t.Error(err)
	}
}

// relatedImages list the manager's image and every image of expansion.BuiltinImages (the images
// the operator runs by default, which a test of expansion checks against what render emits), fully
// qualified, and the manager's RELATED_IMAGE_<ROLE> variables name the same images; the CSV says it
// installs disconnected under the current and the older annotation; the maintainer is the project.
func TestCSVRelatedImagesAndAnnotations(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(root, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	csv := b.CSV
	images := map[string]string{}
	for _, ri := range csv.Spec.RelatedImages {
		images[ri.Name] = ri.Image
	}
	env := map[string]string{}
	for _, e := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	want := map[string]string{"tiled-operator": csv.Annotations["containerImage"]}
	for _, bi := range expansion.BuiltinImages() {
		want[bi.Role] = expansion.FullImageReference(bi.Default)
		if env[bi.Variable()] != want[bi.Role] {
			t.Errorf("the manager's %s is %q, want %q", bi.Variable(), env[bi.Variable()], want[bi.Role])
		}
	}
	if want["cache"] != "docker.io/valkey/valkey:8.1" || want["postgresql"] != "docker.io/library/postgres:16" {
		t.Errorf("the built-in images are not the ones expected: %v", want)
	}
	if !maps.Equal(images, want) {
		t.Errorf("relatedImages %v, want %v: run make bundle", images, want)
	}
	if csv.Annotations["features.operators.openshift.io/disconnected"] != "true" || csv.Annotations["operators.openshift.io/infrastructure-features"] != `["disconnected"]` {
		t.Errorf("disconnected annotations: %q, %q", csv.Annotations["features.operators.openshift.io/disconnected"], csv.Annotations["operators.openshift.io/infrastructure-features"])
	}
	if err := checkDisconnected(csv); err != nil {
		t.Error(err)
	}
	for _, m := range csv.Spec.Maintainers {
		if strings.Contains(m.Email, "example.") || m.Name == "" {
			t.Errorf("maintainer %+v is a placeholder", m)
		}
	}
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"postgres:16":                     "docker.io/library/postgres:16",
		"bitnami/postgresql:16":           "docker.io/bitnami/postgresql:16",
		"ghcr.io/bluesky/tiled:0.2.20":    "ghcr.io/bluesky/tiled:0.2.20",
		"localhost/tiled:dev":             "localhost/tiled:dev",
		"registry:5000/tiled@sha256:abcd": "registry:5000/tiled@sha256:abcd",
	} {
		if got := normalizeImage(in); got != want {
			t.Errorf("normalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
}

// A claim of disconnected installs without every image to mirror (each built-in image in turn
// left out), without the manager's variable naming it, or with the two annotations disagreeing,
// fails the generation.
func TestDisconnectedClaimIsChecked(t *testing.T) {
	files, _, err := Generate(committed())
	if err != nil {
		t.Fatal(err)
	}
	var csv *operatorsv1alpha1.ClusterServiceVersion
	if err := yaml.Unmarshal(files["manifests/"+PackageName+".clusterserviceversion.yaml"], &csv); err != nil {
		t.Fatal(err)
	}
	if err := checkDisconnected(csv); err != nil {
		t.Fatal(err)
	}
	for _, bi := range expansion.BuiltinImages() {
		c := csv.DeepCopy()
		c.Spec.RelatedImages = slices.DeleteFunc(c.Spec.RelatedImages, func(ri operatorsv1alpha1.RelatedImage) bool { return ri.Name == bi.Role })
		if err := checkDisconnected(c); err == nil || !strings.Contains(err.Error(), "relatedImages lacks "+bi.Role) {
			t.Errorf("relatedImages without %s: %v", bi.Role, err)
		}
		c = csv.DeepCopy()
		ctr := &c.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0]
		ctr.Env = slices.DeleteFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == bi.Variable() })
		if err := checkDisconnected(c); err == nil || !strings.Contains(err.Error(), bi.Variable()) {
			t.Errorf("the manager without %s: %v", bi.Variable(), err)
		}
	}
	csv.Spec.RelatedImages = nil
	if err := checkDisconnected(csv); err == nil || !strings.Contains(err.Error(), "relatedImages lacks") {
		t.Errorf("no relatedImages: %v", err)
	}
	csv.Spec.RelatedImages = relatedImages(csv.Annotations["containerImage"])
	if err := checkDisconnected(csv); err != nil {
		t.Error(err)
	}
	csv.Annotations[annotationInfrastructureFeat] = `[]`
	if err := checkDisconnected(csv); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("disagreeing annotations: %v", err)
	}
}
