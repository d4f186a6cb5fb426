package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Options say what to generate and from where.
type Options struct {
	// Root is the checkout's root folder.
	Root string
	// Version, CreatedAt and Replaces describe the release (release.go holds the committed one).
	Version, CreatedAt, Replaces string
	// Channel is the OLM channel, also the default one.
	Channel string
}

// csvBase is the hand-written part of the CSV.
const csvBase = "config/manifests/bases/tiled-operator.clusterserviceversion.yaml"

// overlay is the kustomization the bundle is made from: config/default as OLM runs it (the manager
// with --cert-management=olm and WATCH_NAMESPACES from olm.targetNamespaces, without the RBAC of
// its own CA).
const overlay = "config/olm"

// Generate returns the files of the bundle, by path relative to the bundle folder, and the
// bundle.Dockerfile that builds its image: the steps of generation, in order.
func Generate(o Options) (files map[string][]byte, dockerfile []byte, err error) {
	b := &bundle{o: o, files: map[string][]byte{}, roles: map[string][]rbacv1.PolicyRule{}}
	for _, s := range generation {
		if err := s.run(b); err != nil {
			return nil, nil, err
		}
	}
	return b.files, b.dockerfile, nil
}

// generation are the steps of Generate, in order: each reads what the earlier ones left in the
// bundle and adds to it; the first error stops it.
var generation = []step{
	{name: "read the inputs", run: (*bundle).readInputs},
	{name: "describe the release", run: (*bundle).describeRelease},
	{name: "sort the rendered objects", run: (*bundle).sortRendered},
	{name: "manager image", run: (*bundle).managerImage},
	{name: "webhook definitions", run: (*bundle).webhookDefinitions},
	{name: "install strategy", run: (*bundle).installStrategy},
	{name: "owned CRDs", run: (*bundle).ownedCRDs},
	{name: "other manifests", run: (*bundle).otherManifests},
	{name: "CSV manifest", run: (*bundle).csvManifest},
	{name: "metadata and Dockerfile", run: (*bundle).metadata},
}

// step is one named step of Generate.
type step struct {
	name string
	run  func(*bundle) error
}

// bundle is what the steps of Generate share.
type bundle struct {
	o        Options
	version  semver.Version
	rendered []*unstructured.Unstructured // what the overlay renders
	samples  []*unstructured.Unstructured // what config/samples renders
	csv      *operatorsv1alpha1.ClusterServiceVersion
	icon     []byte

	// The rendered objects, sorted by where they go.
	deployment     *appsv1.Deployment
	roles          map[string][]rbacv1.PolicyRule // kind/name -> rules
	bindings       []*rbacv1.RoleBinding
	crds           []*apiextensionsv1.CustomResourceDefinition
	serviceAccount string
	extra          []*unstructured.Unstructured
	mutating       []*admissionregistrationv1.MutatingWebhookConfiguration
	validating     []*admissionregistrationv1.ValidatingWebhookConfiguration
	services       []*corev1.Service

	webhookService string          // config/default's webhook Service, left out (OLM makes its own)
	bound          map[string]bool // the roles bound to the manager, by kind/name

	files      map[string][]byte
	dockerfile []byte
}

// readInputs parses the version, renders the overlay and the samples, and reads the CSV's base and
// the icon.
func (b *bundle) readInputs() error {
	o := b.o
	var err error
	if b.version, err = semver.Parse(o.Version); err != nil {
		return fmt.Errorf("version %q is not semver: %w", o.Version, err)
	}
	if b.rendered, err = kustomize(o.Root, overlay); err != nil {
		return err
	}
	if b.samples, err = kustomize(o.Root, "config/samples"); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(o.Root, csvBase))
	if err != nil {
		return err
	}
	b.csv = &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.UnmarshalStrict(data, b.csv); err != nil {
		return fmt.Errorf("%s: %w", csvBase, err)
	}
	b.icon, err = os.ReadFile(filepath.Join(o.Root, "config/manifests/icon.svg"))
	return err
}

// describeRelease names the CSV after the version, the one it replaces and its date, with the
// icon and the samples.
func (b *bundle) describeRelease() error {
	csv, version := b.csv, b.version
	csv.Name = PackageName + ".v" + version.String()
	csv.Spec.Version.Version = version
	if b.o.Replaces != "" {
		prev, err := semver.Parse(b.o.Replaces)
		if err != nil {
			return fmt.Errorf("replaces %q is not semver: %w", b.o.Replaces, err)
		}
		if !prev.LT(version) {
			return fmt.Errorf("replaces %s is not older than %s", prev, version)
		}
		csv.Spec.Replaces = PackageName + ".v" + prev.String()
	}
	csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(bytes.TrimSpace(b.icon)), MediaType: "image/svg+xml"}}
	csv.Annotations["createdAt"] = b.o.CreatedAt
	var err error
	csv.Annotations["alm-examples"], err = almExamples(b.samples)
	return err
}

