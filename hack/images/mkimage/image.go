package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// created is the creation time written into every image: fixed, so that the config (and with it the
// image ID) depends only on the content. File modification times in the layer are kept as they are:
// Python compares a .pyc's recorded source mtime with the source's, and an image with a read-only
// root filesystem cannot rewrite a stale one.
var created = time.Unix(0, 0).UTC()

// RunConfig is the "config" object of an OCI/Docker image configuration: what a runtime uses to start
// the container when the pod does not say otherwise.
type RunConfig struct {
	User         string              `json:"User,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	StopSignal   string              `json:"StopSignal,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

// Options are the tag and runtime settings of the image.
type Options struct {
	Tag    string
	Config RunConfig
}

// ImageConfig is the image configuration blob (application/vnd.docker.container.image.v1+json).
type ImageConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       RunConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	} `json:"history"`
}

// ManifestEntry is one element of a docker-archive's manifest.json.
type ManifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// Write packs rootfs into a docker-archive at out (through a temporary file renamed into place) and
// returns the image ID (the digest of the config).
func Write(rootfs, out string, opt Options) (string, error) {
	if !strings.Contains(opt.Tag, ":") || strings.HasSuffix(opt.Tag, ":") {
		return "", fmt.Errorf("tag %q: want a reference with an explicit tag, e.g. docker.io/local/name:1.0", opt.Tag)
	}
	st, err := os.Stat(rootfs)
	if err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("rootfs %s: not a directory", rootfs)
	}

	// The layer goes to a temporary file first: its digest (the diff ID) is part of the config, and
	// its size must be known before it is written into the outer archive.
	dir := filepath.Dir(out)
	layerFile, err := os.CreateTemp(dir, ".mkimage-layer-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()
	h := sha256.New()
	if err := WriteLayer(io.MultiWriter(layerFile, h), rootfs); err != nil {
		return "", fmt.Errorf("layer from %s: %w", rootfs, err)
	}
	layerHex := hex.EncodeToString(h.Sum(nil))
	layerSize, err := layerFile.Seek(0, io.SeekCurrent)
	if err != nil {
		return "", err
	}

	var cfg ImageConfig
	cfg.Architecture = runtime.GOARCH
	cfg.OS = "linux"
	cfg.Created = created
	cfg.Config = opt.Config
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{"sha256:" + layerHex}
	cfg.History = append(cfg.History, struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	}{created, "hack/images/mkimage"})
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgHex := hex.EncodeToString(cfgSum[:])
	manifest, err := json.Marshal([]ManifestEntry{{
		Config:   cfgHex + ".json",
		RepoTags: []string{opt.Tag},
		Layers:   []string{layerHex + "/layer.tar"},
	}})
	if err != nil {
		return "", err
	}

	tmp, err := os.CreateTemp(dir, ".mkimage-out-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tw := tar.NewWriter(tmp)
	file := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: layerHex + "/", Mode: 0o755, ModTime: created, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := file(layerHex+"/layer.tar", layerSize, layerFile); err != nil {
		return "", err
	}
	if err := file(cfgHex+".json", int64(len(cfgJSON)), strings.NewReader(string(cfgJSON))); err != nil {
		return "", err
	}
	if err := file("manifest.json", int64(len(manifest)), strings.NewReader(string(manifest))); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	// CreateTemp makes the file 0600; an image archive is not a secret.
	if err := tmp.Chmod(0o644); err != nil {
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return "sha256:" + cfgHex, nil
}

// WriteLayer writes the tree under root as an uncompressed tar layer: entries in lexical order,
// names relative to root, numeric owners (no user names: the host's would be wrong), permission and
// set-id bits, modification times to the second, hard links as links to the first path seen.
// Sockets and named pipes are refused; device nodes are written as such.
func WriteLayer(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// WalkDir already visits in lexical order within a directory; sort the whole list by the
	// slash-separated name so that the order does not depend on the walk.
	sort.Slice(paths, func(i, j int) bool { return paths[i] < paths[j] })
	for _, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat information", p)
		}
		hdr := &tar.Header{
			Name:    name,
			Mode:    int64(fi.Mode().Perm()),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: fi.ModTime().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if fi.Mode()&fs.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if fi.Mode()&fs.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if fi.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		var body *os.File
		switch m := fi.Mode(); {
		case m.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case m&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case m.IsRegular():
			key := inode{st.Dev, st.Ino}
			if first, ok := seen[key]; ok && st.Nlink > 1 {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				break
			}
			seen[key] = name
			hdr.Typeflag = tar.TypeReg
			hdr.Size = fi.Size()
			if body, err = os.Open(p); err != nil {
				return err
			}
		case m&fs.ModeDevice != 0:
			hdr.Typeflag = tar.TypeBlock
			if m&fs.ModeCharDevice != 0 {
				hdr.Typeflag = tar.TypeChar
			}
			hdr.Devmajor = int64(unixMajor(st.Rdev))
			hdr.Devminor = int64(unixMinor(st.Rdev))
		default:
			return fmt.Errorf("%s: unsupported file type %v (sockets and pipes do not belong in an image)", p, m.Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if body != nil {
			n, err := io.Copy(tw, body)
			body.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("%s: changed size while being read", p)
			}
		}
	}
	return tw.Close()
}

func unixMajor(dev uint64) uint64 { return ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xfffff000) }
func unixMinor(dev uint64) uint64 { return (dev & 0xff) | ((dev >> 12) & 0xffffff00) }
