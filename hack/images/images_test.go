//go:build images

package images

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/bluesky/tiled-operator/expansion"
)

// archive is what a docker-archive holds, with an index of its single layer.
type archive struct {
	tags       []string
	layerCount int
	diffID     string // of the config
	layerSum   string // computed
	config     struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			User       string
			Env        []string
			Entrypoint []string
			Cmd        []string
			WorkingDir string
			StopSignal string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	files map[string]*tar.Header // by absolute path, "/etc/passwd"
	small map[string][]byte      // contents of the files isSmall names
}

var smallFiles = map[string]bool{"/etc/passwd": true, "/etc/group": true, "/etc/resolv.conf": true}

// Where a Tiled image records the version it installed: what tiled.__version__ returns, and the
// distribution's metadata (what pip and importlib.metadata report).
const (
	sitePackages   = "/opt/venv/lib/python3.11/site-packages"
	tiledVersionPy = sitePackages + "/tiled/_version.py"
)

func tiledMetadata(version string) string {
	return sitePackages + "/tiled-" + version + ".dist-info/METADATA"
}

// isSmall tells which files of a layer are read into archive.small.
func isSmall(p string) bool {
	return smallFiles[p] || p == tiledVersionPy ||
		strings.HasPrefix(p, sitePackages+"/tiled-") && strings.HasSuffix(p, ".dist-info/METADATA")
}

func open(t *testing.T, file string) *archive {
	t.Helper()
	g := NewWithT(t)
	f, err := os.Open(file)
	g.Expect(err).NotTo(HaveOccurred(), "the image archive must exist: run hack/images/build.sh")
	defer f.Close()
	a := &archive{files: map[string]*tar.Header{}, small: map[string][]byte{}}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	blobs := map[string][]byte{}
	layers := map[string]string{} // outer name -> digest
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		switch {
		case strings.HasSuffix(h.Name, "/layer.tar"):
			sum := sha256.New()
			a.index(t, io.TeeReader(tr, sum))
			// The rest of the layer (tar padding) must also go through the digest.
			_, err := io.Copy(sum, tr)
			g.Expect(err).NotTo(HaveOccurred())
			layers[h.Name] = "sha256:" + hex.EncodeToString(sum.Sum(nil))
		case h.Typeflag == tar.TypeReg:
			b, err := io.ReadAll(tr)
			g.Expect(err).NotTo(HaveOccurred())
			blobs[h.Name] = b
		}
	}
	g.Expect(json.Unmarshal(blobs["manifest.json"], &manifest)).To(Succeed())
	g.Expect(manifest).To(HaveLen(1), "one image per archive")
	m := manifest[0]
	a.tags = m.RepoTags
	a.layerCount = len(m.Layers)
	g.Expect(m.Layers).To(HaveLen(1))
	a.layerSum = layers[m.Layers[0]]
	cfg := blobs[m.Config]
	g.Expect(cfg).NotTo(BeEmpty(), "config %s in the archive", m.Config)
	cs := sha256.Sum256(cfg)
	g.Expect(m.Config).To(Equal(hex.EncodeToString(cs[:])+".json"), "config named by its digest")
	g.Expect(json.Unmarshal(cfg, &a.config)).To(Succeed())
	return a
}

func (a *archive) index(t *testing.T, r io.Reader) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("layer: %v", err)
		}
		p := path.Clean("/" + h.Name)
		a.files[p] = h
		if isSmall(p) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("layer %s: %v", p, err)
			}
			a.small[p] = b
		}
	}
}

// resolve follows symbolic links in every component of p inside the layer, as the kernel would in a
// chroot, and returns the final path and its header (nil when it does not exist).
func (a *archive) resolve(p string) (string, *tar.Header) {
	for hops := 0; hops < 40; hops++ {
		parts := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
		cur := "/"
		restarted := false
		for i, part := range parts {
			if part == "" {
				continue
			}
			next := path.Join(cur, part)
			h := a.files[next]
			if h == nil {
				return next, nil
			}
			if h.Typeflag == tar.TypeSymlink {
				target := h.Linkname
				if !strings.HasPrefix(target, "/") {
					target = path.Join(cur, target)
				}
				p = path.Join(append([]string{target}, parts[i+1:]...)...)
				restarted = true
				break
			}
			cur = next
		}
		if !restarted {
			h := a.files[cur]
			if h != nil && h.Typeflag == tar.TypeLink {
				return cur, a.files[path.Clean("/"+h.Linkname)]
			}
			return cur, h
		}
	}
	return p, nil
}