// sortRendered sorts what the overlay renders by where it goes in the bundle, and checks that the
// manager's Deployment runs as the rendered ServiceAccount.
func (b *bundle) sortRendered() error {
	for _, u := range b.rendered {
		switch u.GetKind() {
		case "Namespace":
			// OLM creates the namespace.
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := fromUnstructured(u, m); err != nil {
				return err
			}
			b.mutating = append(b.mutating, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := fromUnstructured(u, v); err != nil {
				return err
			}
			b.validating = append(b.validating, v)
		case "ServiceAccount":
			b.serviceAccount = u.GetName()
		case "Deployment":
			b.deployment = &appsv1.Deployment{}
			if err := fromUnstructured(u, b.deployment); err != nil {
				return err
			}
		case "Role", "ClusterRole":
			var r rbacv1.ClusterRole
			if err := fromUnstructured(u, &r); err != nil {
				return err
			}
			b.roles[u.GetKind()+"/"+u.GetName()] = r.Rules
			b.extra = append(b.extra, u) // kept only if not bound to the manager, below
		case "RoleBinding", "ClusterRoleBinding":
			var rb rbacv1.RoleBinding
			if err := fromUnstructured(u, &rb); err != nil {
				return err
			}
			b.bindings = append(b.bindings, &rb)
		case "CustomResourceDefinition":
			c := &apiextensionsv1.CustomResourceDefinition{}
			if err := fromUnstructured(u, c); err != nil {
				return err
			}
			b.crds = append(b.crds, c)
		case "Service":
			svc := &corev1.Service{}
			if err := fromUnstructured(u, svc); err != nil {
				return err
			}
			b.services = append(b.services, svc)
			b.extra = append(b.extra, u)
		case "PodDisruptionBudget", "NetworkPolicy":
			b.extra = append(b.extra, u)
		default:
			return fmt.Errorf("%s renders %s %s, which hack/bundle does not know where to put", overlay, u.GetKind(), u.GetName())
		}
	}
	if b.deployment == nil || b.serviceAccount == "" {
		return errors.New(overlay + " renders no manager Deployment or ServiceAccount")
	}
	if b.deployment.Spec.Template.Spec.ServiceAccountName != b.serviceAccount {
		return fmt.Errorf("the Deployment runs as %q, not the rendered ServiceAccount %q", b.deployment.Spec.Template.Spec.ServiceAccountName, b.serviceAccount)
	}
	return nil
}

// managerImage: the Deployment's image, which must be this release's, and every image the operator
// runs, for mirroring into disconnected registries: the manager's and the built-in defaults of
// every instance (a profile may name others; docs/disconnected.md), which the manager's
// RELATED_IMAGE_<ROLE> variables name too (checked with relatedImages once the install strategy
// holds the Deployment).
func (b *bundle) managerImage() error {
	image := b.deployment.Spec.Template.Spec.Containers[0].Image
	if !strings.HasSuffix(image, ":"+b.version.String()) {
		return fmt.Errorf("the manager image %s is not tagged %s: set the tag in config/manager/kustomization.yaml", image, b.version)
	}
	b.csv.Annotations["containerImage"] = image
	if err := checkOLMDeployment(b.deployment); err != nil {
		return err
	}
	b.csv.Spec.RelatedImages = relatedImages(image)
	return relatedImageEnv(&b.deployment.Spec.Template.Spec.Containers[0])
}

// webhookDefinitions: OLM creates the admission webhook configurations from the CSV's
// webhookdefinitions, with its own Service and certificate; config/default's webhook Service is
// left out.
func (b *bundle) webhookDefinitions() error {
	var err error
	b.csv.Spec.WebhookDefinitions, b.webhookService, err = webhookDefinitions(b.mutating, b.validating, b.services, b.deployment)
	return err
}

// installStrategy is the Deployment with its permissions: what config/default binds to the
// manager's ServiceAccount, by role name.
func (b *bundle) installStrategy() error {
	b.bound = map[string]bool{}
	var namespaced, clusterWide []rbacv1.PolicyRule
	slices.SortFunc(b.bindings, func(x, y *rbacv1.RoleBinding) int { return strings.Compare(x.Name, y.Name) })
	for _, rb := range b.bindings {
		toManager := false
		for _, s := range rb.Subjects {
			toManager = toManager || (s.Kind == "ServiceAccount" && s.Name == b.serviceAccount)
		}
		if !toManager {
			return fmt.Errorf("binding %s binds someone other than the manager", rb.Name)
		}
		roleKey := rb.RoleRef.Kind + "/" + rb.RoleRef.Name
		rules, ok := b.roles[roleKey]
		if !ok {
			return fmt.Errorf("binding %s refers to %s, which is not rendered", rb.Name, roleKey)
		}
		b.bound[roleKey] = true
		if rb.RoleRef.Kind == "Role" {
			namespaced = append(namespaced, rules...)
		} else {
			clusterWide = append(clusterWide, rules...)
		}
	}
	d := b.deployment
	strategy := operatorsv1alpha1.StrategyDetailsDeployment{
		DeploymentSpecs: []operatorsv1alpha1.StrategyDeploymentSpec{{
			Name:  d.Name,
			Label: d.Labels,
			Spec:  d.Spec,
		}},
	}
	if len(namespaced) > 0 {
		strategy.Permissions = []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: b.serviceAccount, Rules: namespaced}}
	}
	if len(clusterWide) > 0 {
		strategy.ClusterPermissions = []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: b.serviceAccount, Rules: clusterWide}}
	}
	b.csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment, StrategySpec: strategy}
	return checkDisconnected(b.csv)
}

