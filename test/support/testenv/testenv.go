package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tiledv1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Options choose what Start runs beside kube-apiserver and etcd.
type Options struct {
	// ControllerManager also runs kube-controller-manager (garbage collector, namespace,
	// volume-protection and ClusterRole aggregation controllers), for tests that check what happens
	// to owned objects on deletion, or what the aggregated admin, edit and view roles allow.
	ControllerManager bool
	// Controllers replaces the kube-controller-manager controllers (its --controllers flag) when
	// ControllerManager is set; empty runs DefaultControllers.
	Controllers []string
	// AuditLog makes kube-apiserver write an audit log (every request at the Metadata level, one
	// JSON event per line) to Env.AuditLogPath, so that a benchmark counts requests on the server's
	// side too.
	AuditLog bool
	// SkipCRDs leaves the operator's CRDs out.
	SkipCRDs bool
	// APIServerFlags are extra kube-apiserver flags (name without "--" to value). Fleets of more
	// than about a hundred instances need a wider "service-cluster-ip-range" than envtest's default
	// 10.0.0.0/24 (254 ClusterIPs; every instance takes two).
	APIServerFlags map[string]string
}

// Env is a running control plane.
type Env struct {
	// Config reaches the apiserver as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client with the operator's scheme.
	Client client.Client
	// Clientset is a client-go clientset.
	Clientset kubernetes.Interface
	// Scheme holds client-go's types and the operator's.
	Scheme *k8sruntime.Scheme
	// Kubeconfig is the path of an administrator kubeconfig file, for kubectl.
	Kubeconfig string
	// AuditLogPath is the kube-apiserver's audit log with Options.AuditLog, else empty.
	AuditLogPath string

	env     *envtest.Environment
	dir     string
	kcm     *exec.Cmd
	kcmDone chan struct{}
	kcmLog  *bytes.Buffer

	// apiserver is the kube-apiserver RestartAPIServer started, which Stop stops (envtest stops the
	// one it started).
	apiserver     *exec.Cmd
	apiserverDone chan struct{}
	auditDir      string
}

// DefaultControllers are the kube-controller-manager controllers Options.ControllerManager runs
// unless Options.Controllers says otherwise.
var DefaultControllers = []string{"garbagecollector", "namespace", "pvc-protection", "pv-protection", "clusterrole-aggregation"}

// auditPolicy records every request once it is answered (watches once their response starts), at
// the Metadata level: who, which verb, which object, when; no bodies.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// RepoRoot is the root of the checkout this package was built from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// AssetsDir returns the folder holding kube-apiserver, etcd and kube-controller-manager: the user's
// KUBEBUILDER_ASSETS when set, otherwise the project's cache, built by hack/controlplane.sh if needed.
func AssetsDir() (string, error) {
	assetsOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			assetsDir = dir
			return
		}
		script := filepath.Join(RepoRoot(), "hack", "controlplane.sh")
		var stderr bytes.Buffer
		cmd := exec.Command("bash", script)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			assetsErr = fmt.Errorf("building the control plane with %s failed: %w\n%s", script, err, stderr.String())
			return
		}
		assetsDir = strings.TrimSpace(string(out))
	})
	if assetsErr != nil {
		return "", assetsErr
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assetsDir, b)); err != nil {
			return "", fmt.Errorf("control plane binary %s missing in %s (KUBEBUILDER_ASSETS or hack/controlplane.sh): %w", b, assetsDir, err)
		}
	}
	return assetsDir, nil
}

