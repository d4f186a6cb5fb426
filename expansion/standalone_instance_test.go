package expansion

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// A standalone instance is its own top layer over the profiles its selector picks (none without a
// selector) and the built-ins; its expressions see its name; the input is not modified.
func TestExpandInstance(t *testing.T) {
	g := NewWithT(t)
	in := &v1alpha1.TiledInstance{}
	in.Name, in.Namespace = "demo", testNS
	in.Spec.ProfileSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"facility": "test"}}
	in.Spec.InstanceTemplate = *T(t, "storage: {data: {size: 3Gi}}\nexpose: {ingress: {hostExpression: \"instance.name + '.example.org'\"}}")
	out, err := ExpandInstance(in, []v1alpha1.TiledProfile{P(t, "p", 0, "storage: {data: {size: 1Gi, storageClassName: fast}}")}, DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Spec.Storage.Data.Size).To(Equal("3Gi"))
	g.Expect(out.Spec.Expose.Ingress.Host).To(Equal("demo.example.org"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.storage.data.size", "instance"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.expose.ingress.host", "instance (expression)"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.storage.data.storageClassName", "profile/p@1"))
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.profileSelector", "instance"), "a label selector is atomic")
	g.Expect(out.Provenance).To(HaveKeyWithValue("spec.tiled.image", "default"))
	g.Expect(in.Spec.Storage.Data.StorageClassName).To(BeNil(), "the input is not modified")

	// Without a selector: built-in defaults and its own fields only.
	in.Spec.ProfileSelector = nil
	out, err = ExpandInstance(in, []v1alpha1.TiledProfile{P(t, "p", 0, "storage: {data: {storageClassName: fast}}")}, DefaultBuiltins())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Spec.Storage.Data.StorageClassName).To(BeNil())
}
