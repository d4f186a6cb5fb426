package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"

	"github.com/bluesky/tiled-operator/hack/testenv"
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
			warns = append(warns, describe(r.Name, w))
		}
	}
	return errs, warns
}

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
	// Permissions are the generated ClusterRole's rules, and the leader-election Role's.
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
