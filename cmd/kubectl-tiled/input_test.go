package main

import (
	"bytes"
	"encoding/json"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

var (
	gitopsBase = filepath.Join("testdata", "gitops", "base")
	gitopsBump = filepath.Join("testdata", "gitops", "overlays", "bump")
	samples    = filepath.Join("..", "..", "config", "samples")
)

// TestMain keeps the user's kubeconfig out of the tests: without one, the namespace of objects that
// name none is "default", as kubectl's.
func TestMain(m *testing.M) {
	os.Setenv("KUBECONFIG", filepath.Join(os.TempDir(), "kubectl-tiled-test-no-kubeconfig"))
	os.Exit(m.Run())
}

// A GitOps folder: kustomization files, Namespaces and Secrets beside the tiled-operator objects.
// -f on the folder, -k on an overlay and kubectl kustomize piped to -f - read the same objects; what
// is not the operator's is skipped with a note.
func TestInputGitOpsFolder(t *testing.T) {
	cases := []struct {
		name   string
		stdin  func(t *testing.T) string
		args   []string
		notes  []string
		images []string // the facility image of each instance
	}{
		{
			name: "folder", args: []string{"expand", "-f", gitopsBase, "-n", "nsls2"},
			notes: []string{
				"note: skipped " + filepath.Join(gitopsBase, "kustomization.yaml") + ": a kustomization (read what it builds with -k " + gitopsBase + ")\n",
				`note: skipped Namespace "nsls2" (` + filepath.Join(gitopsBase, "namespace.yaml") + ": document 1): not a kind of tiled.blueskyproject.io\n",
				`note: skipped Secret "tiled-chx-orcid" (` + filepath.Join(gitopsBase, "namespace.yaml") + ": document 2): not a kind of tiled.blueskyproject.io\n",
			},
			images: []string{"0.2.20", "0.2.20"},
		},
		{
			name: "kustomize base", args: []string{"expand", "-k", gitopsBase},
			notes:  []string{`note: skipped Namespace "nsls2" (` + gitopsBase + ": document 1)"},
			images: []string{"0.2.20", "0.2.20"},
		},
		{
			name: "kustomize overlay", args: []string{"expand", "-k", gitopsBump},
			notes:  []string{`note: skipped Secret "tiled-chx-orcid" (` + gitopsBump + ": document 2)"},
			images: []string{"0.2.21", "0.2.21"},
		},
		{
			name: "kubectl kustomize | expand -f -", args: []string{"expand", "-f", "-"},
			stdin: func(t *testing.T) string {
				out, err := exec.Command("kubectl", "kustomize", gitopsBump).Output()
				if err != nil {
					t.Fatalf("kubectl kustomize: %v", err)
				}
				return string(out)
			},
			notes:  []string{`note: skipped Namespace "nsls2" (<stdin>: document 1)`},
			images: []string{"0.2.21", "0.2.21"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			stdin := ""
			if tc.stdin != nil {
				stdin = tc.stdin(t)
			}
			code, out, errOut := runCmd(stdin, tc.args...)
			g.Expect(code).To(Equal(0), errOut)
			for _, n := range tc.notes {
				g.Expect(errOut).To(ContainSubstring(n))
			}
			g.Expect(errOut).NotTo(ContainSubstring("error"))
			var images []string
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "    image: ghcr.io/bluesky/tiled:") {
					images = append(images, strings.TrimPrefix(line, "    image: ghcr.io/bluesky/tiled:"))
				}
			}
			g.Expect(images).To(Equal(tc.images))
			g.Expect(out).To(ContainSubstring("  name: nsls2-chx\n  namespace: nsls2\n"))
		})
	}
}

// The samples folder holds a kustomization.yaml: -f on it and -k on it give the same instances.
// -k builds it with the order its sortOptions give, and kustomize prints no warning (it warns, on
// the process's log, when a caller also asks for its legacy order, as kubectl apply -k does).
func TestExpandSamples(t *testing.T) {
	g := NewWithT(t)
	code, byFolder, errOut := runCmd("", "expand", "-f", samples)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(errOut).To(ContainSubstring("note: skipped " + filepath.Join(samples, "kustomization.yaml")))
	var logged bytes.Buffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&logged)
	code, byKustomize, errOut := runCmd("", "expand", "-k", samples)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(errOut).To(BeEmpty())
	g.Expect(logged.String()).To(BeEmpty(), "kustomize's warnings")
	g.Expect(byKustomize).To(Equal(byFolder))
	g.Expect(strings.Count(byFolder, "kind: TiledInstance\n")).To(Equal(6))
}

