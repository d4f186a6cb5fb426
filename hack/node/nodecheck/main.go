// Command nodecheck is the static client and server hack/node/check.sh runs on the real node, in a
// FROM-scratch image (a scratch image has no shell, no nslookup and no wget that works without NSS).
//
//	nodecheck pause                          wait for SIGTERM or SIGINT (a stand-in sandbox image)
//	nodecheck serve -dir D [-addr :8080]     keep D/first (written once), append D/starts; serve GET /
//	                                         with D/first and GET /healthz
//	nodecheck get [-expect S] [-timeout T] URL
//	                                         GET URL until 200 (and the body contains S); print the body
//	nodecheck resolve [-server IP:PORT] [-timeout T] NAME...
//	                                         resolve every NAME (with the system resolver, i.e. the pod's
//	                                         /etc/resolv.conf, unless -server) until it has an address
//	nodecheck blocked [-timeout T] [-confirm N] URL
//	                                         GET URL until the connection itself fails (refused, reset or
//	                                         timed out: no HTTP answer at all) N times in a row; a
//	                                         NetworkPolicy that denies the traffic looks like this
//	                                         (kube-router rejects), and a policy still being applied
//	                                         answers in between, which restarts the count
//
// Every wait retries until its timeout and then fails with the last error, so a check can fail.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nodecheck pause|serve|get|resolve|blocked ...")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "pause":
		pause()
	case "serve":
		err = serve(args)
	case "get":
		err = get(args)
	case "resolve":
		err = resolve(args)
	case "blocked":
		err = blocked(args)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodecheck:", err)
		os.Exit(1)
	}
}

func pause() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", "/data", "data directory (the PersistentVolume)")
	addr := fs.String("addr", ":8080", "listen address")
	_ = fs.Parse(args)
	host, _ := os.Hostname()
	first := filepath.Join(*dir, "first")
	if _, err := os.Stat(first); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(first, []byte(fmt.Sprintf("written by %s at %s\n", host, time.Now().UTC().Format(time.RFC3339Nano))), 0o644); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(*dir, "starts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "%s %s\n", host, time.Now().UTC().Format(time.RFC3339Nano))
	f.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(first)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat(first); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Printf("serving %s on %s\n", *dir, *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	expect := fs.String("expect", "", "substring the body must contain")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to retry")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("get: want one URL")
	}
	url := fs.Arg(0)
	client := &http.Client{Timeout: 3 * time.Second}
	deadline := time.Now().Add(*timeout)
	start := time.Now()
	var last error
	for attempt := 1; ; attempt++ {
		resp, err := client.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case rerr != nil:
				err = rerr
			case resp.StatusCode != http.StatusOK:
				err = fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
			case !strings.Contains(string(b), *expect):
				err = fmt.Errorf("%s: body %q does not contain %q", url, b, *expect)
			default:
				fmt.Printf("GET %s: %s (attempt %d, %.1fs)\n", url, strings.TrimSpace(string(b)), attempt, time.Since(start).Seconds())
				return nil
			}
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("after %d attempts in %s: %w", attempt, *timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func resolve(args []string) error {
	fs := flag.NewFlagSet("resolve", flag.ExitOnError)
	server := fs.String("server", "", "DNS server IP:PORT to ask instead of the system resolver")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to retry")
	_ = fs.Parse(args)
	if fs.NArg() == 0 {
		return fmt.Errorf("resolve: want at least one name")
	}
	r := net.DefaultResolver
	if *server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *server)
		}}
	}
	start := time.Now()
	for _, name := range fs.Args() {
		deadline := time.Now().Add(*timeout)
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			addrs, err := r.LookupHost(ctx, name)
			cancel()
			if err == nil && len(addrs) > 0 {
				fmt.Printf("%s: %s (attempt %d, %.1fs)\n", name, strings.Join(addrs, " "), attempt, time.Since(start).Seconds())
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("resolving %s: after %d attempts in %s: %w", name, attempt, *timeout, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return nil
}

// blocked succeeds once `confirm` GETs of the URL in a row fail without any HTTP answer. Any answer
// (whatever its status) means the packets got through and restarts the count; so does nothing at
// all, until the timeout, after which it fails with the last answer it got.
func blocked(args []string) error {
	fs := flag.NewFlagSet("blocked", flag.ExitOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the traffic to be blocked")
	confirm := fs.Int("confirm", 3, "consecutive failed connections needed")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("blocked: want one URL")
	}
	url := fs.Arg(0)
	// Short per attempt: a rejected connection fails at once, a dropped one after this.
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(*timeout)
	start := time.Now()
	failures := 0
	var last string
	for attempt := 1; ; attempt++ {
		resp, err := client.Get(url)
		if err != nil {
			failures++
			last = err.Error()
			if failures >= *confirm {
				fmt.Printf("GET %s blocked: %d connections in a row failed, the last with: %s (attempt %d, %.1fs)\n",
					url, failures, last, attempt, time.Since(start).Seconds())
				return nil
			}
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			failures = 0
			last = "answered " + resp.Status
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GET %s is not blocked after %d attempts in %s: last %s", url, attempt, *timeout, last)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
