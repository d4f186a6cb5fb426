package render

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestBuildPodAnnotation(t *testing.T) {
	for _, tc := range []struct {
		set       string
		key, val  string
		wantAdded bool
	}{
		{set: "", wantAdded: false},
		{set: "no-equals-sign", wantAdded: false},
		{set: "=value-without-key", wantAdded: false},
		{set: "example.org/build=prime", key: "example.org/build", val: "prime", wantAdded: true},
		{set: "example.org/build=a=b", key: "example.org/build", val: "a=b", wantAdded: true},
	} {
		t.Run(tc.set, func(t *testing.T) {
			g := NewWithT(t)
			old := buildPodAnnotation
			t.Cleanup(func() { buildPodAnnotation = old })
			buildPodAnnotation = tc.set
			k, v, ok := BuildPodAnnotation()
			g.Expect(ok).To(Equal(tc.wantAdded))
			g.Expect(k).To(Equal(tc.key))
			g.Expect(v).To(Equal(tc.val))
		})
	}
}
