package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// cpuProfiles fetches CPU profiles over the same window of `d` from the manager replica m (its
// pprof endpoint; nil for none) and from kube-apiserver (its /debug/pprof/, with the harness's
// credentials), and writes them to PREFIX.manager and PREFIX.apiserver. It returns at once; wait
// returns when both are written. For trials (-cpu-profile): they show where the CPU of a phase
// goes, process by process, on a machine whose cores the processes share.
func cpuProfiles(ctx context.Context, cfg *rest.Config, m *managerProc, d time.Duration, prefix string) (wait func() error) {
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	secs := int(d.Seconds())
	if m != nil {
		wg.Go(func() {
			c := &http.Client{Timeout: d + time.Minute}
			errs[0] = fetchProfile(ctx, c, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", m.ports.pprof, secs), prefix+".manager")
		})
	}
	wg.Go(func() {
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			errs[1] = err
			return
		}
		c.Timeout = d + time.Minute
		errs[1] = fetchProfile(ctx, c, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), secs), prefix+".apiserver")
	})
	return func() error {
		wg.Wait()
		return errors.Join(errs[:]...)
	}
}

// fetchProfile GETs url and writes the body to path.
func fetchProfile(ctx context.Context, c *http.Client, url, path string) error {
	body, err := httpGet(ctx, c, url)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// httpGet returns the body of a GET of url, which must answer 200.
func httpGet(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}