func (a *archive) env(k string) string {
	for _, e := range a.config.Config.Env {
		if kk, v, ok := strings.Cut(e, "="); ok && kk == k {
			return v
		}
	}
	return ""
}

// lookPath finds a command as the runtime does: a name with a slash as is, else through PATH.
func (a *archive) lookPath(cmd string) (string, *tar.Header) {
	if strings.Contains(cmd, "/") {
		return a.resolve(cmd)
	}
	for _, dir := range strings.Split(a.env("PATH"), ":") {
		if p, h := a.resolve(path.Join(dir, cmd)); h != nil && h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
			return p, h
		}
	}
	return "", nil
}

// account returns the uid and gid of name in /etc/passwd.
func (a *archive) account(name string) (int, int, bool) {
	for _, line := range strings.Split(string(a.small["/etc/passwd"]), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && f[0] == name {
			uid, _ := strconv.Atoi(f[2])
			gid, _ := strconv.Atoi(f[3])
			return uid, gid, true
		}
	}
	return 0, 0, false
}

type owned struct {
	path     string
	uid, gid int
	dir      bool
}

// imageCase is what one archive of current/ must hold.
type imageCase struct {
	file, tag       string
	user            string
	entrypoint, cmd []string
	env             map[string]string
	stopSignal      string
	account         string // user of the image in /etc/passwd, with the uid:gid of user
	commands        map[string]string
	owned           []owned
	absent          []string
	emptyFiles      []string
	tiledVersion    string // for a Tiled image: the version tiled.__version__ and the dist-info report
}

// tiledCase is a Tiled image of build.sh's one recipe (build_tiled) at the given version.
func tiledCase(file, version string) imageCase {
	return imageCase{
		file: file, tag: "docker.io/local/tiled:" + version, tiledVersion: version,
		user: "999:999", cmd: []string{"tiled"},
		env: map[string]string{
			"PATH":             "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"PYTHONUNBUFFERED": "1", "VIRTUAL_ENV": "/opt/venv", "LANG": "C.UTF-8",
		},
		account: "tiled",
		commands: map[string]string{
			"tiled":  "/opt/venv/bin/tiled",
			"python": "/usr/bin/python3.11",
			"sh":     "/usr/bin/dash",
		},
		owned: []owned{
			{path: "/home/tiled", uid: 999, gid: 999, dir: true},
			{path: tiledMetadata(version)},
			{path: tiledVersionPy},
			{path: sitePackages + "/numpy/__init__.py"},
			{path: sitePackages + "/pandas/__init__.py"},
			{path: sitePackages + "/pyarrow/__init__.py"},
			{path: "/etc/ssl/certs/ca-certificates.crt"},
			{path: "/tmp", dir: true},
		},
		absent: []string{"/tmp/host-ca.crt", "/var/cache/wheels", "/root/.cache/pip", "/usr/sbin/policy-rc.d",
			sitePackages + "/pandas/tests", sitePackages + "/numpy/_core/tests"},
		emptyFiles: []string{"/etc/resolv.conf"},
	}
}

// oldestTiled is the oldest supported Tiled release, the version of the second Tiled image
// (tiled-<version>.tar): TILED_OLDEST_VERSION as build.sh passes it, or else the line of
// tiledversion/versions.go that build.sh reads.
func oldestTiled(t *testing.T) string {
	if v := os.Getenv("TILED_OLDEST_VERSION"); v != "" {
		return v
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "tiledversion", "versions.go"))
	if err != nil {
		t.Fatalf("TILED_OLDEST_VERSION is not set and tiledversion/versions.go cannot be read: %v", err)
	}
	m := regexp.MustCompile(`(?m)^const Oldest = "([^"]*)"$`).FindSubmatch(src)
	if m == nil {
		t.Fatal(`TILED_OLDEST_VERSION is not set and tiledversion/versions.go has no line const Oldest = "x.y.z"`)
	}
	return string(m[1])
}

// versitygwVersion is the version of the S3 server image (versitygw.tar): VERSITYGW_VERSION as
// build.sh passes it, or else the line of hack/s3/versitygw.sh that pins it; without the "v".
func versitygwVersion(t *testing.T) string {
	v := os.Getenv("VERSITYGW_VERSION")
	if v == "" {
		src, err := os.ReadFile(filepath.Join("..", "s3", "versitygw.sh"))
		if err != nil {
			t.Fatalf("VERSITYGW_VERSION is not set and hack/s3/versitygw.sh cannot be read: %v", err)
		}
		m := regexp.MustCompile(`(?m)^VERSITYGW_VERSION=(v[0-9][^\s]*)$`).FindSubmatch(src)
		if m == nil {
			t.Fatal("VERSITYGW_VERSION is not set and hack/s3/versitygw.sh has no line VERSITYGW_VERSION=vX.Y.Z")
		}
		v = string(m[1])
	}
	return strings.TrimPrefix(v, "v")
}

