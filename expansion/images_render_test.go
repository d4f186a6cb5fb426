package expansion

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/render"
)

// fullyFeatured are instances that turn on every part of the render that starts a pod: Tiled
// autoscaled with a metrics sidecar and a ServiceMonitor, the managed streaming cache, scheduled
// backups to a claim or S3, on the managed database or an external one (whose backup and restore
// Jobs run the tools image), exposed by an Ingress behind NetworkPolicies.
var fullyFeatured = map[string]string{
	"managed database, claim backups": `
apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledInstance
metadata: {name: full, namespace: beamlines}
spec:
  tiled: {autoscaling: {enabled: true}}
  storage: {data: {accessModes: [ReadWriteMany]}}
  monitoring: {serviceMonitor: true}
  expose: {ingress: {enabled: true, host: tiled.example.org, tlsSecretName: tiled-tls}}
  networkPolicy: {egress: {restricted: true}}
  backup: {schedule: "0 3 * * *", claim: {claimName: backups}}
`,
	"external database, s3 backups": `
apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledInstance
metadata: {name: full, namespace: beamlines}
spec:
  tiled: {autoscaling: {enabled: true}}
  storage: {data: {accessModes: [ReadWriteMany]}}
  monitoring: {serviceMonitor: true}
  database: {external: {uriSecretRef: {name: catalog, key: uri}}}
  backup:
    schedule: "0 3 * * *"
    s3: {endpoint: "https://s3.example.org", bucket: tiled, credentialsSecret: {name: s3}}
`,
}

// renderedImages renders each instance as the controller does in every phase of its life (serving;
// each upgrade, backup and restore step as a Job) with the built-in PostgreSQL image for the tools,
// and returns every container image of every rendered object with where it was found.
func renderedImages(t *testing.T, b Builtins) map[string][]string {
	t.Helper()
	found := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(fullyFeatured)) {
		obj, err := Decode([]byte(fullyFeatured[name]))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ti, err := ExpandInstance(obj.(*v1alpha1.TiledInstance), nil, b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !render.StreamingEnabled(ti) || !render.Monitored(ti) || !render.HasBackupTarget(ti) {
			t.Fatalf("%s does not turn on the cache, the metrics sidecar and backups", name)
		}
		phases := map[string]*render.Lifecycle{"serving": nil}
		for _, k := range []render.StepKind{render.StepCheck, render.StepBackup, render.StepMigrate, render.StepRestore, render.StepBootstrap} {
			// What the upgrade and restore procedures ask: the spec's image for the check and
			// migrate Jobs, the built-in PostgreSQL image for the tools.
			phases[string(k)] = &render.Lifecycle{Stopped: true, BackupClaim: true, ToolsImage: b.Image(ImagePostgreSQL),
				Step: &render.Step{Kind: k, Image: ti.Spec.Tiled.Image, Backup: "b1", FromVersion: TiledVersion}}
		}
		for phase, l := range phases {
			objs, err := render.Render(ti, render.Inputs{ServiceMonitorAvailable: true, Lifecycle: l, ToolsImage: b.Image(ImagePostgreSQL)})
			if err != nil {
				t.Fatalf("%s, %s: %v", name, phase, err)
			}
			if l != nil && objs.Job == nil {
				t.Fatalf("%s, %s: no Job rendered", name, phase)
			}
			for _, o := range objs.All() {
				data, err := json.Marshal(o)
				if err != nil {
					t.Fatal(err)
				}
				var v any
				if err := json.Unmarshal(data, &v); err != nil {
					t.Fatal(err)
				}
				kind, _ := v.(map[string]any)["kind"].(string)
				containerImages(v, func(container, image string) {
					found[image] = append(found[image], fmt.Sprintf("%s (%s): %s container %s", name, phase, kind, container))
				})
			}
		}
	}
	return found
}

// containerImages calls f with the name and image of every container, init container and ephemeral
// container anywhere in v (a rendered object as JSON).
func containerImages(v any, f func(container, image string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if list, ok := child.([]any); ok && (k == "containers" || k == "initContainers" || k == "ephemeralContainers") {
				for _, c := range list {
					c, _ := c.(map[string]any)
					name, _ := c["name"].(string)
					image, _ := c["image"].(string)
					f(name, image)
				}
				continue
			}
			containerImages(child, f)
		}
	case []any:
		for _, child := range v {
			containerImages(child, f)
		}
	}
}

// Every container the operator renders with the built-in defaults runs an image of BuiltinImages
// (so the bundle's relatedImages, generated from it, lists it), and every image of the list is run.
func TestBuiltinImagesAreEveryRenderedImage(t *testing.T) {
	g := NewWithT(t)
	declared := map[string]bool{}
	for _, bi := range BuiltinImages() {
		declared[bi.Default] = true
	}
	found := renderedImages(t, DefaultBuiltins())
	var undeclared []string
	for image, where := range found {
		if !declared[image] {
			sort.Strings(where)
			undeclared = append(undeclared, fmt.Sprintf("%q (%s)", image, strings.Join(where, "; ")))
		}
	}
	sort.Strings(undeclared)
	g.Expect(undeclared).To(BeEmpty(), "images rendered by default but missing from expansion.BuiltinImages (add them there)")
	g.Expect(slices.Sorted(maps.Keys(found))).To(ConsistOf(slices.Sorted(maps.Keys(declared))), "a declared built-in image no container runs")
}

// With every built-in image replaced (RELATED_IMAGE_<ROLE>), no rendered container runs a built-in
// one: the replacement reaches the Jobs' tools image too.
func TestReplacedBuiltinImagesReachEveryContainer(t *testing.T) {
	g := NewWithT(t)
	images := map[string]string{}
	for _, bi := range BuiltinImages() {
		images[bi.Role] = "registry.example.org/mirror/" + bi.Role + ":1"
	}
	b, err := DefaultBuiltins().WithImages(images)
	g.Expect(err).NotTo(HaveOccurred())
	found := renderedImages(t, b)
	g.Expect(slices.Sorted(maps.Keys(found))).To(ConsistOf(slices.Sorted(maps.Values(images))))
}
