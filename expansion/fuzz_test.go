package expansion

import (
	"bytes"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// FuzzExpand expands a cluster built from fuzzed fragments: two profiles (the second of a fuzzed
// priority, so that equal priorities and conflicts occur), a template and an override, each the
// YAML of an InstanceTemplate, and a fuzzed instance name. It checks that Expand does not panic,
// fails only with a typed error and no result, is deterministic (also with the profiles given in
// the other order), and that every leaf of every instance has a provenance entry and nothing else
// has one. It also checks that Expand agrees with the plain definition of an expansion
// (referenceExpandOne).
func FuzzExpand(f *testing.F) {
	f.Add("tiled: {image: 'x:1'}", "tiled: {image: 'x:2'}", int32(0), "", "", "chx")
	f.Add(`storage: {readOnlyMounts: [{name: p, nfs: {server: nfs, pathExpression: "'/data/' + instance.name"}}]}`,
		"storage: {readOnlyMounts: [{name: p, existingClaimName: c}]}", int32(1),
		"tiled: {env: [{name: A, valueExpression: 'cluster.name'}]}", "database: {external: {uriSecretRef: {name: s}}}", "amx")
	f.Add("expose: {ingress: {hostExpression: \"instance.name + '.example.org'\"}}", "expose: {ingress: {host: a.example.org}}",
		int32(0), "", "expose: {ingress: {enabled: false}}", "a")
	f.Add("config: {a: {b: 1}}", "config: {a: 2}", int32(0), "config: {c: [1, 2]}", "config: {a: {d: true}}", "x")
	f.Add("auth: {oidc: {providers: [{name: orcid}]}}", "auth: {singleUserAPIKey: {}}", int32(-1), "tiled: {tolerations: [{key: a}]}",
		"tiled: {env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k}}}]}", "x")
	f.Add("tiled: {env: [{name: A, valueExpression: \"instance.labels['missing']\"}]}", "", int32(0), "", "", "x")
	f.Add("storage: {data: {nfs: {pathExpression: '1 + 1'}}}", "", int32(0), "", "", "x")

	f.Fuzz(func(t *testing.T, a, b string, prioB int32, template, override, name string) {
		pa, pb := v1alpha1.TiledProfile{}, v1alpha1.TiledProfile{}
		if yaml.Unmarshal([]byte(a), &pa.Spec.InstanceTemplate) != nil ||
			yaml.Unmarshal([]byte(b), &pb.Spec.InstanceTemplate) != nil {
			t.Skip()
		}
		pa.Name, pb.Name = "a", "b"
		pa.Namespace, pb.Namespace = testNS, testNS
		pa.Labels = map[string]string{"facility": "test"}
		pb.Labels = pa.Labels
		pb.Spec.Priority = prioB
		c := C("", I(name, nil))
		if template != "" {
			c.Spec.Template = &v1alpha1.InstanceTemplate{}
			if yaml.Unmarshal([]byte(template), c.Spec.Template) != nil {
				t.Skip()
			}
		}
		if override != "" {
			c.Spec.Instances[0].Overrides = &v1alpha1.InstanceTemplate{}
			if yaml.Unmarshal([]byte(override), c.Spec.Instances[0].Overrides) != nil {
				t.Skip()
			}
		}
		res, err := Expand(c, []v1alpha1.TiledProfile{pa, pb}, DefaultBuiltins())
		res2, err2 := Expand(c, []v1alpha1.TiledProfile{pb, pa}, DefaultBuiltins())
		ref, errRef := referenceExpand(c, []v1alpha1.TiledProfile{pa, pb})
		if (err == nil) != (errRef == nil) {
			t.Fatalf("the fast and the reference expansions disagree: %v versus %v", err, errRef)
		}
		if err != nil {
			if res != nil {
				t.Fatalf("a result with the error %v", err)
			}
			if !isTyped(err) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("not deterministic: %v, then %v", err, err2)
			}
			return
		}
		if err2 != nil {
			t.Fatalf("not deterministic: success, then %v", err2)
		}
		out, err := Marshal(res.Objects()...)
		if err != nil {
			t.Fatal(err)
		}
		out2, err := Marshal(res2.Objects()...)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("not deterministic:\n%s\n---- versus ----\n%s", out, out2)
		}
		sameExpansion(NewWithT(t), t, res, ref)
		for _, in := range res.Instances {
			fields, err := Why(in.Object, "spec")
			if err != nil {
				t.Fatal(err)
			}
			if len(fields) != len(in.Object.Provenance) {
				t.Fatalf("%d leaves, %d provenance entries:\n%s", len(fields), len(in.Object.Provenance), out)
			}
			for _, f := range fields {
				if f.Source == "" {
					t.Fatalf("no provenance for %s:\n%s", f.Path, out)
				}
			}
		}
	})
}

func isTyped(err error) bool {
	var (
		se *SelectorError
		ne *NoProfilesError
		ce *ConflictError
		xe *ExpressionError
		ue *UnknownFieldError
		ie *InvalidFieldError
	)
	return errors.As(err, &se) || errors.As(err, &ne) || errors.As(err, &ce) || errors.As(err, &xe) ||
		errors.As(err, &ue) || errors.As(err, &ie)
}
