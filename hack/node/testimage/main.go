// Command testimage writes a single-layer image as a docker-archive tar (the format `ctr images import`
// and `buildah push … docker-archive:` share) from a few local files, without a container engine or a
// registry. hack/node uses it for the images only its own checks need (the nodecheck client) and for
// stand-in pause and CoreDNS images while the real ones from hack/images are not built yet.
//
//	testimage -o out.tar -name docker.io/local/NAME:TAG -entrypoint /bin/x [-user 65532] SRC:DST...
//
// Every SRC file is stored at DST with mode 0755, owned by root; parent directories are created.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testimage:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("o", "", "docker-archive tar to write")
	name := flag.String("name", "", "image reference, e.g. docker.io/local/pause:3.10")
	entrypoint := flag.String("entrypoint", "", "path of the entrypoint inside the image; extra words after a space become arguments")
	user := flag.String("user", "65532:65532", "user the image runs as")
	flag.Parse()
	if *out == "" || *name == "" || *entrypoint == "" || flag.NArg() == 0 {
		return errors.New("usage: testimage -o OUT.tar -name REF -entrypoint PATH SRC:DST [SRC:DST]")
	}
	return write(*out, *name, strings.Fields(*entrypoint), *user, flag.Args())
}

// write writes the docker-archive OUT holding one image NAME whose only layer has the files given as
// SRC:DST pairs (and /tmp), and whose config runs ENTRYPOINT as USER.
func write(out, name string, entrypoint []string, user string, pairs []string) error {
	if !strings.Contains(name, ":") {
		return fmt.Errorf("-name %q: needs an explicit tag (a local image is never pulled only with a non-latest tag and IfNotPresent)", name)
	}

	// The layer: directories first (sorted), then the files.
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	type file struct{ src, dst string }
	var files []file
	for _, a := range pairs {
		src, dst, ok := strings.Cut(a, ":")
		if !ok || !path.IsAbs(dst) {
			return fmt.Errorf("argument %q: want SRC:DST with an absolute DST", a)
		}
		files = append(files, file{src, strings.TrimPrefix(path.Clean(dst), "/")})
		for d := path.Dir(path.Clean(dst)); d != "/"; d = path.Dir(d) {
			dirs[strings.TrimPrefix(d, "/")] = true
		}
	}
	dirs["tmp"] = true
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.dst, Mode: 0o755, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])

	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			"User":       user,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
		"history": []map[string]any{{"created": epoch.UTC().Format(time.RFC3339), "created_by": "hack/node/testimage"}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{name},
		"Layers":   []string{layerHex + "/layer.tar"},
	}})
	if err != nil {
		return err
	}

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	aw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{
		{layerHex + "/layer.tar", layer.Bytes()},
		{configName, config},
		{"manifest.json", manifest},
	} {
		if dir := path.Dir(e.name); dir != "." {
			if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := aw.Write(e.data); err != nil {
			return err
		}
	}
	if err := aw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
