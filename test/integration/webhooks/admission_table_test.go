package webhooks_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/expansion"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

// tableNS is the namespace the admission table is tried in.
const tableNS = "admission"

// tableFixtures creates, in namespace, the objects of admissiontable.Fixtures and the TiledInstances
// their clusters' controller would stamp out (expanded, controller-owned, labelled as the operator
// labels them, so that the webhooks leave them alone), and waits until the webhooks' cache holds
// them all.
func tableFixtures(t testing.TB, s *server, namespace string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))).To(Succeed())
	var profiles []v1alpha1.TiledProfile
	var clusters []*v1alpha1.TiledCluster
	for _, file := range admissiontable.Fixtures() {
		r, err := os.Open(file)
		g.Expect(err).NotTo(HaveOccurred())
		objs, err := expansion.DecodeAll(file, r)
		r.Close()
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			switch o := o.(type) {
			case *v1alpha1.TiledProfile:
				o.Namespace = namespace
				g.Expect(env.Client.Create(ctx, o)).To(Succeed(), o.Name)
				profiles = append(profiles, *o)
			case *v1alpha1.TiledCluster:
				o.Namespace = namespace
				g.Expect(env.Client.Create(ctx, o)).To(Succeed(), o.Name)
				clusters = append(clusters, o)
			}
		}
	}
	instances := 0
	for _, c := range clusters {
		res, err := expansion.Expand(c, profiles, expansion.DefaultBuiltins())
		g.Expect(err).NotTo(HaveOccurred(), c.Name)
		for _, in := range res.Objects() {
			in.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TiledCluster",
				Name: c.Name, UID: c.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
			g.Expect(env.Client.Create(ctx, in)).To(Succeed(), in.Name)
			instances++
		}
	}
	g.Eventually(func(g Gomega) {
		var ps v1alpha1.TiledProfileList
		g.Expect(s.mgr.GetClient().List(ctx, &ps, client.InNamespace(namespace))).To(Succeed())
		g.Expect(ps.Items).To(HaveLen(len(profiles)))
		var cs v1alpha1.TiledClusterList
		g.Expect(s.mgr.GetClient().List(ctx, &cs, client.InNamespace(namespace))).To(Succeed())
		g.Expect(cs.Items).To(HaveLen(len(clusters)))
		var is v1alpha1.TiledInstanceList
		g.Expect(s.mgr.GetClient().List(ctx, &is, client.InNamespace(namespace))).To(Succeed())
		g.Expect(is.Items).To(HaveLen(instances))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestAdmissionTable tries every bad object of webhooks/testdata/admission against the real API
// server, with the CRDs and the webhooks installed as config/default installs them (their
// generated configurations, called over TLS), beside the fixtures: each is refused, and the
// refusal names the object, the field and the reason.
func TestAdmissionTable(t *testing.T) {
	cases, err := admissiontable.Load(admissiontable.Dir())
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, admissiontable.Generated()...)
	if len(cases) < 40 {
		t.Fatalf("only %d bad objects in %s", len(cases), admissiontable.Dir())
	}
	s := startWebhooks(t)
	tableFixtures(t, s, tableNS)
	refused := 0
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			u := &unstructured.Unstructured{}
			g.Expect(yaml.Unmarshal(tc.Object, &u.Object)).To(Succeed())
			u.SetNamespace(tableNS)
			err := env.Client.Create(context.Background(), u, client.DryRunAll, client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred(), "%s was admitted", tc.Description)
			msg := err.Error()
			t.Log(msg)
			g.Expect(msg).To(ContainSubstring(u.GetKind()), "the refusal names the kind")
			g.Expect(msg).To(ContainSubstring(u.GetName()), "the refusal names the object")
			g.Expect(msg).To(ContainSubstring(tc.Field), "the refusal names the field")
			for _, m := range tc.Messages {
				g.Expect(msg).To(ContainSubstring(m))
			}
			refused++
		})
	}
	t.Logf("%d of %d bad objects refused by the API server with the field named", refused, len(cases))
}