// -f on a folder that holds only a kustomization reads nothing: the error says to use -k.
func TestFolderWithOnlyAKustomization(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	kustomization, err := os.ReadFile(filepath.Join(samples, "kustomization.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "kustomization.yaml"), kustomization, 0o600)).To(Succeed())
	for _, cmd := range [][]string{{"expand", "-f", dir}, {"why", "-f", dir, "chx", "spec"}, {"diff", "-f", dir}} {
		code, out, errOut := runCmd("", cmd...)
		g.Expect(code).NotTo(Equal(0), cmd[0])
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(ContainSubstring("error: "+dir+" holds only a kustomization: to read what it builds, use -k "+dir+"\n"), cmd[0])
		g.Expect(errOut).NotTo(ContainSubstring("You must provide one or more resources"))
		g.Expect(errOut).NotTo(ContainSubstring("note: skipped"), "the error says it")
	}
	// Beside another file, the kustomization is skipped with a note and the file is read.
	g.Expect(os.WriteFile(filepath.Join(dir, "profile.yaml"), []byte("apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledProfile\nmetadata: {name: p}\nspec: {}\n"), 0o600)).To(Succeed())
	code, _, errOut := runCmd("", "expand", "-f", dir)
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring("note: skipped " + filepath.Join(dir, "kustomization.yaml") + ": a kustomization (read what it builds with -k " + dir + ")"))
	g.Expect(errOut).To(ContainSubstring("error: no TiledCluster or TiledInstance in " + dir))
}

// -o: yaml is the engine's rendering (the default), json one List, name kubectl's resource/name.
func TestExpandOutput(t *testing.T) {
	g := NewWithT(t)
	want := string(engine(t))
	code, out, _ := runCmd("", "expand", "-f", fleetDir, "-o", "yaml")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(Equal(want))

	code, out, _ = runCmd("", "expand", "-f", fleetDir, "-o", "json")
	g.Expect(code).To(Equal(0))
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Provenance map[string]string `json:"provenance"`
		} `json:"items"`
	}
	g.Expect(json.Unmarshal([]byte(out), &list)).To(Succeed())
	g.Expect(list.Kind).To(Equal("List"))
	g.Expect(list.Items).To(HaveLen(30))
	g.Expect(list.Items[0].Kind).To(Equal("TiledInstance"))
	g.Expect(list.Items[0].Provenance).NotTo(BeEmpty())

	code, out, _ = runCmd("", "expand", "-f", fleetDir, "-o", "name")
	g.Expect(code).To(Equal(0))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(30))
	g.Expect(lines).To(ContainElement("tiledinstance.tiled.blueskyproject.io/nsls2-chx"))

	code, _, errOut := runCmd("", "expand", "-f", fleetDir, "-o", "wide")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring(`unable to match a printer suitable for the output format "wide"`))
}

// -n: the namespace of objects that name none, in every command; given explicitly, an object of
// another namespace is refused, as kubectl apply refuses it.
func TestNamespace(t *testing.T) {
	g := NewWithT(t)
	code, out, errOut := runCmd("", "expand", "-f", gitopsBase)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("  name: nsls2-chx\n  namespace: default\n"))

	code, out, errOut = runCmd("", "expand", "-f", gitopsBase, "-n", "beamlines")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("  name: nsls2-chx\n  namespace: beamlines\n"))

	code, out, errOut = runCmd("", "why", "-n", "beamlines", "-f", gitopsBase, "chx", "spec.storage.data.size")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring(`"50Gi"`))

	code, _, errOut = runCmd("", "expand", "-f", fleetDir, "-n", "beamlines")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring(`the namespace from the provided object "nsls2" does not match the namespace "beamlines". You must pass '--namespace=nsls2'`))

	// import-helm: -n is the namespace of the objects it writes; without it they name none.
	code, out, _ = runCmd("", "import-helm", chartDefaultsFile, "-n", "beamlines")
	g.Expect(code).To(Equal(0))
	g.Expect(strings.Count(out, "  namespace: beamlines\n")).To(Equal(2))
	code, out, _ = runCmd("", "import-helm", chartDefaultsFile)
	g.Expect(code).To(Equal(0))
	g.Expect(out).NotTo(ContainSubstring("namespace:"))
}

