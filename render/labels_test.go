package render

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

func TestLabelsOnEveryObject(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Render(f.ti(), f.in)
			g.Expect(err).NotTo(HaveOccurred())
			y, _ := objectsYAML(o)
			for _, doc := range strings.Split(string(y), "---\n")[1:] {
				var obj struct {
					Kind     string            `json:"kind"`
					Metadata metav1.ObjectMeta `json:"metadata"`
				}
				g.Expect(yaml.Unmarshal([]byte(doc), &obj)).To(Succeed())
				for _, l := range []string{v1alpha1.LabelAppName, v1alpha1.LabelAppInstance, v1alpha1.LabelAppComponent,
					v1alpha1.LabelManagedBy, v1alpha1.LabelCluster, v1alpha1.LabelInstance} {
					g.Expect(obj.Metadata.Labels).To(HaveKey(l), "%s %s", obj.Kind, obj.Metadata.Name)
				}
				g.Expect(obj.Metadata.Labels[v1alpha1.LabelManagedBy]).To(Equal(v1alpha1.ManagedByValue))
			}
		})
	}
}

func TestPodLabelsCannotReplaceOperatorLabels(t *testing.T) {
	g := NewWithT(t)
	o, _ := Render(nfsScaled(), Inputs{})
	g.Expect(o.StatefulSet.Spec.Template.Labels).To(HaveKeyWithValue(v1alpha1.LabelAppName, AppName))
	g.Expect(o.StatefulSet.Spec.Template.Labels).To(HaveKeyWithValue("team", "data"))
}
