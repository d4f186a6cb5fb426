package webhooks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// The TiledInstance webhooks leave out the instances the operator manages by an objectSelector on
// v1alpha1.LabelManagedBy. The selector is written as a literal in the markers (markers.go), so the
// generated configurations are checked against the constant.
func TestInstanceWebhooksLeaveOutManagedInstances(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join("..", "config", "webhook", "manifests.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: v1alpha1.LabelManagedBy, Operator: metav1.LabelSelectorOpNotIn, Values: []string{v1alpha1.ManagedByValue},
	}}}
	selected := map[string]*metav1.LabelSelector{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cfg struct {
			Kind     string `json:"kind"`
			Webhooks []struct {
				Name           string                                       `json:"name"`
				Rules          []admissionregistrationv1.RuleWithOperations `json:"rules"`
				ObjectSelector *metav1.LabelSelector                        `json:"objectSelector"`
			} `json:"webhooks"`
		}
		g.Expect(yaml.Unmarshal([]byte(doc), &cfg)).To(Succeed())
		for _, w := range cfg.Webhooks {
			for _, r := range w.Rules {
				if len(r.Resources) == 1 && r.Resources[0] == "tiledinstances" {
					selected[cfg.Kind+"/"+w.Name] = w.ObjectSelector
				}
			}
		}
	}
	// The approval webhook selects the instances that carry an approval instead, managed ones
	// included (approval.go).
	approval := selected["MutatingWebhookConfiguration/mtiledinstanceapproval.tiled.blueskyproject.io"]
	g.Expect(approval).To(Equal(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: v1alpha1.LabelApprove, Operator: metav1.LabelSelectorOpExists}}}), "the approval webhook")
	delete(selected, "MutatingWebhookConfiguration/mtiledinstanceapproval.tiled.blueskyproject.io")
	g.Expect(selected).To(HaveLen(2), "the mutating and the validating TiledInstance webhooks")
	for name, s := range selected {
		g.Expect(s).To(Equal(want), name)
	}
}
