package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

type rbacRule = rbacv1.PolicyRule

// copyRoot copies config/ into dir, with the manager image tagged tag, and returns dir.
func copyRoot(t *testing.T, dir, tag string) string {
	t.Helper()
	src := filepath.Join(root, "config")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == filepath.Join("config", "manager", "kustomization.yaml") {
			data = []byte(strings.Replace(string(data), "newTag: "+Version, "newTag: "+tag, 1))
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
