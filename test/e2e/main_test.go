//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// env is what hack/node/cluster.sh writes to $STATE/env and hack/e2e/run.sh exports.
type env struct {
	kubeconfig string // admin kubeconfig of the cluster
	kubectl    string // kubectl at the cluster's version
	state      string // the cluster's state folder (hostPath volumes live under it)
	auditLog   string // the apiserver's JSON audit log
	repo       string // the checkout (for config/default)
	results    string // where the figures go (bench/e2e.json)
}

var (
	e   env
	cl  client.WithWatch // a client that can also watch (latency_test.go times readiness with it)
	fig = &Figures{InstanceReadySeconds: map[string]float64{}}
)

var figMu sync.Mutex

func TestMain(m *testing.M) {
	e = env{
		kubeconfig: os.Getenv("KUBECONFIG"),
		kubectl:    os.Getenv("KUBECTL"),
		state:      os.Getenv("STATE"),
		auditLog:   os.Getenv("AUDIT_LOG"),
		repo:       os.Getenv("E2E_REPO"),
		results:    os.Getenv("E2E_RESULTS"),
	}
	for k, v := range map[string]string{"KUBECONFIG": e.kubeconfig, "KUBECTL": e.kubectl, "STATE": e.state, "AUDIT_LOG": e.auditLog, "E2E_REPO": e.repo} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "e2e: %s is not set: run the suite through `make test-e2e` (hack/e2e/run.sh)\n", k)
			os.Exit(2)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: kubeconfig %s: %v\n", e.kubeconfig, err)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	if cl, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: client: %v\n", err)
		os.Exit(2)
	}
	if err := checkKubeRouterLogsSyncs(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	stopReleaser := make(chan struct{})
	go releaser(stopReleaser)
	cpu := startCPUSampler()
	code := m.Run()
	fig.CPU = cpu.finish()
	close(stopReleaser)
	fig.Passed, fig.Failed = 0, 0
	for _, c := range fig.Cases {
		if c.Passed {
			fig.Passed++
		} else {
			fig.Failed++
		}
	}
	fmt.Printf("\ne2e cases:\n")
	for _, c := range fig.Cases {
		mark := "PASS"
		switch {
		case c.NotRun:
			mark = "----"
		case !c.Passed:
			mark = "FAIL"
		}
		name := c.Name
		if len(name) > 60 {
			name = name[:60]
		}
		fmt.Printf("  %s  %-60s %-13s start %6.1fs %6.1fs  beside %d\n", mark, name, c.Needs, c.Start, c.Seconds, c.Beside)
	}
	fmt.Printf("%d passed, %d failed; the suite took %.0fs with up to %d cases at once\n", fig.Passed, fig.Failed, fig.SuiteSeconds, fig.Parallel)
	if u := fig.CPU; u != nil && u.WallSeconds > 0 {
		fmt.Printf("CPU: the machine busy %.0fs of %.0fs (%.2f of its cores); pods %.0fs: %s; processes: %s\n",
			u.MachineBusySeconds, u.WallSeconds, u.MachineBusySeconds/u.WallSeconds, u.PodSeconds, secondsByName(u.Namespaces), secondsByName(u.Processes))
		fmt.Printf("CPU of the pods that used the most: %s\n", secondsByName(u.TopPods))
	}
	if e.results != "" {
		b, _ := json.MarshalIndent(fig, "", "  ")
		if err := os.WriteFile(e.results, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: writing %s: %v\n", e.results, err)
			code = 1
		}
	}
	if fig.Failed > 0 && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// secondsByName lists a map's entries largest first, "name 12s".
func secondsByName(m map[string]float64) string {
	names := NamesByValue(m)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.0fs", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// kubectl runs the cluster's kubectl with the admin kubeconfig; stdin may be nil.
func kubectl(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// mustKubectl is kubectl that fails the test on error.
func mustKubectl(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	out, err := kubectl(stdin, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// clientPodTimeout bounds a client pod's run (its Python client's start, the requests, the end).
// Alone, one takes 10 to 20 s; beside the long cases (E2E_PARALLEL) the node's two cores are shared
// by several fleets' pods starting at once, and one took more than 3 minutes in a loaded run.
const clientPodTimeout = 6 * time.Minute

// eventually polls f every interval until it returns true or the timeout passes; the last error or
// reason f returned is in the failure message.
func eventually(t *testing.T, timeout, interval time.Duration, what string, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := f()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
		}
		time.Sleep(interval)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// auditEvent is the part of an apiserver audit event the suite reads.
type auditEvent struct {
	Stage     string                    `json:"stage"`
	Verb      string                    `json:"verb"`
	User      struct{ Username string } `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	// ResponseStatus is the answer's status: its code tells a deletion done (200, 202) from one
	// refused (409: a precondition no longer held; 404), and a server-side apply that created the
	// object (201) from one that changed it (200), both verb "patch".
	ResponseStatus *struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
}

// succeeded says whether the request was answered with a 2xx status.
func (ev auditEvent) succeeded() bool {
	return ev.ResponseStatus != nil && ev.ResponseStatus.Code >= 200 && ev.ResponseStatus.Code < 300
}

// auditSince returns the completed requests of user received in [from, to), once the audit log
// holds every request received before to (auditThrough).
func auditSince(t *testing.T, user string, from, to time.Time) []auditEvent {
	t.Helper()
	return auditWhere(t, from, to, func(ev auditEvent) bool { return ev.User.Username == user })
}

// auditWhere returns the completed requests received in [from, to) that keep says to keep, once the
// audit log holds every request received before to (auditThrough).
func auditWhere(t *testing.T, from, to time.Time, keep func(auditEvent) bool) []auditEvent {
	t.Helper()
	auditThrough(t, to)
	f, err := os.Open(e.auditLog)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Stage != "ResponseComplete" || !keep(ev) {
			continue
		}
		if ev.RequestReceived.Before(from) || !ev.RequestReceived.Before(to) {
			continue
		}
		out = append(out, ev)
	}
	return out
}

// auditThrough waits until the apiserver's audit log, written asynchronously, holds a completed
// request received at or after to: the requests received before to are in it by then (the suite's
// own polling makes requests all the time, so one comes within a poll or two).
func auditThrough(t *testing.T, to time.Time) {
	t.Helper()
	eventually(t, time.Minute, 200*time.Millisecond, "the audit log written through "+to.Format(time.RFC3339Nano), func() (bool, string) {
		last, err := lastAuditReceived()
		if err != nil {
			return false, err.Error()
		}
		return !last.Before(to), "last request received at " + last.Format(time.RFC3339Nano)
	})
}

// lastAuditReceived is the receive time of the last completed request in the audit log (read from
// its last megabyte).
func lastAuditReceived() (time.Time, error) {
	var last time.Time
	err := scanTail(e.auditLog, func(line []byte) {
		var ev auditEvent
		if json.Unmarshal(line, &ev) == nil && ev.Stage == "ResponseComplete" && ev.RequestReceived.After(last) {
			last = ev.RequestReceived
		}
	})
	return last, err
}

// scanTail calls f on each line of the last megabyte of the file at path (a log the suite polls:
// only its newest lines matter).
func scanTail(path string, f func(line []byte)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	if st, err := file.Stat(); err == nil && st.Size() > 1<<20 {
		if _, err := file.Seek(st.Size()-1<<20, io.SeekStart); err != nil {
			return err
		}
	}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f(sc.Bytes())
	}
	return sc.Err()
}

// resourceKey is "resource" or "resource/subresource" of an audit event.
func resourceKey(ev auditEvent) string {
	if ev.ObjectRef == nil {
		return "-"
	}
	if ev.ObjectRef.Subresource != "" {
		return ev.ObjectRef.Resource + "/" + ev.ObjectRef.Subresource
	}
	return ev.ObjectRef.Resource
}

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// writeTemp writes b to a file under the state folder and returns its path.
func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	dir := filepath.Join(e.state, "e2e-files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