// ownedCRDs: names, versions and descriptions from the CRDs, descriptors from the base, checked;
// each CRD is a manifest of the bundle.
func (b *bundle) ownedCRDs() error {
	if err := completeOwned(b.csv, b.crds); err != nil {
		return err
	}
	for _, c := range b.crds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			return err
		}
		delete(m, "status")
		unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
		data, err := marshal(m)
		if err != nil {
			return err
		}
		b.files["manifests/"+c.Spec.Group+"_"+c.Spec.Names.Plural+".yaml"] = data
	}
	return nil
}

// otherManifests are the rendered objects OLM installs as they are, in the operator's namespace:
// the roles not bound to the manager, the Services but the webhook's, the PodDisruptionBudget and
// the NetworkPolicy of the manager pods.
func (b *bundle) otherManifests() error {
	for _, u := range b.extra {
		if b.bound[u.GetKind()+"/"+u.GetName()] || (u.GetKind() == "Service" && u.GetName() == b.webhookService) {
			continue
		}
		u.SetNamespace("") // OLM installs them in the operator's namespace
		data, err := marshal(u.Object)
		if err != nil {
			return err
		}
		gvk := u.GroupVersionKind()
		group := gvk.Group
		if group != "" {
			group += "_"
		}
		b.files[fmt.Sprintf("manifests/%s_%s%s_%s.yaml", u.GetName(), group, gvk.Version, strings.ToLower(gvk.Kind))] = data
	}
	return nil
}

// csvManifest writes the CSV, without what the API server sets, as the package's manifest.
func (b *bundle) csvManifest() error {
	csvMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b.csv)
	if err != nil {
		return err
	}
	delete(csvMap, "status")
	unstructured.RemoveNestedField(csvMap, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(csvMap, "spec", "install", "spec", "deployments", "0", "spec", "template", "metadata", "creationTimestamp")
	if deps, ok, _ := unstructured.NestedSlice(csvMap, "spec", "install", "spec", "deployments"); ok {
		for _, d := range deps {
			unstructured.RemoveNestedField(d.(map[string]any), "spec", "template", "metadata", "creationTimestamp")
		}
		_ = unstructured.SetNestedSlice(csvMap, deps, "spec", "install", "spec", "deployments")
	}
	data, err := marshal(csvMap)
	if err != nil {
		return err
	}
	b.files["manifests/"+PackageName+".clusterserviceversion.yaml"] = data
	return nil
}

// metadata writes the bundle's annotations and the Dockerfile that labels its image alike.
func (b *bundle) metadata() error {
	labels := bundleLabels(b.o.Channel)
	data, err := marshal(map[string]any{"annotations": labels})
	if err != nil {
		return err
	}
	b.files["metadata/annotations.yaml"] = data
	b.dockerfile = dockerfileFor(labels)
	return nil
}

// bundleLabels are the bundle's annotations, also the labels of its image.
func bundleLabels(channel string) map[string]string {
	return map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         PackageName,
		"operators.operatorframework.io.bundle.channels.v1":        channel,
		"operators.operatorframework.io.bundle.channel.default.v1": channel,
	}
}

func dockerfileFor(labels map[string]string) []byte {
	var b bytes.Buffer
	b.WriteString("# Generated by hack/bundle (make bundle); do not edit.\n")
	b.WriteString("# docker build -f bundle.Dockerfile -t ghcr.io/bluesky/tiled-operator-bundle:<version> .\n")
	b.WriteString("FROM scratch\n\n")
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "LABEL %s=%s\n", k, labels[k])
	}
	b.WriteString("\nCOPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\n")
	return b.Bytes()
}