// Objects the API server refuses are refused offline, naming the file, the document, the object,
// the field and why; a value of the wrong type names the type expected and the one found.
func TestExpandRefusesWhatTheClusterRefuses(t *testing.T) {
	const head = "apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledInstance\n"
	cases := []struct {
		name, doc string
		want      []string
	}{
		{name: "negative replicas", doc: head + "metadata: {name: demo}\nspec: {tiled: {replicas: -3}}\n",
			want: []string{"document 2: TiledInstance/demo: spec.tiled.replicas: Invalid value: -3", "greater than or equal to 1"}},
		{name: "size that is not a quantity", doc: head + "metadata: {name: demo}\nspec: {storage: {data: {size: lots}}}\n",
			want: []string{"document 2: TiledInstance/demo", "spec.storage.data.size", "lots"}},
		{name: "relative mount path", doc: head + "metadata: {name: demo}\nspec:\n  storage:\n    readOnlyMounts:\n    - {name: raw, mountPath: data/raw, existingClaimName: raw}\n",
			want: []string{"document 2: TiledInstance/demo", "spec.storage.readOnlyMounts", "mountPath"}},
		{name: "uppercase name", doc: head + "metadata: {name: Demo}\nspec: {}\n",
			want: []string{"document 2: TiledInstance/Demo: metadata.name: Invalid value: \"Demo\"", "lowercase RFC 1123"}},
		{name: "YAML 1.1 boolean", doc: head + "metadata: {name: demo}\nspec: {tiled: {podLabels: {f: y}}}\n",
			want: []string{"document 2: TiledInstance/demo: instance: spec.tiled.podLabels.f: expected string, got boolean true (YAML reads unquoted y, yes, on"}},
		{name: "list for a string", doc: head + "metadata: {name: demo}\nspec: {tiled: {image: [a, b]}}\n",
			want: []string{"document 2: TiledInstance/demo: instance: spec.tiled.image: expected string, got a list"}},
		// Metadata, as the API server validates every object's (apimachinery's ValidateObjectMeta).
		{name: "label value of 64 characters", doc: head + "metadata: {name: demo, labels: {team: " + strings.Repeat("a", 64) + "}}\nspec: {}\n",
			want: []string{`document 2: TiledInstance/demo: metadata.labels: Invalid value: "` + strings.Repeat("a", 64) + `": must be no more than 63`}},
		{name: "label key with a space", doc: head + "metadata: {name: demo, labels: {\"bad key\": x}}\nspec: {}\n",
			want: []string{`document 2: TiledInstance/demo: metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters`}},
		{name: "annotation key Bad Key!", doc: head + "metadata: {name: demo, annotations: {\"Bad Key!\": v}}\nspec: {}\n",
			want: []string{`document 2: TiledInstance/demo: metadata.annotations: Invalid value: "Bad Key!": name part must consist of alphanumeric characters`}},
		// A quantity that does not parse: its field and value, in the layer that sets it.
		{name: "memory that is not a quantity", doc: head + "metadata: {name: demo}\nspec: {tiled: {resources: {requests: {memory: 12 Gi}}}}\n",
			want: []string{`document 2: TiledInstance/demo: instance: spec.tiled.resources.requests.memory: Invalid value: "12 Gi": quantities must match the regular expression`}},
		{name: "override that is not a quantity", doc: "apiVersion: tiled.blueskyproject.io/v1alpha1\nkind: TiledCluster\nmetadata: {name: demo}\nspec:\n  profileSelector: {}\n  instances:\n  - {name: chx, overrides: {database: {managed: {resources: {limits: {cpu: two}}}}}}\n",
			want: []string{`document 2: TiledCluster/demo: instance/chx/overrides: spec.database.managed.resources.limits.cpu: Invalid value: "two": quantities must match the regular expression`}},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			// Document 1 is a Namespace (skipped): the refusal counts it.
			g.Expect(os.WriteFile(file, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\n"+tc.doc), 0o600)).To(Succeed())
			code, out, errOut := runCmd("", "expand", "-f", fleetProfile, "-f", file)
			g.Expect(code).To(Equal(1))
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(ContainSubstring("error: " + file + ": "))
			for _, w := range tc.want {
				g.Expect(errOut).To(ContainSubstring(w))
			}
			g.Expect(errOut).NotTo(ContainSubstring("valueUnstructured"))
		})
	}
}

