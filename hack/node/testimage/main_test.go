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

	. "github.com/onsi/gomega"
)

// readTar returns the regular files of a tar stream by name, and the mode of every entry.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

func TestWrite(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "bin")
	g.Expect(os.WriteFile(src, []byte("#!binary"), 0o600)).To(Succeed())
	out := filepath.Join(dir, "img.tar")
	g.Expect(write(out, "docker.io/local/x:v1", []string{"/x", "serve"}, "65532:65532", []string{src + ":/usr/bin/x"})).To(Succeed())

	f, err := os.Open(out)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	archive, _ := readTar(t, f)

	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	g.Expect(json.Unmarshal(archive["manifest.json"], &manifest)).To(Succeed())
	g.Expect(manifest).To(HaveLen(1))
	g.Expect(manifest[0].RepoTags).To(Equal([]string{"docker.io/local/x:v1"}))
	g.Expect(manifest[0].Layers).To(HaveLen(1))

	// The config names the layer by the digest of its bytes, and the config file by its own digest.
	layer := archive[manifest[0].Layers[0]]
	sum := sha256.Sum256(layer)
	cfgSum := sha256.Sum256(archive[manifest[0].Config])
	g.Expect(manifest[0].Config).To(Equal(hex.EncodeToString(cfgSum[:]) + ".json"))
	var cfg struct {
		Config struct {
			Entrypoint []string
			User       string
		}
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	g.Expect(json.Unmarshal(archive[manifest[0].Config], &cfg)).To(Succeed())
	g.Expect(cfg.RootFS.DiffIDs).To(Equal([]string{"sha256:" + hex.EncodeToString(sum[:])}))
	g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/x", "serve"}))
	g.Expect(cfg.Config.User).To(Equal("65532:65532"))

	files, modes := readTar(t, bytes.NewReader(layer))
	g.Expect(files).To(HaveKeyWithValue("usr/bin/x", []byte("#!binary")))
	g.Expect(modes).To(HaveKeyWithValue("usr/bin/x", int64(0o755)))
	g.Expect(modes).To(HaveKeyWithValue("usr/", int64(0o755)))
	g.Expect(modes).To(HaveKeyWithValue("usr/bin/", int64(0o755)))
	g.Expect(modes).To(HaveKeyWithValue("tmp/", int64(0o1777)))
}

func TestWriteRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		ref   string
		pairs []string
		want  string
	}{
		"no tag":       {"docker.io/local/x", []string{"/etc/hostname:/x"}, "needs an explicit tag"},
		"relative dst": {"docker.io/local/x:v1", []string{"/etc/hostname:x"}, "absolute DST"},
		"no dst":       {"docker.io/local/x:v1", []string{"/etc/hostname"}, "want SRC:DST"},
		"missing src":  {"docker.io/local/x:v1", []string{filepath.Join(dir, "absent") + ":/x"}, "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			out := filepath.Join(dir, "out.tar")
			err := write(out, c.ref, []string{"/x"}, "0", c.pairs)
			g.Expect(err).To(MatchError(ContainSubstring(c.want)))
			g.Expect(out).NotTo(BeAnExistingFile())
		})
	}
}
