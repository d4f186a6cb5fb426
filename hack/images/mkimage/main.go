// Command mkimage writes a container image as a docker-archive tarball (the format of `docker save`,
// which `ctr images import` and `docker load` read) from a root filesystem directory: one
// uncompressed layer holding the directory's files with their owners, modes and modification times,
// a config with the runtime settings given as flags, and a manifest.json tagging the image.
//
//	mkimage -rootfs DIR -tag docker.io/local/NAME:TAG -o NAME.tar \
//	  [-user UID:GID] [-env K=V]... [-entrypoint '["/bin/x"]'] [-cmd '["arg"]'] \
//	  [-workdir DIR] [-stopsignal SIGINT] [-expose 5432/tcp]... [-label K=V]...
//
// The same directory gives the same bytes (entries sorted, fixed creation time), so the archive's
// image ID depends only on its content. It needs no container engine, daemon or registry.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var (
		opt                          Options
		env, expose, labels          multi
		entrypoint, cmd, out, rootfs string
	)
	flag.StringVar(&rootfs, "rootfs", "", "root filesystem `directory` of the image's single layer (required)")
	flag.StringVar(&opt.Tag, "tag", "", "image `reference`, e.g. docker.io/local/pause:3.10 (required)")
	flag.StringVar(&out, "o", "", "output docker-archive `file` (required; written atomically)")
	flag.StringVar(&opt.Config.User, "user", "", "user the container runs as, e.g. 65532:65532")
	flag.Var(&env, "env", "environment `K=V` (repeatable)")
	flag.StringVar(&entrypoint, "entrypoint", "", "entrypoint as a JSON array of strings")
	flag.StringVar(&cmd, "cmd", "", "command (arguments of the entrypoint) as a JSON array of strings")
	flag.StringVar(&opt.Config.WorkingDir, "workdir", "", "working directory")
	flag.StringVar(&opt.Config.StopSignal, "stopsignal", "", "stop signal, e.g. SIGINT")
	flag.Var(&expose, "expose", "exposed `port/proto` (repeatable, documentation only)")
	flag.Var(&labels, "label", "label `K=V` (repeatable)")
	flag.Parse()

	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "mkimage: "+format+"\n", a...)
		os.Exit(1)
	}
	if rootfs == "" || opt.Tag == "" || out == "" || flag.NArg() > 0 {
		flag.Usage()
		fail("-rootfs, -tag and -o are required, and no positional arguments are accepted")
	}
	opt.Config.Env = env
	for _, e := range env {
		if !strings.Contains(e, "=") {
			fail("-env %q: want K=V", e)
		}
	}
	for name, s := range map[string]*[]string{"-entrypoint": &opt.Config.Entrypoint, "-cmd": &opt.Config.Cmd} {
		v := entrypoint
		if name == "-cmd" {
			v = cmd
		}
		if v == "" {
			continue
		}
		if err := json.Unmarshal([]byte(v), s); err != nil {
			fail("%s %q: want a JSON array of strings: %v", name, v, err)
		}
	}
	for _, p := range expose {
		if opt.Config.ExposedPorts == nil {
			opt.Config.ExposedPorts = map[string]struct{}{}
		}
		opt.Config.ExposedPorts[p] = struct{}{}
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			fail("-label %q: want K=V", l)
		}
		if opt.Config.Labels == nil {
			opt.Config.Labels = map[string]string{}
		}
		opt.Config.Labels[k] = v
	}
	id, err := Write(rootfs, out, opt)
	if err != nil {
		fail("%v", err)
	}
	fmt.Printf("%s %s %s\n", out, opt.Tag, id)
}