// The admission webhooks' warnings are printed, as kubectl apply prints them.
func TestExpandWarnings(t *testing.T) {
	g := NewWithT(t)
	file := filepath.Join(t.TempDir(), "latest.yaml")
	g.Expect(os.WriteFile(file, []byte(`apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledProfile
metadata: {name: p, labels: {a: b}}
spec:
  tiled: {image: "ghcr.io/bluesky/tiled:latest"}
  auth: {allowAnonymousAccess: true}
---
apiVersion: tiled.blueskyproject.io/v1alpha1
kind: TiledCluster
metadata: {name: c}
spec:
  profileSelector: {}
  instances: [{name: x}, {name: z}]
`), 0o600)).To(Succeed())
	code, out, errOut := runCmd("", "expand", "-f", file, "-o", "name")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(Equal("tiledinstance.tiled.blueskyproject.io/c-x\ntiledinstance.tiled.blueskyproject.io/c-z\n"))
	g.Expect(errOut).To(Equal(`Warning: TiledProfile default/p: spec.tiled.image: "ghcr.io/bluesky/tiled:latest" uses the tag latest: each pod restart may run another version; pin a version, e.g. ghcr.io/bluesky/tiled:0.2.20
Warning: TiledProfile default/p: spec.tiled.image: "ghcr.io/bluesky/tiled:latest" does not say its Tiled version; assuming 0.2.20, the newest supported, for its configuration and upgrades; set spec.tiled.version
Warning: TiledProfile default/p: spec.auth.allowAnonymousAccess: true: anyone who reaches the service reads public data without credentials
Warning: TiledCluster default/c: instances x, z: spec.auth.allowAnonymousAccess: true: anyone who reaches the service reads public data without credentials
Warning: TiledCluster default/c: instances x, z: spec.backup: no target: nothing backs up the managed database (the catalog, tabular data and auth sessions); set spec.backup.claim or spec.backup.s3, best in a profile (docs/backups.md)
Warning: TiledCluster default/c: instances x, z: spec.tiled.image: "ghcr.io/bluesky/tiled:latest" does not say its Tiled version; assuming 0.2.20, the newest supported, for its configuration and upgrades; set spec.tiled.version
Warning: TiledCluster default/c: instances x, z: spec.tiled.image: "ghcr.io/bluesky/tiled:latest" uses the tag latest: each pod restart may run another version; pin a version, e.g. ghcr.io/bluesky/tiled:0.2.20
`))
}

func TestVersionAndCompletion(t *testing.T) {
	g := NewWithT(t)
	code, out, _ := runCmd("", "version")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(MatchRegexp(`^kubectl-tiled \S+\n`))
	g.Expect(out).To(ContainSubstring("default Tiled image: ghcr.io/bluesky/tiled:"))

	for shell, marker := range map[string]string{
		"bash": "__start_kubectl-tiled", "zsh": "#compdef kubectl-tiled", "fish": "complete -c kubectl-tiled",
		"powershell": "Register-ArgumentCompleter",
	} {
		code, out, errOut := runCmd("", "completion", shell)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(ContainSubstring(marker), shell)
	}
	code, _, _ = runCmd("", "completion", "tcsh")
	g.Expect(code).To(Equal(1))

	// The completion the scripts ask for: subcommands, and -o's formats.
	code, out, _ = runCmd("", "__complete", "ex")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("expand\t"))
	code, out, _ = runCmd("", "__complete", "completion", "")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("fish"))
}

func TestRootHelp(t *testing.T) {
	g := NewWithT(t)
	code, out, _ := runCmd("", "-h")
	g.Expect(code).To(Equal(0))
	g.Expect(out).NotTo(ContainSubstring("No cluster is contacted"))
	g.Expect(out).To(ContainSubstring("diff reads the cluster of the current kubeconfig"))
	for _, c := range []string{"expand", "why", "diff", "import-helm", "completion", "version"} {
		g.Expect(out).To(MatchRegexp(`\n  ` + c + ` +\S`))
	}
	g.Expect(out).To(ContainSubstring("-n, --namespace"))
}
