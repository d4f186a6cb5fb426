package additions

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

func TestFind(t *testing.T) {
	sts := func(name string) Child { return Child{Kind: "StatefulSet", Name: name} }
	svc := func(name string) Child { return Child{Kind: "Service", Name: name} }
	for _, tc := range []struct {
		name        string
		want        []Child
		present     []Child
		wantImages  []string
		liveImages  []string
		objects     []string
		images      []string
		description string
	}{
		{
			name:    "nothing new: the same children and images",
			want:    []Child{sts("tiled-chx"), svc("chx")},
			present: []Child{sts("tiled-chx"), svc("chx")}, wantImages: []string{"tiled:0.2.20"}, liveImages: []string{"tiled:0.2.20"},
		},
		{
			name:       "a release adds the streaming cache: its objects and its image",
			want:       []Child{sts("tiled-chx"), svc("chx"), sts("cache-chx"), svc("cache-chx"), {Kind: "Secret", Name: "cache-chx"}},
			present:    []Child{sts("tiled-chx"), svc("chx")},
			wantImages: []string{"tiled:0.2.20", "valkey/valkey:8.1"}, liveImages: []string{"tiled:0.2.20", "postgres:16"},
			objects:     []string{"Secret/cache-chx", "Service/cache-chx", "StatefulSet/cache-chx"},
			images:      []string{"valkey/valkey:8.1"},
			description: "it adds image valkey/valkey:8.1 and objects Secret/cache-chx, Service/cache-chx, StatefulSet/cache-chx",
		},
		{
			name:    "a new image for an existing child, named once though two containers run it",
			want:    []Child{sts("tiled-chx")},
			present: []Child{sts("tiled-chx")}, wantImages: []string{"tools:2", "tiled:0.2.20", "tools:2"}, liveImages: []string{"tools:1", "tiled:0.2.20"},
			images:      []string{"tools:2"},
			description: "it adds image tools:2",
		},
		{
			name:    "a new kind only",
			want:    []Child{sts("tiled-chx"), {Kind: "PodDisruptionBudget", Name: "chx"}, {Kind: "NetworkPolicy", Name: "chx"}},
			present: []Child{sts("tiled-chx")}, wantImages: []string{"tiled:0.2.20"}, liveImages: []string{"tiled:0.2.20"},
			objects:     []string{"NetworkPolicy/chx", "PodDisruptionBudget/chx"},
			description: "it adds objects NetworkPolicy/chx, PodDisruptionBudget/chx",
		},
		{
			name:    "an image no longer used and an object removed add nothing",
			want:    []Child{sts("tiled-chx")},
			present: []Child{sts("tiled-chx"), sts("cache-chx")}, wantImages: []string{"tiled:0.2.20"}, liveImages: []string{"tiled:0.2.20", "valkey/valkey:8.1"},
		},
		{
			name: "an empty image is no image", want: []Child{sts("tiled-chx")}, present: []Child{sts("tiled-chx")},
			wantImages: []string{""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			present := func(c Child) bool {
				for _, p := range tc.present {
					if p == c {
						return true
					}
				}
				return false
			}
			a := Find(tc.want, present, tc.wantImages, tc.liveImages)
			g.Expect(a.Objects).To(Equal(tc.objects))
			g.Expect(a.Images).To(Equal(tc.images))
			g.Expect(a.Empty()).To(Equal(tc.objects == nil && tc.images == nil))
			g.Expect(Describe(a)).To(Equal(tc.description))
		})
	}
}

func TestTemplateImages(t *testing.T) {
	g := NewWithT(t)
	obj := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"initContainers": []any{map[string]any{"name": "migrate", "image": "tiled:0.2.20"}},
		"containers":     []any{map[string]any{"name": "tiled", "image": "tiled:0.2.20"}, map[string]any{"name": "sidecar", "image": "busybox:1"}, map[string]any{"name": "noimage"}},
	}}}}
	g.Expect(TemplateImages(obj)).To(Equal([]string{"tiled:0.2.20", "tiled:0.2.20", "busybox:1"}))
	g.Expect(TemplateImages(map[string]any{"data": map[string]any{"a": "b"}})).To(BeEmpty(), "a ConfigMap has no pod template")

	g.Expect(PodImages(&corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "a:1"}},
		Containers:     []corev1.Container{{Name: "c", Image: "b:1"}, {Name: "d"}},
	})).To(Equal([]string{"a:1", "b:1"}))
}

func TestLimit(t *testing.T) {
	g := NewWithT(t)
	a := Limit(Added{Objects: []string{"A/a", "B/b", "C/c"}, Images: []string{"x"}}, 2)
	g.Expect(a.Objects).To(Equal([]string{"A/a", "B/b"}))
	g.Expect(a.Images).To(Equal([]string{"x"}))
}