// NewScheme returns a scheme with client-go's types and the operator's.
func NewScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := tiledv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Start starts a control plane and installs the operator's CRDs.
func Start(opts Options) (*Env, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	e := &Env{Scheme: NewScheme()}
	auditDir := ""
	defer func() {
		if auditDir != "" && e.Config == nil {
			_ = os.RemoveAll(auditDir)
		}
	}()
	if opts.AuditLog {
		if auditDir, err = os.MkdirTemp("", "tiled-testenv-audit-"); err != nil {
			return nil, err
		}
		policy := filepath.Join(auditDir, "policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, err
		}
		e.auditDir = auditDir
		e.AuditLogPath = filepath.Join(auditDir, "audit.log")
		if opts.APIServerFlags == nil {
			opts.APIServerFlags = map[string]string{}
		}
		opts.APIServerFlags["audit-policy-file"] = policy
		opts.APIServerFlags["audit-log-path"] = e.AuditLogPath
		opts.APIServerFlags["audit-log-mode"] = "blocking"
		opts.APIServerFlags["audit-log-format"] = "json"
		// Never rotated: the apiserver's log library rotates at 100 MB by default, which a fleet of
		// 3,000 instances passes, and a reader of the log (the benchmark) would then read nothing
		// more. The unit is MB.
		opts.APIServerFlags["audit-log-maxsize"] = "1000000"
	}
	e.env = &envtest.Environment{
		BinaryAssetsDirectory: dir,
		ErrorIfCRDPathMissing: true,
		Scheme:                e.Scheme,
	}
	for k, v := range opts.APIServerFlags {
		e.env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	if !opts.SkipCRDs {
		e.env.CRDDirectoryPaths = []string{filepath.Join(RepoRoot(), "config", "crd", "bases")}
	}
	if opts.ControllerManager {
		if _, err := os.Stat(filepath.Join(dir, "kube-controller-manager")); err != nil {
			return nil, fmt.Errorf("kube-controller-manager missing in %s: run hack/controlplane.sh: %w", dir, err)
		}
	}
	cfg, err := e.env.Start()
	if err != nil {
		// envtest leaves kube-apiserver and etcd running when a later step (CRD install) fails.
		_ = e.env.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	e.Config = cfg
	ok := false
	defer func() {
		if !ok {
			_ = e.Stop()
		}
	}()

	if e.dir, err = os.MkdirTemp("", "tiled-testenv-"); err != nil {
		return nil, err
	}
	admin, err := e.env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding an admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, err
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme}); err != nil {
		return nil, err
	}
	if e.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if opts.ControllerManager {
		if err := e.startControllerManager(dir, opts.Controllers); err != nil {
			return nil, err
		}
	}
	ok = true
	return e, nil
}

// UserKubeconfig writes a kubeconfig that authenticates to the control plane as the user name, in
// the given groups (a client certificate the apiserver trusts), and returns its path. The user has
// no rights but those RBAC grants it: bind roles to name (or to one of groups) to test what a
// user who is not an administrator sees. The file goes when the control plane stops.
func (e *Env) UserKubeconfig(name string, groups ...string) (string, error) {
	if name == "" {
		return "", errors.New("UserKubeconfig: a user name is required")
	}
	user, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	file := strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, name)
	path := filepath.Join(e.dir, "kubeconfig-user-"+file)
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// startControllerManager runs kube-controller-manager with the controllers the tests rely on.
func (e *Env) startControllerManager(dir string, controllers []string) error {
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	e.kcmLog = &bytes.Buffer{}
	e.kcm = exec.Command(filepath.Join(dir, "kube-controller-manager"),
		"--kubeconfig="+e.Kubeconfig,
		"--authentication-kubeconfig="+e.Kubeconfig,
		"--authorization-kubeconfig="+e.Kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir="+filepath.Join(e.dir, "kcm-certs"),
		"--concurrent-gc-syncs=5",
		// The garbage collector deletes a fleet's children one request at a time (a read and a
		// delete each) through a client limited to --kube-api-qps: at the default 20 per second, a
		// 150-beamline fleet (about 3,000 children) takes minutes to go, and the fault trials that
		// delete fleets wait for it. A test API server serves more; what the trials assert does not
		// depend on how fast the collector is.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--v=1",
	)
	e.kcm.Stdout = e.kcmLog
	e.kcm.Stderr = e.kcmLog
	if err := e.kcm.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	e.kcmDone = make(chan struct{})
	go func() { _ = e.kcm.Wait(); close(e.kcmDone) }()

	// Ready when its health endpoint answers; it exits early on bad flags, which is reported.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-e.kcmDone:
			return fmt.Errorf("kube-controller-manager exited early:\n%s", tail(e.kcmLog.String(), 40))
		default:
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("kube-controller-manager did not start listening within 60s:\n%s", tail(e.kcmLog.String(), 40))
}

// ControllerManagerLog returns what kube-controller-manager printed so far.
func (e *Env) ControllerManagerLog() string {
	if e.kcmLog == nil {
		return ""
	}
	return e.kcmLog.String()
}

