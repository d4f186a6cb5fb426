package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// readArchive returns the files of a tar stream by name, and their headers.
func readArchive(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header, []string) {
	t.Helper()
	g := NewWithT(t)
	files := map[string][]byte{}
	hdrs := map[string]*tar.Header{}
	var order []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		b, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		files[h.Name], hdrs[h.Name] = b, h
		order = append(order, h.Name)
	}
	return files, hdrs, order
}

func TestWrite(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	must := func(err error) { t.Helper(); g.Expect(err).NotTo(HaveOccurred()) }
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Chmod(filepath.Join(root, "usr/bin/tool"), os.ModeSetuid|0o755))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.WriteFile(filepath.Join(root, "etc-file"), []byte("x"), 0o600))
	must(os.Chtimes(filepath.Join(root, "etc-file"), mtime, mtime.Add(1500*time.Millisecond)))
	if os.Geteuid() == 0 {
		must(os.Chown(filepath.Join(root, "etc-file"), 999, 998))
	}

	out := filepath.Join(t.TempDir(), "img.tar")
	opt := Options{Tag: "docker.io/local/test:1", Config: RunConfig{
		User: "999:999", Env: []string{"PATH=/usr/bin", "A=b"}, Entrypoint: []string{"/usr/bin/tool"},
		Cmd: []string{"x"}, WorkingDir: "/tmp", StopSignal: "SIGINT",
	}}
	id, err := Write(root, out, opt)
	must(err)

	st, err := os.Stat(out)
	must(err)
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o644)), "the archive is readable by all")
	f, err := os.Open(out)
	must(err)
	defer f.Close()
	outer, _, _ := readArchive(t, f)

	var manifest []ManifestEntry
	must(json.Unmarshal(outer["manifest.json"], &manifest))
	g.Expect(manifest).To(HaveLen(1))
	g.Expect(manifest[0].RepoTags).To(Equal([]string{"docker.io/local/test:1"}))
	g.Expect(manifest[0].Layers).To(HaveLen(1))

	cfgBytes := outer[manifest[0].Config]
	cfgSum := sha256.Sum256(cfgBytes)
	g.Expect(id).To(Equal("sha256:"+hex.EncodeToString(cfgSum[:])), "the image ID is the config's digest")
	var cfg ImageConfig
	must(json.Unmarshal(cfgBytes, &cfg))
	g.Expect(cfg.Config).To(Equal(opt.Config))
	g.Expect(cfg.OS).To(Equal("linux"))

	layer := outer[manifest[0].Layers[0]]
	layerSum := sha256.Sum256(layer)
	g.Expect(cfg.RootFS.DiffIDs).To(Equal([]string{"sha256:" + hex.EncodeToString(layerSum[:])}), "diff ID is the uncompressed layer's digest")

	files, hdrs, order := readArchive(t, bytes.NewReader(layer))
	g.Expect(order).To(Equal([]string{"bin", "etc-file", "tmp/", "usr/", "usr/bin/", "usr/bin/tool", "usr/bin/tool2"}))
	g.Expect(hdrs["bin"].Typeflag).To(Equal(byte(tar.TypeSymlink)))
	g.Expect(hdrs["bin"].Linkname).To(Equal("usr/bin"))
	g.Expect(hdrs["tmp/"].Mode).To(Equal(int64(0o1777)), "sticky bit kept")
	g.Expect(hdrs["usr/bin/tool"].Mode).To(Equal(int64(0o4755)), "setuid bit kept")
	g.Expect(string(files["usr/bin/tool"])).To(Equal("#!/bin/sh\necho hi\n"))
	g.Expect(hdrs["usr/bin/tool2"].Typeflag).To(Equal(byte(tar.TypeLink)), "a second name of one inode is a hard link")
	g.Expect(hdrs["usr/bin/tool2"].Linkname).To(Equal("usr/bin/tool"))
	g.Expect(hdrs["etc-file"].ModTime.UTC()).To(Equal(mtime.Add(time.Second)), "mtime kept, to the second")
	g.Expect(hdrs["etc-file"].Mode).To(Equal(int64(0o600)))
	g.Expect(hdrs["etc-file"].Uname).To(BeEmpty(), "owners are numeric only")
	if os.Geteuid() == 0 {
		g.Expect([]int{hdrs["etc-file"].Uid, hdrs["etc-file"].Gid}).To(Equal([]int{999, 998}))
	}

	// The same tree gives the same bytes.
	out2 := filepath.Join(t.TempDir(), "img.tar")
	id2, err := Write(root, out2, opt)
	must(err)
	g.Expect(id2).To(Equal(id))
	a, err := os.ReadFile(out)
	must(err)
	b, err := os.ReadFile(out2)
	must(err)
	g.Expect(bytes.Equal(a, b)).To(BeTrue(), "archives of the same tree are identical")

	// No temporary files are left beside the output.
	left, err := filepath.Glob(filepath.Join(filepath.Dir(out), ".mkimage-*"))
	must(err)
	g.Expect(left).To(BeEmpty())
}

func TestWriteRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(root string) (rootfs, tag string)
		err   string
	}{
		{"tag without a version", func(root string) (string, string) { return root, "docker.io/local/x" }, "explicit tag"},
		{"missing rootfs", func(root string) (string, string) { return filepath.Join(root, "nope"), "x:1" }, "no such file"},
		{"rootfs is a file", func(root string) (string, string) {
			p := filepath.Join(root, "f")
			_ = os.WriteFile(p, nil, 0o644)
			return p, "x:1"
		}, "not a directory"},
		{"a named pipe in the tree", func(root string) (string, string) {
			_ = mkfifo(filepath.Join(root, "fifo"))
			return root, "x:1"
		}, "unsupported file type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			rootfs, tag := tc.setup(t.TempDir())
			outDir := t.TempDir()
			_, err := Write(rootfs, filepath.Join(outDir, "o.tar"), Options{Tag: tag})
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			left, _ := os.ReadDir(outDir)
			g.Expect(left).To(BeEmpty(), "nothing written on failure")
		})
	}
}
