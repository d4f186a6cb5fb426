package packaging

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// nonRootUID is the uid of distroless's "nonroot" user, which the Dockerfile runs the manager as.
const nonRootUID = 65532

// dockerfile returns the instructions of the Dockerfile's final stage, upper-cased keyword first.
func finalStage(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stage [][]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		fields := strings.Fields(line)
		fields[0] = strings.ToUpper(fields[0])
		if fields[0] == "FROM" {
			stage = nil
		}
		stage = append(stage, fields)
	}
	return stage
}

// The image's final stage is distroless static (or scratch), runs as a numeric non-root uid, and
// starts the binary the Deployment runs.
func TestDockerfile(t *testing.T) {
	stage := finalStage(t)
	base := stage[0][len(stage[0])-1]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("final stage is FROM %s, want gcr.io/distroless/static:nonroot or scratch", base)
	}
	var user, entrypoint string
	for _, ins := range stage {
		switch ins[0] {
		case "USER":
			user = ins[1]
		case "ENTRYPOINT":
			entrypoint = strings.Join(ins[1:], " ")
		case "RUN":
			t.Errorf("the final stage runs %v: it has no shell, and should need none", ins)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n != nonRootUID {
		t.Errorf("USER is %q, want the numeric %d:%d (the kubelet verifies runAsNonRoot with a numeric uid)", user, nonRootUID, nonRootUID)
	}
	dep := one[appsv1.Deployment](t, renderDefault(t), "Deployment")
	c := dep.Spec.Template.Spec.Containers[0]
	if entrypoint != `["/manager"]` || !slices.Equal(c.Command, []string{"/manager"}) {
		t.Errorf("image ENTRYPOINT %s and Deployment command %v must both be /manager", entrypoint, c.Command)
	}
	if u := dep.Spec.Template.Spec.SecurityContext.RunAsUser; u != nil && *u != nonRootUID {
		t.Errorf("Deployment runAsUser %d differs from the image's uid %d", *u, nonRootUID)
	}
	// The builder builds what this test builds.
	data, _ := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if !regexp.MustCompile(`CGO_ENABLED=0[^\n]*\\?\n?[^\n]*go build [^\n]*\./cmd/manager`).Match(data) {
		t.Error("the Dockerfile does not build ./cmd/manager with CGO_ENABLED=0")
	}
}

// The manager builds with CGO off into a static binary, which runs as the image's non-root uid.
func TestManagerBinaryIsStaticAndRunsAsNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager")
	}
	// Not t.TempDir(): its parent is private to the test's user, and the binary runs as another.
	dir, err := os.MkdirTemp("", "tiled-manager-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/manager")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the manager has a program interpreter: it is dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the manager needs shared libraries %v", libs)
	}

	cmd := exec.Command(bin, "--help")
	cmd.Dir = "/"
	cmd.Env = []string{} // nothing from the test's environment: no HOME, no KUBECONFIG
	uid := os.Geteuid()
	if uid == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonRootUID, Gid: nonRootUID}}
		uid = nonRootUID
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("manager --help as uid %d: %v\n%s", uid, err, out)
	}
	for _, flag := range []string{"-leader-elect", "-metrics-bind-address", "-health-probe-bind-address", "-metrics-secure", "-webhooks", "-cert-management", "-watch-namespaces"} {
		if !bytes.Contains(out, []byte(flag)) {
			t.Errorf("manager --help does not list %s:\n%s", flag, out)
		}
	}
	t.Logf("static manager ran --help as uid %d", uid)
}
