package rollout

import (
	"testing"

	. "github.com/onsi/gomega"
)

// sts is a StatefulSet's content with the given pod annotations, container image and environment.
func sts(annotations map[string]any, image string, env ...map[string]any) map[string]any {
	envs := make([]any, len(env))
	for i, e := range env {
		envs[i] = e
	}
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"spec": map[string]any{
			"replicas": int64(1),
			"template": map[string]any{
				"metadata": map[string]any{"annotations": annotations},
				"spec": map[string]any{
					"containers": []any{map[string]any{
						"name": "tiled", "image": image, "env": envs,
						"ports": []any{map[string]any{"name": "http", "containerPort": int64(8000)}},
					}},
					"securityContext": map[string]any{},
				},
			},
		},
	}
}

// defaulted is s as the API server stores it: defaults added.
func defaulted(s map[string]any) map[string]any {
	c := nested(s, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	c["terminationMessagePath"] = "/dev/termination-log"
	c["imagePullPolicy"] = "IfNotPresent"
	c["ports"].([]any)[0].(map[string]any)["protocol"] = "TCP"
	nested(s, "spec", "template", "spec").(map[string]any)["dnsPolicy"] = "ClusterFirst"
	delete(nested(s, "spec", "template", "spec").(map[string]any), "securityContext")
	return s
}

func TestTemplateDiff(t *testing.T) {
	ann := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	env := func(n, v string) map[string]any { return map[string]any{"name": n, "value": v} }
	const owned = `{"f:metadata":{"f:annotations":{".":{},"f:tiled.blueskyproject.io/intent":{}}},
		"f:spec":{"f:replicas":{},"f:template":{"f:metadata":{"f:annotations":{"f:config-hash":{},"f:old.example/gone":{}}},
		"f:spec":{"f:containers":{"k:{\"name\":\"tiled\"}":{".":{},"f:image":{},"f:name":{},
		"f:env":{"k:{\"name\":\"A\"}":{".":{},"f:name":{},"f:value":{}},"k:{\"name\":\"OLD\"}":{".":{},"f:name":{},"f:value":{}}}}}}}}}`
	for _, tc := range []struct {
		name          string
		desired, live map[string]any
		owned         string
		want          []string
	}{
		{
			name:    "the same intent on a defaulted object: nothing differs",
			desired: sts(ann("config-hash", "1"), "tiled:1", env("A", "a")),
			live:    defaulted(sts(ann("config-hash", "1"), "tiled:1", env("A", "a"))),
			want:    []string{},
		},
		{
			name:    "an annotation added, an image and a variable changed",
			desired: sts(ann("config-hash", "1", "example.org/build", "prime"), "tiled:2", env("A", "b"), env("B", "b")),
			live:    defaulted(sts(ann("config-hash", "1"), "tiled:1", env("A", "a"))),
			want: []string{
				"spec.template.metadata.annotations[example.org/build]",
				"spec.template.spec.containers[tiled].env[A].value",
				"spec.template.spec.containers[tiled].env[B]",
				"spec.template.spec.containers[tiled].image",
			},
		},
		{
			name:    "fields the operator set before and renders no more: removed",
			desired: sts(ann("config-hash", "1"), "tiled:1", env("A", "a")),
			live:    defaulted(sts(ann("config-hash", "1", "old.example/gone", "x", "kubectl.kubernetes.io/restartedAt", "now"), "tiled:1", env("A", "a"), env("OLD", "o"))),
			owned:   owned,
			want: []string{
				"spec.template.metadata.annotations[old.example/gone]",
				"spec.template.spec.containers[tiled].env[OLD]",
			},
		},
		{
			name:    "others' fields (not the operator's) are not removals",
			desired: sts(ann("config-hash", "1"), "tiled:1", env("A", "a")),
			live:    defaulted(sts(ann("config-hash", "1", "kubectl.kubernetes.io/restartedAt", "now"), "tiled:1", env("A", "a"))),
			owned:   owned,
			want:    []string{"spec.template.metadata.annotations[old.example/gone]", "spec.template.spec.containers[tiled].env[OLD]"},
		},
		{
			name: "a change outside the template (replicas) is none of the template's",
			desired: func() map[string]any {
				s := sts(ann("config-hash", "1"), "tiled:1")
				s["spec"].(map[string]any)["replicas"] = int64(3)
				return s
			}(),
			live: defaulted(sts(ann("config-hash", "1"), "tiled:1")),
			want: []string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var owned []byte
			if tc.owned != "" {
				owned = []byte(tc.owned)
			}
			got, err := TemplateDiff(tc.desired, tc.live, owned)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