// completeOwned fills each owned CRD of the base from the CRD itself and checks its descriptors.
func completeOwned(csv *operatorsv1alpha1.ClusterServiceVersion, crds []*apiextensionsv1.CustomResourceDefinition) error {
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range crds {
		byName[c.Name] = c
	}
	owned := csv.Spec.CustomResourceDefinitions.Owned
	if len(owned) != len(crds) {
		return fmt.Errorf("%s owns %d CRDs, %s renders %d", csvBase, len(owned), overlay, len(crds))
	}
	for i := range owned {
		d := &owned[i]
		c, ok := byName[d.Name]
		if !ok {
			return fmt.Errorf("%s owns %s, which %s does not render", csvBase, d.Name, overlay)
		}
		var served *apiextensionsv1.CustomResourceDefinitionVersion
		for j := range c.Spec.Versions {
			if c.Spec.Versions[j].Storage {
				served = &c.Spec.Versions[j]
			}
		}
		if served == nil || served.Name != d.Version || c.Spec.Names.Kind != d.Kind {
			return fmt.Errorf("%s: owned %s is %s %s, the CRD says otherwise", csvBase, d.Name, d.Kind, d.Version)
		}
		schema := served.Schema.OpenAPIV3Schema
		d.Description = firstSentence(schema.Description)
		for _, sd := range d.SpecDescriptors {
			if err := checkPath(schema, "spec", sd.Path); err != nil {
				return fmt.Errorf("%s: %s spec descriptor %s: %w", csvBase, d.Kind, sd.Path, err)
			}
		}
		for _, sd := range d.StatusDescriptors {
			if err := checkPath(schema, "status", sd.Path); err != nil {
				return fmt.Errorf("%s: %s status descriptor %s: %w", csvBase, d.Kind, sd.Path, err)
			}
		}
		// Fill each descriptor's description from the field's own documentation when the base has none.
		for j := range d.SpecDescriptors {
			if d.SpecDescriptors[j].Description == "" {
				d.SpecDescriptors[j].Description = fieldDescription(schema, "spec", d.SpecDescriptors[j].Path)
			}
		}
		for j := range d.StatusDescriptors {
			if d.StatusDescriptors[j].Description == "" {
				d.StatusDescriptors[j].Description = fieldDescription(schema, "status", d.StatusDescriptors[j].Path)
			}
		}
	}
	return nil
}

func lookup(schema *apiextensionsv1.JSONSchemaProps, root, path string) (*apiextensionsv1.JSONSchemaProps, error) {
	cur := schema
	for _, part := range append([]string{root}, strings.Split(path, ".")...) {
		if cur.Type == "array" && cur.Items != nil && cur.Items.Schema != nil {
			cur = cur.Items.Schema
		}
		next, ok := cur.Properties[part]
		if !ok {
			return nil, fmt.Errorf("no field %q in the CRD schema", part)
		}
		cur = &next
	}
	return cur, nil
}

func checkPath(schema *apiextensionsv1.JSONSchemaProps, root, path string) error {
	_, err := lookup(schema, root, path)
	return err
}

func fieldDescription(schema *apiextensionsv1.JSONSchemaProps, root, path string) string {
	s, err := lookup(schema, root, path)
	if err != nil {
		return ""
	}
	return firstSentence(s.Description)
}

// firstSentence returns the first sentence of a type's documentation, on one line.
func firstSentence(doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	for from := 0; ; {
		i := strings.Index(doc[from:], ". ")
		if i < 0 {
			return doc
		}
		end := from + i
		if strings.HasSuffix(doc[:end], "e.g") || strings.HasSuffix(doc[:end], "i.e") {
			from = end + 2
			continue
		}
		return doc[:end+1]
	}
}

// almExamples is the samples as the JSON array OLM and OperatorHub show.
func almExamples(samples []*unstructured.Unstructured) (string, error) {
	objs := make([]map[string]any, 0, len(samples))
	for _, s := range samples {
		objs = append(objs, s.Object)
	}
	b, err := json.MarshalIndent(objs, "", "  ")
	return string(b), err
}

// kustomize renders a folder of the checkout with kubectl's built-in kustomize.
func kustomize(root, dir string) ([]*unstructured.Unstructured, error) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return nil, fmt.Errorf("kubectl is not on PATH (its built-in kustomize renders config/): %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", filepath.Join(root, dir))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w\n%s", dir, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Write replaces the bundle folder's manifests/ and metadata/ with files, and writes dockerfile.
func Write(dir string, files map[string][]byte, dockerfilePath string, dockerfile []byte) error {
	for _, sub := range []string{"manifests", "metadata"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(dockerfilePath, dockerfile, 0o644)
}