// metricsServerVersion is the tag of the metrics-server image (metrics-server.tar): METRICS_SERVER_VERSION
// as build.sh passes it, or else the line of hack/node/metrics-server.sh that pins it; with the "v",
// as upstream tags its images and as hack/node/cluster.sh deploys it.
func metricsServerVersion(t *testing.T) string {
	if v := os.Getenv("METRICS_SERVER_VERSION"); v != "" {
		return v
	}
	src, err := os.ReadFile(filepath.Join("..", "node", "metrics-server.sh"))
	if err != nil {
		t.Fatalf("METRICS_SERVER_VERSION is not set and hack/node/metrics-server.sh cannot be read: %v", err)
	}
	m := regexp.MustCompile(`(?m)^METRICS_SERVER_VERSION=(v[0-9][^\s]*)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("METRICS_SERVER_VERSION is not set and hack/node/metrics-server.sh has no line METRICS_SERVER_VERSION=vX.Y.Z")
	}
	return string(m[1])
}

// prometheusVersion is the tag of the Prometheus image (prometheus.tar): PROMETHEUS_VERSION as
// build.sh passes it, or else the line of hack/prometheus/prometheus.sh that pins it (no "v", as
// upstream tags its images).
func prometheusVersion(t *testing.T) string {
	if v := os.Getenv("PROMETHEUS_VERSION"); v != "" {
		return v
	}
	src, err := os.ReadFile(filepath.Join("..", "prometheus", "prometheus.sh"))
	if err != nil {
		t.Fatalf("PROMETHEUS_VERSION is not set and hack/prometheus/prometheus.sh cannot be read: %v", err)
	}
	m := regexp.MustCompile(`(?m)^PROMETHEUS_VERSION=([0-9][^\s]*)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("PROMETHEUS_VERSION is not set and hack/prometheus/prometheus.sh has no line PROMETHEUS_VERSION=X.Y.Z")
	}
	return string(m[1])
}

