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
// bundle.Dockerfile that builds its image.
func Generate(o Options) (files map[string][]byte, dockerfile []byte, err error) {
	version, err := semver.Parse(o.Version)
	if err != nil {
		return nil, nil, fmt.Errorf("version %q is not semver: %w", o.Version, err)
	}
	rendered, err := kustomize(o.Root, overlay)
	if err != nil {
		return nil, nil, err
	}
	samples, err := kustomize(o.Root, "config/samples")
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(filepath.Join(o.Root, csvBase))
	if err != nil {
		return nil, nil, err
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.UnmarshalStrict(data, csv); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", csvBase, err)
	}
	icon, err := os.ReadFile(filepath.Join(o.Root, "config/manifests/icon.svg"))
	if err != nil {
		return nil, nil, err
	}

	files = map[string][]byte{}
	csv.Name = PackageName + ".v" + version.String()
	csv.Spec.Version.Version = version
	if o.Replaces != "" {
		prev, err := semver.Parse(o.Replaces)
		if err != nil {
			return nil, nil, fmt.Errorf("replaces %q is not semver: %w", o.Replaces, err)
		}
		if !prev.LT(version) {
			return nil, nil, fmt.Errorf("replaces %s is not older than %s", prev, version)
		}
		csv.Spec.Replaces = PackageName + ".v" + prev.String()
	}
	csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(bytes.TrimSpace(icon)), MediaType: "image/svg+xml"}}
	csv.Annotations["createdAt"] = o.CreatedAt
	csv.Annotations["alm-examples"], err = almExamples(samples)
	if err != nil {
		return nil, nil, err
	}

	var (
		deployment     *appsv1.Deployment
		roles          = map[string][]rbacv1.PolicyRule{} // kind/name -> rules
		bindings       []*rbacv1.RoleBinding
		crds           []*apiextensionsv1.CustomResourceDefinition
		serviceAccount string
		extra          []*unstructured.Unstructured
		mutating       []*admissionregistrationv1.MutatingWebhookConfiguration
		validating     []*admissionregistrationv1.ValidatingWebhookConfiguration
		services       []*corev1.Service
	)
	for _, u := range rendered {
		switch u.GetKind() {
		case "Namespace":
			// OLM creates the namespace.
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := fromUnstructured(u, m); err != nil {
				return nil, nil, err
			}
			mutating = append(mutating, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := fromUnstructured(u, v); err != nil {
				return nil, nil, err
			}
			validating = append(validating, v)
		case "ServiceAccount":
			serviceAccount = u.GetName()
		case "Deployment":
			deployment = &appsv1.Deployment{}
			if err := fromUnstructured(u, deployment); err != nil {
				return nil, nil, err
			}
		case "Role", "ClusterRole":
			var r rbacv1.ClusterRole
			if err := fromUnstructured(u, &r); err != nil {
				return nil, nil, err
			}
			roles[u.GetKind()+"/"+u.GetName()] = r.Rules
			extra = append(extra, u) // kept only if not bound to the manager, below
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			if err := fromUnstructured(u, &b); err != nil {
				return nil, nil, err
			}
			bindings = append(bindings, &b)
		case "CustomResourceDefinition":
			c := &apiextensionsv1.CustomResourceDefinition{}
			if err := fromUnstructured(u, c); err != nil {
				return nil, nil, err
			}
			crds = append(crds, c)
		case "Service":
			svc := &corev1.Service{}
			if err := fromUnstructured(u, svc); err != nil {
				return nil, nil, err
			}
			services = append(services, svc)
			extra = append(extra, u)
		case "PodDisruptionBudget":
			extra = append(extra, u)
		default:
			return nil, nil, fmt.Errorf("%s renders %s %s, which hack/bundle does not know where to put", overlay, u.GetKind(), u.GetName())
		}
	}
	if deployment == nil || serviceAccount == "" {
		return nil, nil, errors.New(overlay + " renders no manager Deployment or ServiceAccount")
	}
	if deployment.Spec.Template.Spec.ServiceAccountName != serviceAccount {
		return nil, nil, fmt.Errorf("the Deployment runs as %q, not the rendered ServiceAccount %q", deployment.Spec.Template.Spec.ServiceAccountName, serviceAccount)
	}

	// Image: the Deployment's, which must be this release's.
	image := deployment.Spec.Template.Spec.Containers[0].Image
	if !strings.HasSuffix(image, ":"+version.String()) {
		return nil, nil, fmt.Errorf("the manager image %s is not tagged %s: set the tag in config/manager/kustomization.yaml", image, version)
	}
	csv.Annotations["containerImage"] = image
	if err := checkOLMDeployment(deployment); err != nil {
		return nil, nil, err
	}
	// Every image the operator runs, for mirroring into disconnected registries: the manager's and
	// the built-in defaults of every instance (a profile may name others; docs/getting-started.md).
	csv.Spec.RelatedImages = relatedImages(image)
	if err := checkDisconnected(csv); err != nil {
		return nil, nil, err
	}

	// Admission webhooks: OLM creates the configurations from webhookdefinitions, with its own
	// Service and certificate; config/default's webhook Service is left out.
	webhookService := ""
	csv.Spec.WebhookDefinitions, webhookService, err = webhookDefinitions(mutating, validating, services, deployment)
	if err != nil {
		return nil, nil, err
	}

	// Permissions: what config/default binds to the manager's ServiceAccount, by role name.
	bound := map[string]bool{}
	var namespaced, clusterWide []rbacv1.PolicyRule
	slices.SortFunc(bindings, func(a, b *rbacv1.RoleBinding) int { return strings.Compare(a.Name, b.Name) })
	for _, b := range bindings {
		toManager := false
		for _, s := range b.Subjects {
			toManager = toManager || (s.Kind == "ServiceAccount" && s.Name == serviceAccount)
		}
		if !toManager {
			return nil, nil, fmt.Errorf("binding %s binds someone other than the manager", b.Name)
		}
		roleKey := b.RoleRef.Kind + "/" + b.RoleRef.Name
		rules, ok := roles[roleKey]
		if !ok {
			return nil, nil, fmt.Errorf("binding %s refers to %s, which is not rendered", b.Name, roleKey)
		}
		bound[roleKey] = true
		if b.RoleRef.Kind == "Role" {
			namespaced = append(namespaced, rules...)
		} else {
			clusterWide = append(clusterWide, rules...)
		}
	}
	strategy := operatorsv1alpha1.StrategyDetailsDeployment{
		DeploymentSpecs: []operatorsv1alpha1.StrategyDeploymentSpec{{
			Name:  deployment.Name,
			Label: deployment.Labels,
			Spec:  deployment.Spec,
		}},
	}
	if len(namespaced) > 0 {
		strategy.Permissions = []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: serviceAccount, Rules: namespaced}}
	}
	if len(clusterWide) > 0 {
		strategy.ClusterPermissions = []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: serviceAccount, Rules: clusterWide}}
	}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment, StrategySpec: strategy}

	// Owned CRDs: names, versions and descriptions from the CRDs; descriptors from the base, checked.
	if err := completeOwned(csv, crds); err != nil {
		return nil, nil, err
	}
	for _, c := range crds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			return nil, nil, err
		}
		delete(m, "status")
		unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
		b, err := marshal(m)
		if err != nil {
			return nil, nil, err
		}
		files["manifests/"+c.Spec.Group+"_"+c.Spec.Names.Plural+".yaml"] = b
	}
	for _, u := range extra {
		if bound[u.GetKind()+"/"+u.GetName()] || (u.GetKind() == "Service" && u.GetName() == webhookService) {
			continue
		}
		u.SetNamespace("") // OLM installs them in the operator's namespace
		b, err := marshal(u.Object)
		if err != nil {
			return nil, nil, err
		}
		gvk := u.GroupVersionKind()
		group := gvk.Group
		if group != "" {
			group += "_"
		}
		files[fmt.Sprintf("manifests/%s_%s%s_%s.yaml", u.GetName(), group, gvk.Version, strings.ToLower(gvk.Kind))] = b
	}

	csvMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(csv)
	if err != nil {
		return nil, nil, err
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
	if files["manifests/"+csv.Name+".clusterserviceversion.yaml"], err = marshal(csvMap); err != nil {
		return nil, nil, err
	}
	files["manifests/"+PackageName+".clusterserviceversion.yaml"] = files["manifests/"+csv.Name+".clusterserviceversion.yaml"]
	delete(files, "manifests/"+csv.Name+".clusterserviceversion.yaml")

	labels := bundleLabels(o.Channel)
	ann := map[string]any{"annotations": labels}
	if files["metadata/annotations.yaml"], err = marshal(ann); err != nil {
		return nil, nil, err
	}
	return files, dockerfileFor(labels), nil
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
