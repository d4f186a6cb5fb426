package webhooks_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
	"github.com/bluesky/tiled-operator/test/support/admissiontable"
)

func TestBadObjectsRefusedByHandlers(t *testing.T) {
	f := loadFixtures(t, ns)
	hs := handlers(f.reader())
	for _, tc := range admissiontable.HandlerCases() {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			resp := hs[tc.Handler].Handle(context.Background(), request(t, admissionv1.Create, tc.Object, nil))
			g.Expect(resp.Allowed).To(BeFalse(), "allowed: %+v", resp.Result)
			g.Expect(resp.Result).NotTo(BeNil())
			t.Log(resp.Result.Message)
			g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusUnprocessableEntity))
			for _, w := range tc.Want {
				g.Expect(resp.Result.Message).To(ContainSubstring(w))
			}
		})
	}
	if n := len(admissiontable.HandlerCases()); n < 20 {
		t.Fatalf("only %d bad objects", n)
	}
}

func TestValidObjectsPass(t *testing.T) {
	f := loadFixtures(t, ns)
	hs := handlers(f.reader())
	ctx := context.Background()
	for _, tc := range []struct {
		name, handler string
		obj           any
		warnings      []string
	}{
		{"each profile", "validate-profile", &f.Profiles[0], nil},
		{"the cluster", "validate-cluster", f.Cluster, nil},
		{"the terse instance", "validate-instance", f.Terse, nil},
		{"the terse instance (mutating)", "mutate", f.Terse, nil},
		{"a profile with suspicious settings", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  tiled: {image: "ghcr.io/bluesky/tiled:latest"}
  storage: {retention: Delete}
  database: {managed: {image: postgres}}
  auth: {allowAnonymousAccess: true}`, []string{
			`spec.tiled.image: "ghcr.io/bluesky/tiled:latest" uses the tag latest`,
			"spec.storage.retention: Delete",
			`spec.database.managed.image: "postgres" has no tag`,
			"spec.auth.allowAnonymousAccess: true"}},
		{"a cluster whose instances inherit suspicious settings", "validate-cluster", admissiontable.ClusterHead + `  profileSelector: {matchLabels: {facility: nsls2}}
  template: {expose: {ingress: {tlsSecretName: ""}}, tiled: {image: "ghcr.io/bluesky/tiled"}}
  instances: [{name: a}, {name: b}]`, []string{
			`TiledCluster beamlines/bad: spec.template: spec.tiled.image: "ghcr.io/bluesky/tiled" has no tag`,
			`TiledCluster beamlines/bad: instances a, b: spec.tiled.image`}},
		{"a cluster whose selector matches no profile yet", "validate-cluster", admissiontable.ClusterHead + `  profileSelector: {matchLabels: {facility: diamond}}
  instances: [{name: i22}]`, []string{"will report ProfilesResolved=False", "matches no TiledProfile"}},
		{"an expanded instance without limits", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20"}
provenance: {spec.tiled.image: instance}`, []string{"spec.tiled.resources: no limits"}},
		{"an expanded instance on a managed database without a backup target", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}}
  database: {managed: {image: "postgres:16"}}
provenance: {spec.tiled.image: instance}`, []string{"spec.backup: no target: nothing backs up the managed database"}},
		{"an expanded instance backed up on demand only, keeping one", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}}
  database: {managed: {image: "postgres:16"}}
  backup: {claim: {claimName: nfs-backups}, retention: {count: 1}}
provenance: {spec.tiled.image: instance}`, []string{"spec.backup.schedule: empty: backups are taken only on demand", "spec.backup.retention.count: 1"}},
		{"an expanded instance restoring a lost catalog from no target", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}}
  backup: {onCatalogLost: RestoreLatest}
provenance: {spec.tiled.image: instance}`, []string{"spec.backup.onCatalogLost: RestoreLatest, but spec.backup has no target"}},
		{"an expanded instance with an ingress host but enabled unset", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}}
  expose: {ingress: {className: nginx, host: a.example.org}}
provenance: {spec.tiled.image: instance}`, []string{"spec.expose.ingress.enabled: not set, but the ingress has a host: no Ingress is created"}},
		{"a profile with an untagged cache image and replicas beside an autoscaler", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  tiled: {replicas: 2, autoscaling: {enabled: true, maxReplicas: 4}}
  storage: {data: {accessModes: [ReadWriteMany]}}
  streaming: {managed: {image: valkey/valkey}}`, []string{
			`spec.streaming.managed.image: "valkey/valkey" has no tag`,
			"spec.tiled.replicas: 2 is ignored while spec.tiled.autoscaling is enabled"}},
		{"a profile restricting egress without naming the DNS pods' ports", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  networkPolicy: {egress: {restricted: true}}`, []string{"spec.networkPolicy.egress.restricted: DNS stays open on port 53 only"}},
		{"a profile with a short maintenance window", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  maintenance: {windows: [{schedule: "0 8 * * 2", duration: 8h}, {schedule: "0 22 * * *", duration: 10m, timeZone: Europe/London}]}`,
			[]string{"spec.maintenance.windows[1].duration: 10m0s is shorter than a Tiled upgrade with its backup and migration usually takes"}},
		{"a profile with a maintenance calendar", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  maintenance: {windows: [{schedule: "0 8 * * 2", duration: 8h, timeZone: America/New_York}], exclusions: [{name: run-1, start: "2027-01-12T08:00:00-05:00", end: "2027-04-30T08:00:00-04:00"}]}`, nil},
		{"a profile restricting egress with the DNS pods' ports", "validate-profile", admissiontable.ProfileHead + `  priority: 20
  networkPolicy: {egress: {restricted: true, dnsPorts: [53, 5353]}}`, nil},
		{"an expanded instance allowing egress that is open", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}}
  networkPolicy: {egress: {restricted: false, allow: [{ports: [{port: 443}]}]}}