// Stop stops every process Start started and removes its files.
func (e *Env) Stop() error {
	var errs []error
	if e.kcm != nil && e.kcm.Process != nil {
		_ = e.kcm.Process.Signal(os.Interrupt)
		select {
		case <-e.kcmDone:
		case <-time.After(10 * time.Second):
			_ = e.kcm.Process.Kill()
			<-e.kcmDone
		}
	}
	if e.apiserver != nil {
		stopProcess(e.apiserver, e.apiserverDone)
	}
	if e.env != nil {
		if err := e.env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if e.dir != "" {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	if e.auditDir != "" {
		errs = append(errs, os.RemoveAll(e.auditDir))
	}
	return errors.Join(errs...)
}

// Kubectl runs kubectl against the control plane and returns its standard output and error. kubectl
// must be on PATH: its absence is an error.
func (e *Env) Kubectl(ctx context.Context, args ...string) (string, string, error) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return "", "", fmt.Errorf("kubectl is not on PATH: %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// WaitForResource waits until discovery serves the given resource (CRDs take a moment).
func (e *Env) WaitForResource(ctx context.Context, gvr schema.GroupVersionResource) error {
	for {
		list, err := e.Clientset.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err == nil {
			for _, r := range list.APIResources {
				if r.Name == gvr.Resource {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("resource %s not served: %w", gvr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePort returns a TCP port free on loopback now (for a server a test or tool starts next).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// RestartAPIServer stops kube-apiserver (SIGTERM, as a rolling restart of a control plane does),
// keeps it down for the given time, and starts it again with the same flags, certificates and port.
// etcd keeps running, so every object stays; clients built from Config work again once it answers.
// It returns when the restarted apiserver is ready. Linux only: it finds the process through /proc.
func (e *Env) RestartAPIServer(ctx context.Context, down time.Duration) error {
	var args []string
	if e.apiserver != nil {
		args = e.apiserver.Args
		stopProcess(e.apiserver, e.apiserverDone)
		e.apiserver = nil
	} else {
		pid, err := childProcess("kube-apiserver")
		if err != nil {
			return err
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return err
		}
		args = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		proc, err := os.FindProcess(pid)
		if err != nil {
			return err
		}
		if err := proc.Signal(syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping kube-apiserver: %w", err)
		}
		// envtest waits for (and so reaps) its own process; wait until it is gone. kube-apiserver
		// drains its requests first; past the grace period it is killed, as a crash would.
		if !waitGone(pid, 20*time.Second) {
			_ = proc.Kill()
			if !waitGone(pid, 20*time.Second) {
				return fmt.Errorf("kube-apiserver (pid %d) did not stop, even when killed", pid)
			}
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	// The port may take a moment to be free again after the old process closed it.
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = e.startAPIServer(args[0], args); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	for {
		if _, err := e.Clientset.Discovery().ServerVersion(); err == nil {
			if _, err := e.Clientset.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
				return nil
			}
		}
		select {
		case <-e.apiserverDone:
			return fmt.Errorf("the restarted kube-apiserver exited")
		case <-ctx.Done():
			return fmt.Errorf("the restarted kube-apiserver is not ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startAPIServer starts kube-apiserver with args and fails if it exits within a second.
func (e *Env) startAPIServer(path string, args []string) error {
	cmd := exec.Command(path, args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return fmt.Errorf("the restarted kube-apiserver exited at once:\n%s", tail(log.String(), 20))
	case <-time.After(time.Second):
	}
	e.apiserver, e.apiserverDone = cmd, done
	return nil
}

func stopProcess(cmd *exec.Cmd, done chan struct{}) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// childProcess finds the one running child process of this process whose executable is named name.
func childProcess(name string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("finding %s: %w", name, err)
	}
	me := os.Getpid()
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(st)
		rest := s[strings.LastIndex(s, ")")+1:]
		f := strings.Fields(rest)
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != me {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && filepath.Base(exe) == name {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no running %s started by this process", name)
}

// waitGone waits until process pid has exited (gone, or a zombie not yet reaped).
func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || procState(string(st)) == "Z" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func procState(stat string) string {
	f := strings.Fields(stat[strings.LastIndex(stat, ")")+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// Run is a test binary's TestMain on the real control plane: it sets the operator's logger (to the
// test output when TILED_TEST_LOG is set, discarded otherwise), starts the control plane into *env,
// runs the tests, stops everything and returns the exit code. A control plane that cannot start
// fails the binary: never a skip.
func Run(m *testing.M, opts Options, env **Env) int {
	if os.Getenv("TILED_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	e, err := Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot start the control plane: %v\n", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
	}
	return code
}