func TestImages(t *testing.T) {
	dir := os.Getenv("TILED_IMAGES_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		// The root of hack/lib/cache.sh.
		cache := os.Getenv("TILED_OPERATOR_CACHE")
		if cache == "" {
			xdg := os.Getenv("XDG_CACHE_HOME")
			if xdg == "" {
				xdg = filepath.Join(home, ".cache")
			}
			cache = filepath.Join(xdg, "tiled-operator")
		}
		dir = filepath.Join(cache, "images", "current")
	}
	oldest := oldestTiled(t)
	vgw := versitygwVersion(t)
	ms := metricsServerVersion(t)
	prom := prometheusVersion(t)
	pgPath := "/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, tc := range []imageCase{{
		file: "pause.tar", tag: "docker.io/local/pause:3.10",
		user: "65535:65535", entrypoint: []string{"/pause"},
		owned: []owned{{path: "/pause"}},
	}, {
		file: "coredns.tar", tag: "docker.io/local/coredns:v1.15.0",
		user: "65532:65532", entrypoint: []string{"/coredns"},
		owned: []owned{{path: "/coredns"}},
	}, {
		file: "tiled-operator.tar", tag: "docker.io/local/tiled-operator:e2e",
		user: "65532:65532", entrypoint: []string{"/manager"}, account: "nonroot",
		owned: []owned{{path: "/manager"}, {path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, {
		// The same code as another version, and built to render one more Tiled pod annotation; and
		// the previous release's manager (the operator-upgrade tests).
		file: "tiled-operator-prime.tar", tag: "docker.io/local/tiled-operator:prime",
		user: "65532:65532", entrypoint: []string{"/manager"}, account: "nonroot",
		owned: []owned{{path: "/manager"}, {path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, {
		file: "tiled-operator-annotated.tar", tag: "docker.io/local/tiled-operator:annotated",
		user: "65532:65532", entrypoint: []string{"/manager"}, account: "nonroot",
		owned: []owned{{path: "/manager"}, {path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, {
		file: "tiled-operator-previous.tar", tag: "docker.io/local/tiled-operator:previous",
		user: "65532:65532", entrypoint: []string{"/manager"}, account: "nonroot",
		owned: []owned{{path: "/manager"}, {path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, {
		file: "postgres.tar", tag: "docker.io/local/postgres:15",
		user: "999:999", entrypoint: []string{"docker-entrypoint.sh"}, cmd: []string{"postgres"},
		env:        map[string]string{"PATH": pgPath, "PGDATA": "/var/lib/postgresql/data", "LANG": "C.UTF-8"},
		stopSignal: "SIGINT", account: "postgres",
		commands: map[string]string{
			"docker-entrypoint.sh": "/usr/local/bin/docker-entrypoint.sh",
			// The probe's bare pg_isready must be the real binary, not Debian's perl wrapper.
			"pg_isready": "/usr/lib/postgresql/15/bin/pg_isready",
			"postgres":   "/usr/lib/postgresql/15/bin/postgres",
			"initdb":     "/usr/lib/postgresql/15/bin/initdb",
			"pg_ctl":     "/usr/lib/postgresql/15/bin/pg_ctl",
			"psql":       "/usr/lib/postgresql/15/bin/psql",
			"sh":         "/usr/bin/dash",
			"stat":       "/usr/bin/stat",
			// What the backup Jobs run: dumps, checksums, and S3 requests signed by curl --aws-sigv4.
			"pg_dump":    "/usr/lib/postgresql/15/bin/pg_dump",
			"pg_restore": "/usr/lib/postgresql/15/bin/pg_restore",
			"sha256sum":  "/usr/bin/sha256sum",
			"curl":       "/usr/bin/curl",
		},
		owned: []owned{
			{path: "/var/run/postgresql", uid: 999, gid: 999, dir: true},
			{path: "/var/lib/postgresql/data", uid: 999, gid: 999, dir: true},
			{path: "/docker-entrypoint-initdb.d", dir: true},
			{path: "/usr/share/postgresql/15/postgresql.conf.sample"},
			{path: "/etc/ssl/certs/ca-certificates.crt"},
		},
		absent:     []string{"/etc/postgresql/15/main", "/var/lib/postgresql/15/main", "/usr/sbin/policy-rc.d"},
		emptyFiles: []string{"/etc/resolv.conf"},
	}, {
		// The streaming cache: the operator runs `sh -c '... exec redis-server /tmp/redis.conf'` as
		// 999:999 with emptyDirs at /data and /tmp; redis-cli is there for probes and tests.
		file: "redis.tar", tag: "docker.io/local/redis:7.0",
		user: "999:999", cmd: []string{"redis-server"}, account: "redis",
		env: map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
		commands: map[string]string{
			// Debian's redis-server is a link to redis-check-rdb (one binary, chosen by its name).
			"redis-server": "/usr/bin/redis-check-rdb",
			"redis-cli":    "/usr/bin/redis-cli",
			"sh":           "/usr/bin/dash",
		},
		owned: []owned{
			{path: "/data", uid: 999, gid: 999, dir: true},
			{path: "/tmp", dir: true},
			{path: "/usr/share/doc/redis-server/copyright"},
		},
		absent:     []string{"/usr/sbin/policy-rc.d", "/var/lib/redis/dump.rdb"},
		emptyFiles: []string{"/etc/resolv.conf"},
	}, {
		// The S3 server of the backup tests; the pod gives its arguments and the posix root /data.
		file: "versitygw.tar", tag: "docker.io/local/versitygw:" + vgw,
		user: "65532:65532", entrypoint: []string{"/usr/local/bin/versitygw"}, account: "nonroot",
		env:      map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		commands: map[string]string{"versitygw": "/usr/local/bin/versitygw"},
		owned: []owned{{path: "/usr/local/bin/versitygw"}, {path: "/data", uid: 65532, gid: 65532, dir: true},
			{path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, {
		// The node's resource metrics API (hack/node/cluster.sh gives every argument; /tmp an emptyDir).
		file: "metrics-server.tar", tag: "docker.io/local/metrics-server:" + ms,
		user: "65532:65532", entrypoint: []string{"/metrics-server"}, account: "nonroot",
		env:   map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		owned: []owned{{path: "/metrics-server"}, {path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, {
		// The Prometheus of the e2e case 14 (the pod gives every argument; /prometheus its TSDB).
		file: "prometheus.tar", tag: "docker.io/local/prometheus:" + prom,
		user: "65532:65532", entrypoint: []string{"/bin/prometheus"}, account: "nonroot",
		env:      map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		commands: map[string]string{"prometheus": "/bin/prometheus"},
		owned: []owned{{path: "/bin/prometheus"}, {path: "/prometheus", uid: 65532, gid: 65532, dir: true},
			{path: "/home/nonroot", uid: 65532, gid: 65532, dir: true}, {path: "/tmp", dir: true}},
	}, tiledCase("tiled.tar", expansion.TiledVersion), tiledCase("tiled-"+oldest+".tar", oldest),
	} {
		t.Run(tc.file, func(t *testing.T) {
			g := NewWithT(t)
			a := open(t, filepath.Join(dir, tc.file))
			c := a.config.Config
			g.Expect(a.tags).To(Equal([]string{tc.tag}))
			g.Expect(a.layerCount).To(Equal(1))
			g.Expect(a.config.RootFS.DiffIDs).To(Equal([]string{a.layerSum}), "diff ID is the layer's digest")
			g.Expect(a.config.OS).To(Equal("linux"))
			g.Expect(c.User).To(Equal(tc.user))
			g.Expect(c.Entrypoint).To(Equal(tc.entrypoint))
			g.Expect(c.Cmd).To(Equal(tc.cmd))
			g.Expect(c.StopSignal).To(Equal(tc.stopSignal))
			for k, v := range tc.env {
				g.Expect(a.env(k)).To(Equal(v), "Env %s", k)
			}

			// What the container starts with must be an executable file in the layer.
			argv := append(append([]string{}, c.Entrypoint...), c.Cmd...)
			g.Expect(argv).NotTo(BeEmpty())
			p, h := a.lookPath(argv[0])
			g.Expect(h).NotTo(BeNil(), "%s (the first word of entrypoint+cmd) is not in the layer", argv[0])
			g.Expect(h.Typeflag).To(Equal(byte(tar.TypeReg)), "%s resolves to %s, a regular file", argv[0], p)
			g.Expect(h.Mode&0o111).NotTo(BeZero(), "%s is executable", p)
			for cmd, want := range tc.commands {
				got, h := a.lookPath(cmd)
				g.Expect(h).NotTo(BeNil(), "command %s through PATH", cmd)
				g.Expect(got).To(Equal(want), "command %s through PATH", cmd)
			}

			// A numeric USER must be an account of the image, and so must the named one.
			if tc.account != "" {
				uid, gid, ok := a.account(tc.account)
				g.Expect(ok).To(BeTrue(), "user %s in /etc/passwd", tc.account)
				g.Expect(fmt.Sprintf("%d:%d", uid, gid)).To(Equal(tc.user), "user %s", tc.account)
			}
			for _, o := range tc.owned {
				p, h := a.resolve(o.path)
				g.Expect(h).NotTo(BeNil(), "%s in the layer", o.path)
				g.Expect([]int{h.Uid, h.Gid}).To(Equal([]int{o.uid, o.gid}), "owner of %s (%s)", o.path, p)
				g.Expect(h.Typeflag == tar.TypeDir).To(Equal(o.dir), "%s is a directory: %v", o.path, o.dir)
			}
			for _, p := range tc.absent {
				_, h := a.resolve(p)
				g.Expect(h).To(BeNil(), "%s must not be in the image", p)
			}
			for _, p := range tc.emptyFiles {
				g.Expect(a.small[p]).To(BeEmpty(), "%s must be empty (the kubelet provides it)", p)
			}
			// The Tiled installed is the tag's: what `python -c 'import tiled; print(tiled.__version__)'`
			// prints (tiled/_version.py) and what pip reports (the one tiled dist-info's METADATA).
			if v := tc.tiledVersion; v != "" {
				g.Expect(string(a.small[tiledVersionPy])).To(MatchRegexp(`(?m)^__version__ = (version = )?'%s'$`, regexp.QuoteMeta(v)),
					"tiled.__version__ in %s", tiledVersionPy)
				var dists []string
				for p := range a.small {
					if strings.HasSuffix(p, ".dist-info/METADATA") {
						dists = append(dists, p)
					}
				}
				g.Expect(dists).To(ConsistOf(tiledMetadata(v)), "one tiled distribution, at %s", v)
				meta := string(a.small[tiledMetadata(v)])
				g.Expect(meta).To(MatchRegexp(`(?m)^Name: tiled\r?$`), "Name in %s", tiledMetadata(v))
				g.Expect(meta).To(MatchRegexp(`(?m)^Version: %s\r?$`, regexp.QuoteMeta(v)), "Version in %s", tiledMetadata(v))
			}
			// Nothing of the build machine's package lists is left.
			for p := range a.files {
				g.Expect(strings.HasPrefix(p, "/var/lib/apt/lists/") && !strings.HasSuffix(p, "/partial") &&
					p != "/var/lib/apt/lists/lock").To(BeFalse(), "apt list %s left in the image", p)
			}
		})
	}
}
