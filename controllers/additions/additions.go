package additions

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Child is a child object of an instance, by kind and name (its namespace is the instance's).
type Child struct {
	Kind, Name string
}

// String is Kind/name, as the status and the Event name it.
func (c Child) String() string { return c.Kind + "/" + c.Name }

// Added is what a change of the rendered children adds to an instance.
type Added struct {
	// Objects are the desired children not present, as Kind/name, sorted.
	Objects []string
	// Images are the desired images no live StatefulSet runs, sorted.
	Images []string
}

// Empty says the change adds nothing.
func (a Added) Empty() bool { return len(a.Objects) == 0 && len(a.Images) == 0 }

// Find compares the desired children want with those present (present says whether the cluster
// holds a child), and the images of the desired pod templates wantImages with those of the live
// ones liveImages. A child listed twice, or an image run by several containers, is named once.
func Find(want []Child, present func(Child) bool, wantImages, liveImages []string) Added {
	var a Added
	for _, c := range want {
		if !present(c) {
			a.Objects = append(a.Objects, c.String())
		}
	}
	for _, img := range wantImages {
		if img != "" && !slices.Contains(liveImages, img) {
			a.Images = append(a.Images, img)
		}
	}
	slices.Sort(a.Objects)
	slices.Sort(a.Images)
	a.Objects, a.Images = slices.Compact(a.Objects), slices.Compact(a.Images)
	return a
}

// Describe is the phrase the RenderChanged Event and the RolloutPending condition say it with:
// "it adds images X, Y and objects StatefulSet/a, Service/b" ("" when nothing is added).
func Describe(a Added) string {
	var parts []string
	if len(a.Images) > 0 {
		parts = append(parts, plural(len(a.Images), "image")+" "+strings.Join(a.Images, ", "))
	}
	if len(a.Objects) > 0 {
		parts = append(parts, plural(len(a.Objects), "object")+" "+strings.Join(a.Objects, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "it adds " + strings.Join(parts, " and ")
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// TemplateImages are the images of the containers and init containers of the pod template of a
// workload rendered as unstructured content (spec.template.spec of a StatefulSet, Deployment or
// Job), in their order; none for an object without a pod template.
func TemplateImages(obj map[string]any) []string {
	var out []string
	for _, field := range []string{"initContainers", "containers"} {
		cs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", field)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				if img, ok := m["image"].(string); ok && img != "" {
					out = append(out, img)
				}
			}
		}
	}
	return out
}

// PodImages are the images of the containers and init containers of a pod spec, in their order.
func PodImages(spec *corev1.PodSpec) []string {
	var out []string
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if c.Image != "" {
				out = append(out, c.Image)
			}
		}
	}
	return out
}

// Limit keeps the first n objects and the first n images of a.
func Limit(a Added, n int) Added {
	a.Objects, a.Images = a.Objects[:min(len(a.Objects), n)], a.Images[:min(len(a.Images), n)]
	return a
}