provenance: {spec.tiled.image: instance}`, []string{"spec.networkPolicy.egress.allow: unused while egress is open"}},
		{"an expanded, autoscaled instance without a CPU request", "validate-instance", admissiontable.InstanceHead + `  tiled: {image: "ghcr.io/bluesky/tiled:0.2.20", resources: {limits: {memory: 1Gi}}, autoscaling: {enabled: true}}
  storage: {data: {accessModes: [ReadWriteMany]}}
provenance: {spec.tiled.image: instance}`, []string{"spec.tiled.autoscaling: the Tiled container has no CPU request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			resp := hs[tc.handler].Handle(ctx, request(t, admissionv1.Create, tc.obj, nil))
			g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
			for _, w := range tc.warnings {
				g.Expect(strings.Join(resp.Warnings, "\n")).To(ContainSubstring(w))
			}
			if tc.warnings == nil && tc.handler != "mutate" {
				g.Expect(resp.Warnings).To(BeEmpty())
			}
		})
	}
}

func TestMalformedRequests(t *testing.T) {
	f := loadFixtures(t, ns)
	for name, h := range handlers(f.reader()) {
		kind := map[string]string{"mutate": "TiledInstance", "validate-instance": "TiledInstance",
			"validate-profile": "TiledProfile", "validate-cluster": "TiledCluster"}[name]
		for _, tc := range []struct {
			name string
			req  admission.Request
		}{
			{"no object", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind: metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: kind}}}},
			{"not JSON", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: kind},
				Object: runtime.RawExtension{Raw: []byte("{not json")}}}},
			{"another kind", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"Pod"}`)}}}},
			{"another version", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v9", Kind: kind},
				Object: runtime.RawExtension{Raw: []byte(`{}`)}}}},
			{"a list where the object should be", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
				Kind:   metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: kind},
				Object: runtime.RawExtension{Raw: []byte(`[1,2]`)}}}},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				g := NewWithT(t)
				var resp admission.Response
				g.Expect(func() { resp = h.Handle(context.Background(), tc.req) }).NotTo(Panic())
				g.Expect(resp.Allowed).To(BeFalse())
				g.Expect(resp.Result.Code).To(BeNumerically(">=", 400))
				g.Expect(resp.Result.Code).To(BeNumerically("<", 500))
			})
		}
	}
}

// TestInstanceHandlersDecodeWithTheSchema: both instance handlers decode with the shared decoder
// (decodeRaw): a field the CRD does not declare is refused naming the object and the field, and an
// update whose old object is not JSON is a bad request for the mutating handler.
func TestInstanceHandlersDecodeWithTheSchema(t *testing.T) {
	f := loadFixtures(t, ns)
	for _, name := range []string{"mutate", "validate-instance"} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			h := handlers(f.reader())[name]
			req := request(t, admissionv1.Create, f.Terse, nil)
			req.Object.Raw = []byte(strings.Replace(string(req.Object.Raw), `"spec":{`, `"spec":{"imageTypo":"x",`, 1))
			g.Expect(string(req.Object.Raw)).To(ContainSubstring("imageTypo"))
			resp := h.Handle(context.Background(), req)
			g.Expect(resp.Allowed).To(BeFalse())
			g.Expect(resp.Result.Message).To(ContainSubstring("spec.imageTypo"))
			g.Expect(resp.Result.Message).To(ContainSubstring(f.Terse.Name))
		})
	}
	g := NewWithT(t)
	req := request(t, admissionv1.Update, f.Terse, f.Terse)
	req.OldObject.Raw = []byte("{not json")
	resp := handlers(f.reader())["mutate"].Handle(context.Background(), req)
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Code).To(BeNumerically("==", 400))
	g.Expect(resp.Result.Message).To(ContainSubstring("cannot decode the old TiledInstance"))
}
