package packaging

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// rolesUnderTest are every Role and ClusterRole config/default renders, plus every file in
// config/rbac (the generated role.yaml included), so that a role left out of the kustomization is
// checked too.
func rolesUnderTest(t *testing.T) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	add := func(where string, o *unstructured.Unstructured) {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			return
		}
		var r rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &r, true); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		out[where+": "+key(o)] = r.Rules
	}
	for _, o := range renderDefault(t) {
		add("config/default", o)
	}
	files, _ := filepath.Glob(filepath.Join(root, "config", "rbac", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(root, "config", "rbac", "*", "*.yaml"))
	files = append(files, more...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			rel, _ := filepath.Rel(filepath.Join(root, "config", "rbac"), f)
			add(rel, o)
		}
	}
	if len(out) == 0 {
		t.Fatal("no roles found")
	}
	return out
}

func TestRBACHasNoWildcards(t *testing.T) {
	for where, rules := range rolesUnderTest(t) {
		for i, r := range rules {
			for field, values := range map[string][]string{
				"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups,
				"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
			} {
				for _, v := range values {
					if v == rbacv1.VerbAll || v == rbacv1.ResourceAll || v == "*/*" || (len(v) > 1 && v[len(v)-1] == '*') {
						t.Errorf("%s rule %d: wildcard %q in %s", where, i, v, field)
					}
				}
			}
			if len(r.Verbs) == 0 {
				t.Errorf("%s rule %d: no verbs", where, i)
			}
		}
	}
}

// No role can grant itself more: escalate, bind and impersonate are never granted, nor access to
// RBAC objects, and Secrets only with the verbs the operator's generated Secrets need (update only
// for the webhook CA Secret, by name).
func TestRBACLeastPrivilege(t *testing.T) {
	forbiddenVerbs := []string{"escalate", "bind", "impersonate", "deletecollection"}
	secretVerbs := []string{"create", "delete", "get", "list", "patch", "watch"}
	for where, rules := range rolesUnderTest(t) {
		for i, r := range rules {
			for _, v := range r.Verbs {
				if slices.Contains(forbiddenVerbs, v) {
					t.Errorf("%s rule %d grants %q", where, i, v)
				}
			}
			if slices.Contains(r.APIGroups, rbacv1.GroupName) {
				t.Errorf("%s rule %d grants access to RBAC objects", where, i)
			}
			if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
				for _, v := range r.Verbs {
					if v == "update" && slices.Equal(r.ResourceNames, []string{"tiled-operator-webhook-ca"}) {
						continue
					}
					if !slices.Contains(secretVerbs, v) {
						t.Errorf("%s rule %d grants %q on secrets", where, i, v)
					}
				}
			}
		}
	}
}
